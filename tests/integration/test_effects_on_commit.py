"""Effects follow a commit at once: the outbox runner is told when a transaction that queued
jobs commits, in its own process (Store.write) and in another (PostgreSQL NOTIFY, SQLite's
data_version), so with a 10 s poll a decision's webhook job still runs within a moment.
Real SQLite files and PostgreSQL; the second process is a second Store (its own connections,
its own in-process listeners); tests/acceptance/test_effects_on_commit.py does it with
`signoff serve` and the CLI.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

import pytest

from bot.clock import FakeClock, SystemClock
from bot.intake import create_request
from bot.operator import Actor, Operator
from bot.outbox.runner import OutboxRunner, OutboxSettings
from bot.routing import Directory
from store import commits
from store.records import Approval
from store.repository import Store
from tests.support.samples import make_request
from tests.support.store_writes import count_writes

# Without a wake-up the runner would look again only after 10 s.
SLOW_POLL = OutboxSettings(poll_interval=10.0)
# Well under the poll, with room for a loaded CI machine.
AT_ONCE = 1.5
HOUR = timedelta(hours=1)


class Ran:
    """A webhook handler that notes when each approval's job ran."""

    def __init__(self) -> None:
        self.at: dict[str, float] = {}
        self.changed = asyncio.Event()

    async def __call__(self, job: object) -> None:
        self.at[job.approval_id] = time.monotonic()  # type: ignore[attr-defined]
        self.changed.set()

    async def when(self, approval_id: str) -> float:
        """When its job ran; waits (the caller bounds the wait)."""
        while approval_id not in self.at:
            self.changed.clear()
            await self.changed.wait()
        return self.at[approval_id]


@asynccontextmanager
async def running(store: Store, clock: FakeClock) -> AsyncIterator[Ran]:
    ran = Ran()
    runner = OutboxRunner(store, {"webhook": ran}, clock, SLOW_POLL)
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop, drain=0.1))
    await asyncio.sleep(0.3)  # past its first look at the queue, and watching
    try:
        yield ran
    finally:
        stop.set()
        await task


async def requested(store: Store, directory: Directory, clock: FakeClock, run_id: str) -> Approval:
    created = await create_request(store, directory, clock, "acme", make_request(run_id=run_id))
    return created.approval


async def approve(store: Store, directory: Directory, clock: FakeClock, approval: Approval) -> None:
    """The decision whose webhook job the tests time (from just before it: the create
    before it, and a second process's first connection, are not what is timed)."""
    await Operator(store, directory, clock).approve_shown(
        approval.id, approval.hash, Actor("alice", "cli")
    )


