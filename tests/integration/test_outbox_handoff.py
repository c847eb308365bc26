"""Jobs queued in a process whose outbox runner runs are born leased to that runner and
handed to it at commit (store/commits.py, bot/outbox/runner.py): no claim, and on
PostgreSQL no NOTIFY, stands between a create or a decision and its card or webhook.

Proves, on SQLite and PostgreSQL: the job runs once, leased to this runner from its first
moment; a runner that dies holding such a job loses it only until its lease runs out, when
another replica takes it; a runner with no room leaves new jobs in the queue for any replica
to claim; and a transaction that rolls back hands nothing over.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from bot.clock import FakeClock
from bot.outbox.runner import OutboxRunner, OutboxSettings
from store.outbox import NewJob
from store.records import OutboxJob
from store.repository import Store

SETTINGS = OutboxSettings(
    lease=timedelta(minutes=1), concurrency=2, kind_share=1.0, poll_interval=30.0
)


class Hands:
    """A handler that records each job it is given and, while `hang` is set, never ends
    (a runner stuck, or a process about to be killed)."""

    def __init__(self, hang: bool = False) -> None:
        self.seen: list[OutboxJob] = []
        self.hang = hang
        self.arrived = asyncio.Event()

    async def __call__(self, job: OutboxJob) -> None:
        self.seen.append(job)
        self.arrived.set()
        if self.hang:
            await asyncio.Event().wait()


async def _queue(store: Store, clock: FakeClock, n: int = 1, key: str = "job") -> None:
    async with store.write() as tx:
        for i in range(n):
            await tx.enqueue("webhook", {"n": i}, now=clock.now(), dedupe_key=f"{key}-{i}")


async def _jobs(store: Store) -> list[OutboxJob]:
    async with store.read() as tx:
        return await tx.outbox_jobs()


async def _done(store: Store) -> bool:
    return (await _jobs(store))[0].state == "done"


async def _until(holds: Callable[[], Awaitable[bool] | bool]) -> None:
    """Wait (at most 2 s) until `holds()` is true."""
    for _ in range(200):
        outcome = holds()
        if await outcome if inspect.isawaitable(outcome) else outcome:
            return
        await asyncio.sleep(0.01)


@asynccontextmanager
async def _running(
    store: Store,
    clock: FakeClock,
    hands: Hands,
    holder: str,
    settings: OutboxSettings = SETTINGS,
) -> AsyncIterator[OutboxRunner]:
    """A runner performing `hands`, running and taking this process's jobs; stopped after."""
    runner = OutboxRunner(store, {"webhook": hands}, clock, settings, holder=holder)
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop, drain=0.01))
    try:
        await _until(lambda: store.commits.taker is runner)
        yield runner
    finally:
        stop.set()
        await task


async def test_a_job_queued_beside_the_runner_is_leased_to_it_in_the_commit(
    store: Store, clock: FakeClock
) -> None:
    hands = Hands()
    async with _running(store, clock, hands, "here"):
        await _queue(store, clock)
        # Leased in the commit itself: another replica claiming at once finds nothing.
        replica = OutboxRunner(store, {"webhook": Hands()}, clock, SETTINGS, holder="replica")
        assert await replica.run_once() == 0
        async with asyncio.timeout(5):
            await hands.arrived.wait()
        (job,) = hands.seen
        assert (job.locked_by, job.attempts) == ("here", 1)
        assert job.locked_until == clock.now() + SETTINGS.lease
        await _until(lambda: _done(store))
        assert [(j.state, j.attempts) for j in await _jobs(store)] == [("done", 1)]


