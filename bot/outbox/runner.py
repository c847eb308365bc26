"""The transactional outbox runner: performs the jobs transitions queued (decision webhooks,
card posts and updates), from any replica, at least once.

A runner claims a batch of due jobs with a lease (FOR UPDATE SKIP LOCKED on PostgreSQL, a
conditional lease update inside SQLite's single-writer transaction), runs them, and settles
each: done; back in the queue after an exponential backoff with jitter; or dead after
`max_attempts`, until `signoff outbox retry ID`. A failure no retry can change
(`Undeliverable`: a Slack channel that is gone, a Telegram bot that was blocked) is dead at
once, with the platform's reason. A rate limit that says how long to wait (`RetryLater` with a
delay: HTTP 429 with Retry-After, Telegram's flood control) waits that long without using up
an attempt, for `rate_limited_for` after the job was queued; after that each wait counts, so
a destination answering 429 forever still ends. A runner killed mid-job leaves its lease to
run out, and any replica then picks the job up again. The settle is conditional on still
holding the lease, so a slow runner can never overwrite the outcome of the one that took over.

The outbox is kept cheap and out of the way of people's requests: outcomes that arrive
together are settled in one write transaction, with what their handlers had to write down
(`Record`: a posted card's message); its writes are background ones, which on SQLite wait
behind the requests' (store.turns.WriteTurns); and while the event loop runs late, few
jobs are in flight.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import random
import socket
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, Literal

from bot.admission import LoopLag
from bot.clock import Clock, SystemClock
from bot.errors import RetryLater, Undeliverable
from bot.metrics import Metrics
from bot.outbox.settings import OutboxSettings, backoff
from bot.outbox.settler import Record, Settler
from bot.outbox.shares import Shares
from store.records import OutboxJob
from store.repository import Store

log = logging.getLogger("signoff.outbox")


def _put_back(future: asyncio.Future[bool]) -> None:
    """Log a job over its share that could not be put back (it returns after its lease)."""
    if not future.cancelled() and future.exception() is not None:
        log.error("could not put back an outbox job over its share: %s", future.exception())


_PRUNE_EVERY = timedelta(minutes=10)
# The longest an idle runner waits between reads, in polls (see OutboxRunner.run).
_IDLE_POLLS = 8

SKIPPED = "skipped"


# A handler returns None when it did the job, SKIPPED when there was nothing it could do (a
# card for a chat surface this deployment does not run), or a Record when it did the job and
# has something to write down: the job is settled in each case, and the metrics tell done
# from skipped.
Handler = Callable[[OutboxJob], Awaitable[str | Record | None]]
# The dead-job reason when a job used up its attempts (an Undeliverable names its own).
EXHAUSTED = "max_attempts"
# How an attempt ended, for the shares of its destination.
Attempted = Literal["delivered", "failed", "timed out"]


def holder_name() -> str:
    """What this runner's leases are held under (`outbox.locked_by`): host, process and a
    random tail, so two runners of one process (or a restarted pid) never share a name."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class OutboxRunner:
    def __init__(
        self,
        store: Store,
        handlers: Mapping[str, Handler],
        clock: Clock | None = None,
        settings: OutboxSettings | None = None,
        *,
        metrics: Metrics | None = None,
        holder: str | None = None,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.store = store
        self.handlers = dict(handlers)
        self.clock = clock or SystemClock()
        self.settings = settings or OutboxSettings()
        self.metrics = metrics
        self.holder = holder or holder_name()
        self._rand = rand
        self._wake = asyncio.Event()
        self.shares = Shares(self.settings, lambda n: backoff(n, self.settings, self._rand))
        self._lag: LoopLag | None = None  # the process's probe, while `run` runs
        # While `run` runs: its jobs in flight and parked, and the jobs this process's
        # transactions queued leased to it, not yet picked up (`take`).
        self._running: dict[int, asyncio.Task[None]] | None = None
        self._parked: dict[int, tuple[OutboxJob, datetime]] = {}
        self._handed: list[OutboxJob] = []
        self._promised = 0  # leases given to transactions still open
        # Whether the next pass claims: not when only handed jobs woke it, unless a poll
        # interval went by since the last claim (retries and put-back jobs fall due unseen).
        self._claim_asked = True
        self._next_claim = 0.0  # loop time
        self._settler = Settler(
            store, self.holder, self.clock, self._settle_window, self.settings.batch
        )

    def _settle_window(self) -> float:
        """How long the first outcome of a settle waits for others (`OutboxSettings`)."""
        busy = self._lag is not None and self._lag.late > self.settings.busy_lag
        return self.settings.busy_settle_window if busy else self.settings.settle_window

    def wake(self) -> None:
        """New jobs were committed: look now, not at the next poll. `run` calls it on every
        commit that queued jobs, in this process or another (store/commits.py)."""
        self._claim_asked = True
        self._wake.set()

    def lease(self, kind: str) -> tuple[str, datetime] | None:
        """Whether a job of `kind` queued now in this process is this runner's from birth
        (store/commits.py): while `run` runs, handles the kind and has room to start or park
        it (`_admitted`); then the holder and the lease's end to write with it."""
        if self._running is None or kind not in self.handlers:
            return None
        waiting = len(self._parked) + len(self._handed) + self._promised
        if waiting >= self.settings.concurrency:
            return None
        self._promised += 1
        return self.holder, self.clock.now() + self.settings.lease

    def take(self, jobs: list[OutboxJob], leased: int) -> None:
        """A transaction that had `leased` leases from `lease` ended; `jobs`, committed, run
        as if just claimed (none if it rolled back)."""
        self._promised = max(self._promised - leased, 0)
        if jobs:
            self._handed.extend(jobs)
            self._wake.set()

    async def _claim(self, limit: int, kinds: list[str]) -> list[OutboxJob]:
        now = self.clock.now()
        # One UPDATE ... RETURNING takes the batch: no transaction of its own needed. Should
        # the answer be lost (cancelled, the connection dropped), its jobs stay leased to
        # this runner unseen until their lease runs out, as after a lost COMMIT before.
        async with self.store.write_alone(background=True) as tx:
            return await tx.claim_jobs(
                self.holder,
                now=now,
                lease_until=now + self.settings.lease,
                limit=limit,
                kinds=kinds,
            )

    async def _next_due(self) -> float:
        """Seconds until a claim would find something (0: now), by a read (no write lock, no
        write); 0 when the read fails, so that the claim runs and reports the failure."""
        now = self.clock.now()
        try:
            async with self.store.read() as tx:
                due = await tx.next_due(now=now, kinds=list(self.handlers))
        except Exception:
            return 0.0
        return math.inf if due is None else max((due - now).total_seconds(), 0.0)

    async def run_once(self) -> int:
        """Claim one batch of due jobs, run them concurrently, settle each; returns how many
        were attempted. (Tests and tools: the whole batch runs, whatever the shares; `run`
        keeps claiming while slow jobs run, within the shares.)"""
        jobs = await self._claim(self.settings.batch, list(self.handlers))
        if jobs:
            await asyncio.gather(*(self._attempt(job) for job in jobs))
        return len(jobs)

    async def _admitted(
        self,
        jobs: list[OutboxJob],
        parked: dict[int, tuple[OutboxJob, datetime]],
        slots: int,
    ) -> tuple[list[OutboxJob], bool]:
        """The jobs that may run now within their shares (bot.outbox.shares), parked ones
        first, and whether any went back to the queue only for want of a free slot. A job
        over its share only because its destination, tenant or kind has jobs in flight is
        parked (kept, leased, in memory), while there is room among the parked and half its
        lease is left, to start when a slot frees up; the others go back to the queue untried,
        their attempt not counted: for a moment, or, when their endpoint rests or is being
        probed, until its rest or its probe is over."""
        now = self.clock.now()
        admitted: list[OutboxJob] = []
        waiting: list[tuple[OutboxJob, datetime]] = []
        stale = now - self.settings.lease / 2
        for job_id, (job, since) in list(parked.items()):
            until = self.shares.admit(job, now) if len(admitted) < slots else now
            if until is None:
                del parked[job_id]
                admitted.append(job)
            elif since < stale or self.shares.waits_in_queue(job, now):
                del parked[job_id]
                waiting.append((job, until))
        for job in jobs:
            until = self.shares.admit(job, now) if len(admitted) < slots else now
            queued = self.shares.waits_in_queue(job, now)
            if until is None:
                admitted.append(job)
            elif len(parked) < self.settings.concurrency and not queued:
                parked[job.id] = (job, now)
            else:
                waiting.append((job, until))
        for job, until in waiting:
            # Settled with the next batch; the loop goes on meanwhile (the job stays leased
            # to this runner until then, so nobody takes it twice).
            future = self._settler.submit(job, "defer", run_after=until)
            future.add_done_callback(_put_back)
            self._count(job, "deferred")
        return admitted, any(not self.shares.waits_in_queue(job, now) for job, _ in waiting)

    async def _shared(self, job: OutboxJob) -> None:
        """`_attempt` for a job `_admitted` let in; its slots back and its outcome told."""
        outcome: Attempted = "failed"
        try:
            outcome = await self._attempt(job)
        finally:
            timed_out = outcome == "timed out"
            self.shares.done(job, outcome == "delivered", self.clock.now(), timed_out=timed_out)

    async def _attempt(self, job: OutboxJob) -> Attempted:
        """Run one job and settle it; whether its handler delivered, failed or timed out."""
        delivered: Attempted = "failed"
        try:
            try:
                outcome = await self.handlers[job.kind](job)
                delivered = "delivered"
            except Exception as exc:  # any failure is retried; the error is kept on the job
                await self._failed(job, exc)
                # aiohttp's ServerTimeoutError and ConnectionTimeoutError are TimeoutErrors.
                return "timed out" if isinstance(exc, TimeoutError) else "failed"
            record = outcome if isinstance(outcome, Record) else None
            held = await self._settler.submit(job, "done", record=record)
            result = SKIPPED if outcome == SKIPPED else "done"
            self._count(job, result if held else "lost_lease")
        except Exception:
            # The outcome could not be recorded (database unavailable): the job comes back
            # after its lease and runs again, which receivers dedupe.
            log.exception(
                "outbox job %d (%s): could not record the attempt; it runs again after its lease",
                job.id,
                job.kind,
                extra={"approval_id": job.approval_id, "job_id": job.id},
            )
        return delivered

    async def _failed(self, job: OutboxJob, exc: Exception) -> None:
        error = f"{type(exc).__name__}: {exc}"[:2000]
        now = self.clock.now()
        extra = {"approval_id": job.approval_id, "job_id": job.id}
        reason: str | None = None
        if isinstance(exc, Undeliverable):
            reason = str(exc.details.get("reason") or "undeliverable")
        elif job.attempts >= self.settings.max_attempts and not self._waits_free(job, exc, now):
            reason = EXHAUSTED
        if reason is not None:
            held = await self._settler.submit(job, "dead", error=error)
            result = "dead"
            log.error(
                "outbox job %d (%s, approval %s) is dead after %d attempt(s) (%s): %s; "
                "requeue with `signoff outbox retry %d`",
                job.id,
                job.kind,
                job.approval_id,
                job.attempts,
                reason,
                error,
                job.id,
                extra=extra | {"reason": reason},
            )
        elif self._waits_free(job, exc, now):
            assert isinstance(exc, RetryLater) and exc.delay is not None
            # Honour the far side's wait, within the configured ceiling; the attempt is
            # given back, since the destination said "later", not "no".
            delay = timedelta(seconds=min(exc.delay, self.settings.backoff_max.total_seconds()))
            held = await self._settler.submit(job, "defer", run_after=now + delay, error=error)
            result = "rate_limited"
            log.warning(
                "outbox job %d (%s, approval %s) rate limited: %s; next in %.0f s "
                "(attempt not counted)",
                job.id,
                job.kind,
                job.approval_id,
                error,
                delay.total_seconds(),
                extra=extra,
            )
        else:
            delay = backoff(job.attempts, self.settings, self._rand)
            if isinstance(exc, RetryLater) and exc.delay is not None:
                # Honour the far side's wait, within the configured ceiling.
                asked = min(exc.delay, self.settings.backoff_max.total_seconds())
                delay = max(delay, timedelta(seconds=asked))
            held = await self._settler.submit(job, "retry", run_after=now + delay, error=error)
            result = "retry"
            log.warning(
                "outbox job %d (%s, approval %s) attempt %d failed: %s; next in %.0f s",
                job.id,
                job.kind,
                job.approval_id,
                job.attempts,
                error,
                delay.total_seconds(),
                extra=extra,
            )
        self._count(job, result if held else "lost_lease")
        if held and reason is not None and self.metrics is not None:
            self.metrics.outbox_died.labels(job.kind, reason).inc()

    def _waits_free(self, job: OutboxJob, exc: Exception, now: datetime) -> bool:
        """Whether this failure is a rate limit that says how long to wait, for a job still
        young enough that the wait does not use up an attempt."""
        return (
            isinstance(exc, RetryLater)
            and exc.delay is not None
            and now - job.created_at < self.settings.rate_limited_for
        )

    def _count(self, job: OutboxJob, result: str) -> None:
        if self.metrics is not None:
            self.metrics.outbox_jobs.labels(job.kind, result).inc()

    async def run(self, stop: asyncio.Event, drain: float = 3.0) -> None:
        """Work until `stop` is set; then give jobs in flight `drain` seconds, cancel the rest
        and hand back whatever is still held.

        Jobs run as independent tasks, up to `concurrency` at once, and the runner claims more
        as soon as there is room: one receiver that hangs until its timeout holds up its own
        jobs, not everybody's webhooks.
        """
        running: dict[int, asyncio.Task[None]] = {}
        parked: dict[int, tuple[OutboxJob, datetime]] = {}
        self._parked, self._claim_asked = parked, True
        next_prune = self.clock.now()
        idle_poll = False  # the last wait ended at its timeout, nothing having woken it
        # An idle runner reads when the next job falls due instead of claiming, and waits
        # until then, or longer and longer (doubling up to 8 polls) while nothing is queued:
        # commits wake it at once, so this is only the fallback (idle CPU, issue 27).
        wait = self.settings.poll_interval
        lag = self._lag = LoopLag.acquire()  # the process's one probe, shared with the create gate
        unsubscribe = self.store.commits.subscribe(self.wake)
        self._running, self._promised = running, 0
        unhand = self.store.commits.hand_to(self)
        loop = asyncio.get_running_loop()
        watcher = asyncio.create_task(
            self.store.watch_commits(self.wake, stop), name="outbox-commits"
        )
        try:
            while not stop.is_set():
                if self.clock.now() >= next_prune:
                    next_prune = self.clock.now() + _PRUNE_EVERY
                    try:
                        await self.prune()
                    except Exception:
                        log.exception(
                            "pruning old outbox jobs and deliveries failed; retrying later"
                        )
                # Cleared before claiming: a commit landing during the claim wakes the wait.
                self._wake.clear()
                handed, self._handed = self._handed, []
                # Woken only by jobs handed over: nothing new for a claim to find, unless a
                # poll interval went by without one.
                due = loop.time() >= self._next_claim
                claim, self._claim_asked = self._claim_asked or not handed or due, False
                limit = self.settings.concurrency
                if lag.late > self.settings.busy_lag:
                    limit = min(limit, self.settings.busy_concurrency)
                # No more than can start or be parked: one claimed past that went back to the
                # queue for a second (`WAIT`), so a burst's tail came out a second at a time.
                room = min(
                    self.settings.batch,
                    limit - len(running),
                    self.settings.concurrency - len(parked),
                )
                # Kinds at their share are left in the queue until one of theirs ends: a
                # burst of cards claimed past it was parked, then put back for a second.
                kinds = [kind for kind in self.handlers if not self.shares.kind_full(kind)]
                if not kinds:
                    room = 0
                claimed: list[OutboxJob] = []
                nothing_due = False
                if room > 0 and claim:
                    self._next_claim = loop.time() + self.settings.poll_interval
                if room > 0 and claim and idle_poll:
                    due_in = await self._next_due()
                    # Nothing to do: no write transaction for an idle poll, nor for one while
                    # slow jobs run (a claim per poll was most of a busy runner's writes).
                    nothing_due = due_in > 0
                    if nothing_due:
                        wait = min(wait * 2, self.settings.poll_interval * _IDLE_POLLS, due_in)
                if room > 0 and claim and not nothing_due:
                    wait = self.settings.poll_interval
                    try:
                        claimed = await self._claim(room, kinds)
                    except Exception:
                        log.exception("outbox claim failed; retrying")
                # Our own lease ran out mid-attempt and we took a job again: the attempt in
                # flight settles it.
                fresh = [
                    job
                    for job in [*handed, *claimed]
                    if job.id not in running and job.id not in parked
                ]
                admitted, for_a_slot = await self._admitted(fresh, parked, limit - len(running))
                for job in admitted:
                    task = asyncio.create_task(self._shared(job), name=f"outbox-{job.id}")
                    running[job.id] = task
                    task.add_done_callback(lambda _t, job_id=job.id: running.pop(job_id, None))
                # Jobs went back for want of a free slot: claiming again before one frees up
                # would only put more back (a write each), so the next claim waits for a job to
                # end. Jobs of a resting or probed endpoint are out of the way until then: the
                # claim goes on, so a hundred of them are no wall before another endpoint's.
                held_back = for_a_slot and bool(running)
                if claimed and len(claimed) == room and not held_back:
                    self._claim_asked = True
                    continue  # a full batch: more may be due now
                idle_poll = await self._idle(
                    stop,
                    list(running.values()),
                    full=room <= 0 or held_back,
                    # Parked jobs, or a kind left in the queue, wait for a job to end.
                    slot_awaited=bool(parked) or len(kinds) < len(self.handlers),
                    wait=wait,
                )
                if not idle_poll:
                    wait = self.settings.poll_interval  # woken: back to the plain poll
            # Stopping: no more leases (one given now could commit after the hand-back).
            unhand()
            self._running = None
            if running:
                await asyncio.wait(list(running.values()), timeout=drain)
        finally:
            unsubscribe()
            unhand()
            self._running = None
            # Handed over but never started: handed back below with the rest it holds.
            self._handed = []
            watcher.cancel()
            left = list(running.values())
            for task in left:
                task.cancel()
            await asyncio.gather(watcher, *left, return_exceptions=True)
            lag.release()
            self._lag = None
            # What ended is written down before the rest is handed back (a job handed back
            # unsettled would run again).
            await self._settler.drain()
            await self.release()

    async def _idle(
        self,
        stop: asyncio.Event,
        running: list[asyncio.Task[None]],
        full: bool,
        slot_awaited: bool = False,
        wait: float | None = None,
    ) -> bool:
        """Wait for stop, the poll interval, a job ending when `full` (at capacity, or jobs
        went back for want of a slot) or when `slot_awaited` (jobs parked, or a kind at its
        share), and a wake-up unless full. True if the poll interval ran out with nothing
        else happening."""
        waiters = [asyncio.ensure_future(stop.wait())]
        if not full:
            waiters.append(asyncio.ensure_future(self._wake.wait()))
        ending = running if full or slot_awaited else []
        watched: list[asyncio.Future[Any]] = [*waiters, *ending]
        try:
            done, _ = await asyncio.wait(
                watched,
                timeout=self.settings.poll_interval if wait is None else wait,
                return_when="FIRST_COMPLETED",
            )
        finally:
            for waiter in waiters:
                waiter.cancel()
        return not done

    async def prune(self, limit: int = 1000) -> int:
        """Delete one batch of done jobs older than `keep_done`; returns how many. Inbound
        delivery ids and reply prompts as old go too: chat platforms redeliver for a day at
        most, so a week of memory is plenty."""
        before = self.clock.now() - self.settings.keep_done
        async with self.store.write(background=True) as tx:
            await tx.prune_deliveries(received_before=before)
            return await tx.prune_jobs(done_before=before, limit=limit)

    async def release(self) -> int:
        """Hand back jobs this runner still holds (shutdown), so another replica can run them
        at once instead of after the lease. Attempts in flight are not counted."""
        try:
            async with self.store.write(background=True) as tx:
                released = await tx.release_jobs(self.holder)
        except Exception:
            log.exception("could not release outbox jobs; they return after their lease")
            return 0
        if released:
            log.info("released %d outbox job(s) held by %s", released, self.holder)
        return released