async def test_a_decision_in_this_process_runs_its_webhook_job_at_once(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    async with running(store, clock) as ran:
        approval = await requested(store, directory, clock, "r-here")
        started = time.monotonic()
        await approve(store, directory, clock, approval)
        assert await asyncio.wait_for(ran.when(approval.id), AT_ONCE) - started < AT_ONCE


async def test_a_decision_committed_by_another_process_runs_its_webhook_job_at_once(
    store: Store, db_url: str, directory: Directory, clock: FakeClock
) -> None:
    other = Store.from_url(db_url)
    try:
        async with running(store, clock) as ran:
            for run_id in ("r-there-1", "r-there-2"):  # and again: the watcher keeps watching
                approval = await requested(other, directory, clock, run_id)
                started = time.monotonic()
                await approve(other, directory, clock, approval)
                assert await asyncio.wait_for(ran.when(approval.id), AT_ONCE) - started < AT_ONCE
    finally:
        await other.close()


async def test_after_a_quiet_while_another_process_commit_still_wakes_the_runner_at_once(
    store: Store,
    db_url: str,
    directory: Directory,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An idle SQLite watcher looks at the log less often (every 200 ms, not 25 ms) once it
    has been still a while; a commit then is still seen well within a moment."""
    monkeypatch.setattr(commits, "SQLITE_STILL_AFTER", 0.05)
    other = Store.from_url(db_url)
    try:
        async with running(store, clock) as ran:
            approval = await requested(other, directory, clock, "r-quiet")
            await asyncio.sleep(0.5)  # long enough to be looking at its slowest
            started = time.monotonic()
            await approve(other, directory, clock, approval)
            assert await asyncio.wait_for(ran.when(approval.id), AT_ONCE) - started < AT_ONCE
    finally:
        await other.close()


async def test_an_idle_runner_polls_without_writing_and_runs_a_job_whose_time_came(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each idle poll reads (is anything due?) instead of taking the write lock for a claim
    that finds nothing; a job queued for later still runs at the first poll after its time."""
    async with store.write() as tx:
        await tx.enqueue("webhook", {}, now=clock.now(), run_after=clock.now() + HOUR)
    first_pass = asyncio.Event()

    def counted(writes: list[bool]) -> None:
        if len(writes) == 2:
            first_pass.set()

    ran = Ran()
    runner = OutboxRunner(store, {"webhook": ran}, clock, OutboxSettings(poll_interval=0.02))
    stop = asyncio.Event()
    writes = count_writes(store, monkeypatch, counted)
    task = asyncio.create_task(runner.run(stop, drain=0.1))
    try:
        # The first pass writes twice (prune, then a claim that finds nothing due); waited
        # for, not slept for, so a loaded machine cannot count them as idle polls.
        await asyncio.wait_for(first_pass.wait(), 10)
        writes.clear()
        await asyncio.sleep(0.3)  # about 15 polls
        assert writes == []
        assert ran.at == {}
        clock.advance(HOUR)
        await asyncio.wait_for(ran.changed.wait(), AT_ONCE)
        assert writes  # the claim (and its settle) of the job that came due
    finally:
        stop.set()
        await task


async def test_polls_while_a_slow_job_runs_do_not_write(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job in flight (a slow receiver) does not turn every poll into a claim: with nothing
    else due, the runner reads, as when idle (on SQLite each claim took the write lock that
    people's decisions wait for)."""
    async with store.write() as tx:
        await tx.enqueue("webhook", {}, now=clock.now())
    release = asyncio.Event()
    started = asyncio.Event()

    async def slow(_job: object) -> None:
        started.set()
        await release.wait()

    wrote = asyncio.Event()
    runner = OutboxRunner(store, {"webhook": slow}, clock, OutboxSettings(poll_interval=0.02))
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop, drain=1.0))
    try:
        await asyncio.wait_for(started.wait(), 10)
        writes = count_writes(store, monkeypatch, lambda _: wrote.set())
        await asyncio.sleep(0.3)  # about 15 polls while the job runs
        assert writes == []
        release.set()
        await asyncio.wait_for(wrote.wait(), 10)  # its settle
    finally:
        stop.set()
        release.set()
        await task


async def test_after_idle_polls_a_decision_still_runs_its_webhook_at_once(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    """An idle runner's waits grow (up to 8 polls), but a commit still wakes it at once."""
    ran = Ran()
    runner = OutboxRunner(store, {"webhook": ran}, clock, OutboxSettings(poll_interval=1.0))
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop, drain=0.1))
    try:
        approval = await requested(store, directory, clock, "r-after-idle")
        await asyncio.sleep(1.5)  # one idle poll read nothing; the next wait is 2 s
        started = time.monotonic()
        await approve(store, directory, clock, approval)
        assert await asyncio.wait_for(ran.when(approval.id), AT_ONCE) - started < 1.0
    finally:
        stop.set()
        await task


async def test_an_idle_runner_wakes_for_a_job_queued_for_later_when_its_time_comes(
    store: Store,
) -> None:
    """Between idle reads the runner waits until the next job falls due, not a whole
    stretched poll: a retry due in 1.5 s runs then, not seconds later."""
    clock = SystemClock()
    ran = Ran()
    runner = OutboxRunner(store, {"webhook": ran}, clock, OutboxSettings(poll_interval=1.0))
    stop = asyncio.Event()
    started = time.monotonic()
    async with store.write() as tx:
        await tx.enqueue(
            "webhook", {}, now=clock.now(), run_after=clock.now() + timedelta(seconds=1.5)
        )
    task = asyncio.create_task(runner.run(stop, drain=0.1))
    try:
        await asyncio.wait_for(ran.changed.wait(), 5)
        # Without the due time, the wait after the first idle read (at 1 s) would be 2 s.
        assert 1.4 < time.monotonic() - started < 2.5
    finally:
        stop.set()
        await task


async def test_a_rolled_back_transaction_wakes_nothing(store: Store, clock: FakeClock) -> None:
    woken: list[None] = []
    store.commits.subscribe(lambda: woken.append(None))

    class Abandoned(Exception):
        pass

    try:
        async with store.write() as tx:
            await tx.enqueue("webhook", {}, now=clock.now())
            raise Abandoned
    except Abandoned:
        pass
    assert woken == []
    async with store.write() as tx:
        await tx.enqueue("webhook", {}, now=clock.now())
        await tx.enqueue("webhook", {}, now=clock.now())
    assert woken == [None]  # once per transaction
