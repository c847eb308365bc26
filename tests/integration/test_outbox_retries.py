"""What becomes of a webhook job that fails, and of one that is done, on real SQLite and
PostgreSQL, against a real webhook receiver on loopback (tests/support/webhook_rig.py), with a
FakeClock driving the backoff.

Proves: failures are retried with exponential backoff and jitter under a stable delivery id
and identical body bytes; a receiver's Retry-After is honoured up to the backoff ceiling;
after the attempt limit the job is dead until requeued; a receiver's error page is read no
further than its message; delivered jobs are pruned after keep_done, dead ones kept.
"""

from __future__ import annotations

from datetime import timedelta

import aiohttp
import pytest
from aiohttp import web

from bot.clock import FakeClock
from bot.metrics import Metrics
from bot.routing import Directory
from store.repository import Store
from tests.support.webhook_rig import SETTINGS, Receiver, approved, job_of, webhook_runner


async def test_failures_back_off_then_die_then_retry_delivers(
    store: Store,
    hooked: Directory,
    clock: FakeClock,
    receiver: Receiver,
    session: aiohttp.ClientSession,
) -> None:
    approval = await approved(store, hooked, clock)
    metrics = Metrics()
    runner = webhook_runner(store, hooked, clock, session, metrics=metrics)
    receiver.status = 503
    gaps = []
    for attempt in range(1, SETTINGS.max_attempts + 1):
        assert await runner.run_once() == 1
        job = await job_of(store, approval.id)
        assert job.attempts == attempt
        if attempt < SETTINGS.max_attempts:
            assert job.state == "queued"
            assert "HTTP 503" in job.last_error
            gap = job.run_after - clock.now()
            gaps.append(gap.total_seconds())
            assert await runner.run_once() == 0  # not due yet
            clock.advance(gap)
    assert gaps == [10, 20, 40]  # base 10 s, doubling (jitter pinned at its maximum)
    job = await job_of(store, approval.id)
    assert job.state == "dead"
    clock.advance(hours=1)
    assert await runner.run_once() == 0  # the dead stay dead
    await metrics.refresh(store, clock.now())
    assert 'signoff_outbox_dead_jobs{kind="webhook"} 1.0' in metrics.render().decode()

    # Every attempt carried the same delivery id and the same bytes.
    assert len({h["webhook-id"] for h, _ in receiver.received}) == 1
    assert len({body for _, body in receiver.received}) == 1

    async with store.write() as tx:
        assert await tx.requeue_job(job.id, now=clock.now()) is not None
    receiver.status = 200
    assert await runner.run_once() == 1
    assert (await job_of(store, approval.id)).state == "done"
    assert len(receiver.received) == SETTINGS.max_attempts + 1


@pytest.mark.parametrize(
    ("retry_after", "wait"),
    [("120", timedelta(seconds=120)), ("99999999999", SETTINGS.backoff_max)],
    ids=["honoured", "capped at backoff_max"],
)
async def test_retry_after_is_honoured_within_the_backoff_ceiling(
    store: Store,
    hooked: Directory,
    clock: FakeClock,
    receiver: Receiver,
    session: aiohttp.ClientSession,
    retry_after: str,
    wait: timedelta,
) -> None:
    approval = await approved(store, hooked, clock)
    receiver.status, receiver.headers = 429, {"Retry-After": retry_after}
    await webhook_runner(store, hooked, clock, session).run_once()
    job = await job_of(store, approval.id)
    assert job.run_after - clock.now() == wait


async def test_a_receivers_error_page_is_read_no_further_than_its_message(
    store: Store, hooked: Directory, clock: FakeClock, session: aiohttp.ClientSession
) -> None:
    big = "E" * (5 * 1024 * 1024)

    async def error_page(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=500, text=big)

    app = web.Application()
    app.router.add_post("/hook", error_page)
    site_runner = web.AppRunner(app, access_log=None)
    await site_runner.setup()
    await web.TCPSite(site_runner, "127.0.0.1", 0).start()
    try:
        url = f"http://127.0.0.1:{site_runner.addresses[0][1]}/hook"
        approval = await approved(store, hooked, clock, "r-big", callback_url=url)
        await webhook_runner(store, hooked, clock, session).run_once()
    finally:
        await site_runner.cleanup()
    async with store.read() as tx:
        [job] = await tx.outbox_jobs(approval_id=approval.id)
    assert job.state == "queued" and job.attempts == 1
    assert job.last_error is not None and "HTTP 500" in job.last_error
    assert len(job.last_error) < 400


async def test_delivered_jobs_are_pruned_after_keep_done_and_dead_ones_kept(
    store: Store,
    hooked: Directory,
    clock: FakeClock,
    receiver: Receiver,
    session: aiohttp.ClientSession,
) -> None:
    delivered = await approved(store, hooked, clock, "r-ok")
    runner = webhook_runner(store, hooked, clock, session)
    assert await runner.run_once() == 1
    failing = await approved(store, hooked, clock, "r-dead")
    receiver.status = 500
    for _ in range(SETTINGS.max_attempts):
        await runner.run_once()
        clock.advance(SETTINGS.backoff_max)
    assert (await job_of(store, failing.id)).state == "dead"

    clock.set((await job_of(store, delivered.id)).done_at + SETTINGS.keep_done)
    assert await runner.prune() == 0  # exactly keep_done old: still kept
    clock.advance(seconds=1)
    assert await runner.prune() == 1
    async with store.read() as tx:
        assert await tx.outbox_jobs(approval_id=delivered.id) == []
    clock.advance(days=30)  # long past keep_done for the dead job too
    assert await runner.prune() == 0
    assert (await job_of(store, failing.id)).state == "dead"