class Died:
    """The runner of a process killed right after the commit: it leased the job, and never
    ran it nor handed it back."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    def lease(self, kind: str) -> tuple[str, datetime]:
        return "died", self.clock.now() + SETTINGS.lease

    def take(self, jobs: list[OutboxJob], leased: int) -> None:
        pass


async def test_a_job_held_by_a_runner_that_died_is_taken_after_its_lease(
    store: Store, clock: FakeClock
) -> None:
    undo = store.commits.hand_to(Died(clock))
    await _queue(store, clock)
    undo()
    [held] = await _jobs(store)
    assert (held.state, held.locked_by, held.attempts) == ("queued", "died", 1)

    other = Hands()
    replica = OutboxRunner(store, {"webhook": other}, clock, SETTINGS, holder="replica")
    assert await replica.run_once() == 0  # still leased to the dead runner
    clock.advance(SETTINGS.lease + timedelta(seconds=1))
    assert await replica.run_once() == 1
    assert [job.id for job in other.seen] == [held.id]
    assert [(j.state, j.attempts) for j in await _jobs(store)] == [("done", 2)]


async def test_a_runner_with_no_room_leaves_new_jobs_to_any_replica(
    store: Store, clock: FakeClock
) -> None:
    stuck = Hands(hang=True)
    async with _running(store, clock, stuck, "busy"):
        # As many as it runs, then as many again, parked: it has no more room.
        await _queue(store, clock, n=SETTINGS.concurrency, key="first")
        await _until(lambda: len(stuck.seen) == SETTINGS.concurrency)
        await _queue(store, clock, n=SETTINGS.concurrency, key="second")
        assert [job.locked_by for job in await _jobs(store)] == ["busy"] * 2 * SETTINGS.concurrency
        await _queue(store, clock, key="more")  # queued for anyone

        other = Hands()
        replica = OutboxRunner(store, {"webhook": other}, clock, SETTINGS, holder="replica")
        assert await replica.run_once() == 1
        assert [job.payload for job in other.seen] == [{"n": 0}]
        assert other.seen[0].dedupe_key == "more-0"


async def test_a_transaction_that_rolls_back_hands_nothing_over(
    store: Store, clock: FakeClock
) -> None:
    hands = Hands()
    async with _running(store, clock, hands, "here"):
        with pytest.raises(RuntimeError):
            async with store.write() as tx:
                await tx.enqueue("webhook", {"n": 0}, now=clock.now(), dedupe_key="gone")
                raise RuntimeError("the change failed after queueing its effect")
        await _queue(store, clock, key="kept")
        async with asyncio.timeout(5):
            await hands.arrived.wait()
        await asyncio.sleep(0.05)
        assert [job.dedupe_key for job in hands.seen] == ["kept-0"]
        assert [job.dedupe_key for job in await _jobs(store)] == ["kept-0"]


async def test_a_job_falling_due_is_claimed_while_jobs_keep_being_handed_over(
    store: Store, clock: FakeClock
) -> None:
    # Nothing wakes the runner for a retry or a put-back job falling due; a claim per poll
    # interval finds it, even while hand-overs keep waking the runner.
    settings = replace(SETTINGS, poll_interval=0.05, concurrency=8)
    hands = Hands()
    async with _running(store, clock, hands, "here", settings):
        later = clock.now() + timedelta(seconds=30)
        async with store.write() as tx:
            await tx.enqueue("webhook", {}, now=clock.now(), run_after=later, dedupe_key="later")
        await asyncio.sleep(0.1)  # the claim its commit woke found it not yet due
        clock.advance(timedelta(seconds=31))
        async with asyncio.timeout(5):
            for i in range(500):
                if any(job.dedupe_key == "later" for job in hands.seen):
                    break
                await _queue(store, clock, key=f"steady-{i}")  # handed over every 10 ms
                await asyncio.sleep(0.01)
        assert any(job.dedupe_key == "later" for job in hands.seen)


async def test_jobs_queued_in_one_statement_are_leased_while_the_runner_has_room(
    store: Store, clock: FakeClock
) -> None:
    """A transition's jobs go in one INSERT (`Tx.enqueue_all`): as many as the runner has
    room for are leased to it, the rest are left to any replica, and one asked for twice is
    queued once."""
    stuck = Hands(hang=True)
    async with _running(store, clock, stuck, "busy"):
        await _queue(store, clock, n=SETTINGS.concurrency, key="first")  # it runs these
        await _until(lambda: len(stuck.seen) == SETTINGS.concurrency)
        jobs = [NewJob("webhook", {"n": i}, dedupe_key=f"together-{i}") for i in range(4)]
        async with store.write() as tx:
            await tx.enqueue_all([*jobs, jobs[0]], now=clock.now())
        queued = [j for j in await _jobs(store) if j.dedupe_key.startswith("together")]
        assert [(j.dedupe_key, j.locked_by, j.attempts) for j in queued] == [
            ("together-0", "busy", 1),  # parked: it has room for two more
            ("together-1", "busy", 1),
            ("together-2", None, 0),
            ("together-3", None, 0),
        ]
        other = Hands()
        replica = OutboxRunner(store, {"webhook": other}, clock, SETTINGS, holder="replica")
        assert await replica.run_once() == 2
        assert [job.payload for job in other.seen] == [{"n": 2}, {"n": 3}]
