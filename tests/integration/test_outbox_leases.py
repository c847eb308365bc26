"""Who runs an outbox job, and only once, on real SQLite and PostgreSQL, against a real
webhook receiver on loopback (tests/support/webhook_rig.py), with a FakeClock driving leases.

Proves: a job whose worker died is taken over after its lease (and the dead worker cannot
settle it any more); two runners sharing the queue never run one job twice while its lease
holds; stopping releases held jobs without counting the attempt; a job outliving its own lease
is not started a second time by its worker; and the handler table has a handler for every
kind of job a transition can queue.
"""

from __future__ import annotations

import asyncio
import copy
from datetime import timedelta

import aiohttp
import pytest

from bot.app import outbox_handlers
from bot.clock import FakeClock
from bot.config import parse_config
from bot.outbox.jobs import JobKind
from bot.outbox.runner import OutboxRunner, OutboxSettings
from bot.routing import Directory
from store.repository import Store
from tests.support.samples import TEST_CONFIG
from tests.support.webhook_rig import SETTINGS, Receiver, approved, job_of, webhook_runner


async def test_a_dead_workers_job_is_taken_over_after_its_lease(
    store: Store,
    hooked: Directory,
    clock: FakeClock,
    receiver: Receiver,
    session: aiohttp.ClientSession,
) -> None:
    approval = await approved(store, hooked, clock)
    receiver.gate = asyncio.Event()
    crashed = webhook_runner(store, hooked, clock, session, holder="crashed")
    stuck = asyncio.create_task(crashed.run_once())
    await receiver.arrived.wait()
    stuck.cancel()  # the process dies mid-delivery: no release, no settle
    with pytest.raises(asyncio.CancelledError):
        await stuck
    assert (await job_of(store, approval.id)).locked_by == "crashed"

    receiver.gate.set()
    survivor = webhook_runner(store, hooked, clock, session, holder="survivor")
    assert await survivor.run_once() == 0  # the lease still holds
    clock.advance(SETTINGS.lease)
    assert await survivor.run_once() == 1
    job = await job_of(store, approval.id)
    assert (job.state, job.attempts) == ("done", 2)
    # The crashed worker, were it to come back, can no longer settle the job.
    async with store.write() as tx:
        assert not await tx.finish_job(job.id, "crashed", now=clock.now())


async def test_two_runners_never_run_a_leased_job_twice(
    db_url: str,
    hooked: Directory,
    clock: FakeClock,
    receiver: Receiver,
    session: aiohttp.ClientSession,
) -> None:
    stores = [Store.from_url(db_url), Store.from_url(db_url)]
    try:
        approvals = [await approved(stores[0], hooked, clock, f"r-{i}") for i in range(30)]
        runners = [
            webhook_runner(s, hooked, clock, session, holder=f"w{i}") for i, s in enumerate(stores)
        ]

        async def drain(runner: OutboxRunner) -> int:
            total = 0
            while n := await runner.run_once():
                total += n
            return total

        counts = await asyncio.gather(*(drain(r) for r in runners))
        assert sum(counts) == 30
        deliveries = [h["webhook-id"] for h, _ in receiver.received]
        assert sorted(deliveries) == sorted(f"{a.id}.2" for a in approvals)
    finally:
        for s in stores:
            await s.close()


async def test_stopping_releases_held_jobs_without_counting_the_attempt(
    store: Store,
    hooked: Directory,
    clock: FakeClock,
    receiver: Receiver,
    session: aiohttp.ClientSession,
) -> None:
    approval = await approved(store, hooked, clock)
    receiver.gate = asyncio.Event()
    runner = webhook_runner(store, hooked, clock, session)
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop))
    await receiver.arrived.wait()
    stop.set()
    task.cancel()  # shutdown gave up waiting on the in-flight delivery
    with pytest.raises(asyncio.CancelledError):
        await task
    job = await job_of(store, approval.id)
    assert (job.state, job.locked_by, job.attempts) == ("queued", None, 0)


async def test_a_job_outliving_its_own_lease_is_not_started_twice_by_its_worker(
    store: Store, hooked: Directory, clock: FakeClock
) -> None:
    approval = await approved(store, hooked, clock)
    calls = 0
    gate = asyncio.Event()
    started = asyncio.Event()

    async def slow(job: object) -> None:
        nonlocal calls
        calls += 1
        started.set()
        await gate.wait()

    settings = OutboxSettings(lease=timedelta(seconds=30), poll_interval=0.01)
    runner = OutboxRunner(store, {"webhook": slow}, clock, settings, holder="w1")
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop))
    await started.wait()
    clock.advance(seconds=31)  # the lease runs out while the attempt is in flight
    for _ in range(20):  # let the runner poll (and re-claim) a few times
        await asyncio.sleep(0.01)
    gate.set()
    stop.set()
    await task
    assert calls == 1
    assert (await job_of(store, approval.id)).state == "done"


async def test_the_handler_table_performs_every_kind_of_job_a_transition_can_queue(
    store: Store, clock: FakeClock
) -> None:
    """A job kind without a handler would sit queued forever: the one table the server,
    the worker and the test servers use covers every JobKind, and one that leaves webhooks
    out must say so rather than get a table that silently lacks them."""
    directory = parse_config(copy.deepcopy(TEST_CONFIG)).directory()
    async with aiohttp.ClientSession() as session:
        table = outbox_handlers(store, directory, clock, {}, session)
    assert set(table) == set(JobKind)
    assert all(callable(handler) for handler in table.values())
    chat_only = outbox_handlers(store, directory, clock, {}, kinds=[JobKind.POST_CARD])
    assert set(chat_only) == {JobKind.POST_CARD}
    with pytest.raises(ValueError, match="webhook jobs need an HTTP session"):
        outbox_handlers(store, directory, clock, {})
