"""A burst of outbox jobs far larger than the runner's slots, on SQLite and PostgreSQL.

A FakeClock that never moves holds back for good any job put back to wait (a second, in
production), so these tests see only what the runner takes as its slots free up.

Proves: a burst past its kind's share, its destination's share and what the runner parks is
taken from the queue as slots free up, never put back to wait (in production its tail came out
a second at a time); no more run at once than the shares allow; and another kind's jobs,
queued behind the burst, run alongside it instead of after it.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta

from bot.clock import FakeClock
from bot.outbox.runner import OutboxRunner, OutboxSettings
from store.records import OutboxJob
from store.repository import Store

SETTINGS = OutboxSettings(
    lease=timedelta(minutes=5),
    concurrency=8,
    kind_share=0.5,  # four of a kind at once
    per_destination=3,  # ... three to one host
    per_tenant=32,
    # No poll comes to the rescue within a test: only commits and jobs ending wake the runner.
    poll_interval=30.0,
)
BURST = 60
OTHERS = 6


class Jobs:
    """Handlers that take a moment, counting what runs at once per kind and host."""

    def __init__(self) -> None:
        self.running: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self.done: list[tuple[str, int]] = []  # (kind, job id) in the order they ended
        self.all_done = asyncio.Event()

    def handler(self, kind: str):
        async def run(job: OutboxJob) -> None:
            keys = (f"kind:{kind}", f"url:{job.payload.get('url')}")
            for key in keys:
                self.running[key] += 1
                self.peak[key] = max(self.peak[key], self.running[key])
            try:
                await asyncio.sleep(0.01)
            finally:
                for key in keys:
                    self.running[key] -= 1
            self.done.append((kind, job.id))
            if len(self.done) == BURST + OTHERS:
                self.all_done.set()

        return run


async def _run_until_done(store: Store, clock: FakeClock, jobs: Jobs) -> None:
    runner = OutboxRunner(
        store, {"card": jobs.handler("card"), "webhook": jobs.handler("webhook")}, clock, SETTINGS
    )
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop))
    try:
        async with asyncio.timeout(20):
            await jobs.all_done.wait()
    finally:
        stop.set()
        await task


async def test_a_burst_past_every_share_is_taken_as_slots_free_up(
    store: Store, clock: FakeClock
) -> None:
    jobs = Jobs()
    async with store.write() as tx:
        for i in range(BURST):
            # Cards to two hosts: the destination's share binds before the kind's.
            await tx.enqueue("card", {"i": i, "url": f"http://chat{i % 2}.test/api"},
                             now=clock.now())  # fmt: skip
        for i in range(OTHERS):
            await tx.enqueue("webhook", {"i": i, "url": "http://hooks.test/in"},
                             now=clock.now())  # fmt: skip
    await _run_until_done(store, clock, jobs)

    assert jobs.peak["kind:card"] <= 4
    assert jobs.peak["url:http://chat0.test/api"] <= 3
    assert jobs.peak["url:http://chat1.test/api"] <= 3
    # Each job ran once, and nothing is left in the queue.
    assert sorted(i for _, i in jobs.done) == sorted(set(i for _, i in jobs.done))
    async with store.read() as tx:
        left = [job for job in await tx.outbox_jobs() if job.state != "done"]
    assert left == []


async def test_another_kind_queued_behind_a_burst_runs_alongside_it(
    store: Store, clock: FakeClock
) -> None:
    jobs = Jobs()
    async with store.write() as tx:
        for i in range(BURST):
            await tx.enqueue("card", {"i": i}, now=clock.now())
    async with store.write() as tx:
        for i in range(OTHERS):
            await tx.enqueue("webhook", {"i": i}, now=clock.now())
    await _run_until_done(store, clock, jobs)

    order = [kind for kind, _ in jobs.done]
    last_webhook = max(n for n, kind in enumerate(order) if kind == "webhook")
    # Four cards at a time, four webhook slots beside them: the webhooks are done while
    # most of the burst still waits its turn.
    assert order[: last_webhook + 1].count("card") < BURST // 2, order
