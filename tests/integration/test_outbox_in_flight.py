"""What the outbox runner keeps in flight while a receiver hangs or the server is busy, on
real SQLite and PostgreSQL, against real webhook receivers on loopback
(tests/support/webhook_rig.py).

Proves: a receiver that accepts and never answers does not hold up other webhooks, its own
tenant's or another tenant's (its destination takes at most its share of the runner's slots);
while the server's event loop runs late the runner keeps only busy_concurrency jobs in
flight, and catches up once the loop is on time again.
"""

from __future__ import annotations

import asyncio
import copy
import time

import aiohttp
import pytest

from bot.app import outbox_settings
from bot.clock import FakeClock
from bot.config import parse_config
from bot.intake import create_request
from bot.operator import Actor, Operator
from bot.outbox.runner import OutboxRunner
from bot.routing import Directory
from store.repository import Store
from tests.support.samples import TEST_CONFIG, make_request
from tests.support.webhook_rig import SETTINGS, Receiver, approved, serving, webhook_runner


async def test_a_hung_receiver_does_not_hold_up_other_webhooks(
    store: Store,
    hooked: Directory,
    clock: FakeClock,
    receiver: Receiver,
    session: aiohttp.ClientSession,
) -> None:
    receiver.gate = asyncio.Event()  # the tenant's receiver accepts and never answers
    await approved(store, hooked, clock, "r-slow")
    runner = webhook_runner(store, hooked, clock, session)
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop, drain=0.1))
    try:
        await asyncio.wait_for(receiver.arrived.wait(), 5)
        async with serving() as other:
            fast = await approved(store, hooked, clock, "r-fast", callback_url=other.url)
            runner.wake()
            # Well inside the hung delivery's 10 s timeout.
            await asyncio.wait_for(other.arrived.wait(), 5)
            [(headers, _)] = other.received
            assert headers["webhook-id"] == f"{fast.id}.2"
    finally:
        stop.set()
        await task


@pytest.mark.alone  # it measures the event loop's lag
async def test_while_the_server_is_busy_the_outbox_keeps_busy_concurrency_jobs_in_flight(
    store: Store, hooked: Directory, clock: FakeClock
) -> None:
    config = copy.deepcopy(TEST_CONFIG)
    config["outbox"] = {
        "concurrency": 16,
        "busy_concurrency": 2,
        "busy_lag": 0.01,
        "per_destination": 16,
        "per_tenant": 16,
        "poll_interval": 0.01,
    }
    settings = outbox_settings(parse_config(config))
    gate = asyncio.Event()
    in_flight = 0
    changed = asyncio.Condition()

    async def held(job: object) -> None:
        nonlocal in_flight
        async with changed:
            in_flight += 1
            changed.notify_all()
        await gate.wait()
        in_flight -= 1

    async def flood() -> None:
        # What a flood of requests does to the server's loop: every turn runs 20 ms late.
        while True:
            time.sleep(0.02)  # noqa: ASYNC251 - blocking the loop is the point
            await asyncio.sleep(0)

    async def until(count: int) -> None:
        async with changed:
            await changed.wait_for(lambda: in_flight == count)

    # Twelve webhook jobs, due a minute from the runner's start.
    start = clock.now()
    clock.advance(minutes=1)
    for i in range(12):
        await approved(store, hooked, clock, f"r-{i}")
    due = clock.now()
    clock.set(start)
    runner = OutboxRunner(store, {"webhook": held}, clock, settings)
    stop = asyncio.Event()
    busy = asyncio.create_task(flood())
    task = asyncio.create_task(runner.run(stop, drain=0.1))
    try:
        await asyncio.sleep(0.2)  # the runner has seen the loop running late
        clock.set(due)
        runner.wake()
        await asyncio.wait_for(until(2), 5)
        await asyncio.sleep(0.3)  # ten more jobs are due meanwhile
        assert in_flight == 2
        busy.cancel()
        # The flood is over: the runner catches up (12 = its kind's share of 16 slots).
        await asyncio.wait_for(until(12), 5)
    finally:
        busy.cancel()
        gate.set()
        stop.set()
        await task


async def test_a_tenant_whose_receiver_hangs_does_not_delay_another_tenants_webhook(
    store: Store, receiver: Receiver, clock: FakeClock, session: aiohttp.ClientSession
) -> None:
    """Forty webhooks to a receiver that accepts and never answers take at most their
    destination's share of the runner's slots; the other tenant's webhook goes out at once
    instead of after the hung ones' timeout."""
    receiver.gate = asyncio.Event()  # acme's receiver hangs
    async with serving() as other:
        config = copy.deepcopy(TEST_CONFIG)
        config["tenants"] = [
            {"name": "acme", "webhook_url": receiver.url, "webhook_secret_env": "ACME_SECRET"},
            {"name": "globex", "webhook_url": other.url, "webhook_secret_env": "ACME_SECRET"},
        ]
        directory = parse_config(config).directory()
        for i in range(40):
            await approved(store, directory, clock, f"r-{i}")
        created = await create_request(
            store, directory, clock, "globex", make_request(capability="billing.refund")
        )
        await Operator(store, directory, clock).approve_shown(
            created.approval.id, created.approval.hash, Actor("dave", "cli")
        )
        runner = webhook_runner(store, directory, clock, session)
        stop = asyncio.Event()
        task = asyncio.create_task(runner.run(stop, drain=0.1))
        try:
            await asyncio.wait_for(other.arrived.wait(), 5)  # the hung ones wait 10 s
            assert len(receiver.received) <= SETTINGS.per_destination
        finally:
            stop.set()
            receiver.gate.set()
            await task
