"""The transactional outbox runner: performs the jobs transitions queued (decision webhooks,
card posts and updates), from any replica, at least once.

A worker claims a batch of due jobs with a lease (FOR UPDATE SKIP LOCKED on PostgreSQL, a
conditional lease update inside SQLite's single-writer transaction), runs them, and settles
each: done; back in the queue after an exponential backoff with jitter; or dead after
`max_attempts`, until `signoff outbox retry ID`. A failure no retry can change
(`Undeliverable`: a Slack channel that is gone, a Telegram bot that was blocked) is dead at
once, with the platform's reason. A rate limit that says how long to wait (`RetryLater` with a
delay: HTTP 429 with Retry-After, Telegram's flood control) waits that long without using up
an attempt, for `rate_limited_for` after the job was queued; after that each wait counts, so
a destination answering 429 forever still ends. A worker killed mid-job leaves its lease to
run out, and any replica then picks the job up again. The settle is conditional on still
holding the lease, so a slow worker can never overwrite the outcome of the one that took over.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from bot.clock import Clock, SystemClock
from bot.errors import RetryLater, Undeliverable
from bot.metrics import Metrics
from bot.outbox.shares import Shares
from store.records import OutboxJob
from store.repository import Store

log = logging.getLogger("signoff.outbox")
_PRUNE_EVERY = timedelta(minutes=10)

# A handler returns None when it did the job, or SKIPPED when there was nothing it could do
# (a card for a chat surface this deployment does not run): the job is settled either way,
# and the metrics tell the two apart.
Handler = Callable[[OutboxJob], Awaitable[str | None]]
SKIPPED = "skipped"
# The dead-job reason when a job used up its attempts (an Undeliverable names its own).
EXHAUSTED = "max_attempts"


@dataclass(frozen=True)
class OutboxSettings:
    lease: timedelta = timedelta(seconds=60)
    max_attempts: int = 10
    backoff_base: timedelta = timedelta(seconds=2)
    backoff_max: timedelta = timedelta(hours=1)
    batch: int = 20
    # Jobs in flight at once per worker (each a webhook POST or a chat API call).
    concurrency: int = 32
    poll_interval: float = 1.0
    # Done jobs are kept this long (to answer "was it sent?"), then deleted in batches.
    keep_done: timedelta = timedelta(days=7)
    # Fair shares of the slots (bot.outbox.shares): in flight at once per destination host
    # and per tenant, the share of the slots one kind of job may take, and how many failures
    # in a row make a destination rest.
    per_destination: int = 4
    per_tenant: int = 16
    kind_share: float = 0.75
    failing_after: int = 3
    # A rate-limited job (RetryLater with a delay) waits without using up an attempt while it
    # is younger than this; after it, each wait counts as an attempt.
    rate_limited_for: timedelta = timedelta(hours=24)


def backoff(attempt: int, settings: OutboxSettings, rand: Callable[[], float]) -> timedelta:
    """Delay before attempt `attempt + 1`: base * 2^(attempt-1), capped, then jittered to
    between half and all of it, so a receiver coming back is not hit by every job at once."""
    full = min(
        settings.backoff_base.total_seconds() * 2 ** max(attempt - 1, 0),
        settings.backoff_max.total_seconds(),
    )
    return timedelta(seconds=full * (0.5 + 0.5 * rand()))


def worker_name() -> str:
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
        worker: str | None = None,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.store = store
        self.handlers = dict(handlers)
        self.clock = clock or SystemClock()
        self.settings = settings or OutboxSettings()
        self.metrics = metrics
        self.worker = worker or worker_name()
        self._rand = rand
        self._wake = asyncio.Event()
        self.shares = Shares(self.settings, lambda n: backoff(n, self.settings, self._rand))

    def wake(self) -> None:
        """New jobs were committed in this process: look now, not at the next poll."""
        self._wake.set()

    async def _claim(self, limit: int) -> list[OutboxJob]:
        now = self.clock.now()
        async with self.store.write() as tx:
            return await tx.claim_jobs(
                self.worker,
                now=now,
                lease_until=now + self.settings.lease,
                limit=limit,
                kinds=list(self.handlers),
            )

    async def run_once(self) -> int:
        """Claim one batch of due jobs, run them concurrently, settle each; returns how many
        were attempted. (Tests and tools: the whole batch runs, whatever the shares; `run`
        keeps claiming while slow jobs run, within the shares.)"""
        jobs = await self._claim(self.settings.batch)
        if jobs:
            await asyncio.gather(*(self._attempt(job) for job in jobs))
        return len(jobs)

    async def _admitted(self, jobs: list[OutboxJob]) -> list[OutboxJob]:
        """The claimed jobs that may run now within their shares (bot.outbox.shares); the
        others go back to the queue untried, their attempt not counted."""
        now = self.clock.now()
        admitted: list[OutboxJob] = []
        waiting: list[tuple[OutboxJob, datetime]] = []
        for job in jobs:
            until = self.shares.admit(job, now)
            if until is None:
                admitted.append(job)
            else:
                waiting.append((job, until))
        if waiting:
            try:
                async with self.store.write() as tx:
                    for job, until in waiting:
                        await tx.defer_job(job.id, self.worker, run_after=until)
            except Exception:
                log.exception("could not put back %d outbox job(s) over their share", len(waiting))
            for job, _ in waiting:
                self._count(job, "deferred")
        return admitted

    async def _shared(self, job: OutboxJob) -> None:
        """`_attempt` for a job `_admitted` let in: its slots are given back at the end."""
        ok = False
        try:
            ok = await self._attempt(job)
        finally:
            self.shares.done(job, ok, self.clock.now())

    async def _attempt(self, job: OutboxJob) -> bool:
        """Run one job and settle it; whether its handler succeeded."""
        delivered = False
        try:
            try:
                outcome = await self.handlers[job.kind](job)
                delivered = True
            except Exception as exc:  # any failure is retried; the error is kept on the job
                await self._failed(job, exc)
                return False
            async with self.store.write() as tx:
                held = await tx.finish_job(job.id, self.worker, now=self.clock.now())
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
        async with self.store.write() as tx:
            if reason is not None:
                held = await tx.bury_job(job.id, self.worker, now=now, error=error)
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
                held = await tx.defer_job(job.id, self.worker, run_after=now + delay, error=error)
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
                held = await tx.reschedule_job(
                    job.id, self.worker, run_after=now + delay, error=error
                )
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
        next_prune = self.clock.now()
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
                room = min(self.settings.batch, self.settings.concurrency - len(running))
                claimed: list[OutboxJob] = []
                if room > 0:
                    try:
                        claimed = await self._claim(room)
                    except Exception:
                        log.exception("outbox claim failed; retrying")
                # Our own lease ran out mid-attempt and we took a job again: the attempt in
                # flight settles it.
                fresh = [job for job in claimed if job.id not in running]
                for job in await self._admitted(fresh):
                    task = asyncio.create_task(self._shared(job), name=f"outbox-{job.id}")
                    running[job.id] = task
                    task.add_done_callback(lambda _t, job_id=job.id: running.pop(job_id, None))
                if claimed and len(claimed) == room:
                    continue  # a full batch: more may be due now
                await self._idle(stop, list(running.values()), full=room <= 0)
            if running:
                await asyncio.wait(list(running.values()), timeout=drain)
        finally:
            left = list(running.values())
            for task in left:
                task.cancel()
            await asyncio.gather(*left, return_exceptions=True)
            await self.release()

    async def _idle(
        self, stop: asyncio.Event, running: list[asyncio.Task[None]], full: bool
    ) -> None:
        """Wait for stop, a wake-up, the poll interval, or (when at capacity) a job ending."""
        waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._wake.wait())]
        watched: list[asyncio.Future[Any]] = [*waiters, *(running if full else [])]
        try:
            await asyncio.wait(
                watched, timeout=self.settings.poll_interval, return_when="FIRST_COMPLETED"
            )
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def prune(self, limit: int = 1000) -> int:
        """Delete one batch of done jobs older than `keep_done`; returns how many. Inbound
        delivery ids and reply prompts as old go too: chat platforms redeliver for a day at
        most, so a week of memory is plenty."""
        before = self.clock.now() - self.settings.keep_done
        async with self.store.write() as tx:
            await tx.prune_deliveries(received_before=before)
            return await tx.prune_jobs(done_before=before, limit=limit)

    async def release(self) -> int:
        """Hand back jobs this worker still holds (shutdown), so another replica can run them
        at once instead of after the lease. Attempts in flight are not counted."""
        try:
            async with self.store.write() as tx:
                released = await tx.release_jobs(self.worker)
        except Exception:
            log.exception("could not release outbox jobs; they return after their lease")
            return 0
        if released:
            log.info("released %d outbox job(s) held by %s", released, self.worker)
        return released
