"""How the outbox runner writes what its attempts came to: `Settler` batches the outcomes
(done, retry, defer, dead) of one runner into shared write transactions, each conditional on
the runner still holding the job's lease, with the `Record` a handler left to write down
(a posted card's message) in the same transaction. bot.outbox.runner runs the jobs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.clock import Clock
from store.records import OutboxJob
from store.repository import Store, Tx

log = logging.getLogger("signoff.outbox")


@dataclass(frozen=True)
class Record:
    """What a handler that did its job still has to write down (the message a card was
    posted as): `write` runs in the transaction that settles the job, whoever holds its lease
    by then (what was sent was sent), so the job costs one write, not two. Records of one
    batch are written in `order`, so two replicas settling at once take row locks in the
    same order."""

    # Called with the transaction and, when the batch locked the row `locks` names already,
    # that row's version as locked (None: `write` locks it itself, if it needs to). So no
    # record may move an approval: a later record of the batch would get a stale version.
    write: Callable[[Tx, int | None], Awaitable[None]]
    order: tuple[str, int] = ("", 0)
    # The approval whose row `write` locks, if it does: a batch takes all of them first, or
    # none (see `Settler._write`).
    locks: str | None = None


@dataclass
class Outcome:
    """How one attempt ended, waiting to be written: `state` is done, retry (due again at
    `run_after`), defer (the same, its attempt given back) or dead."""

    job: OutboxJob
    state: str
    future: asyncio.Future[bool]
    run_after: datetime | None = None
    error: str | None = None
    record: Record | None = None


class Settler:
    """Writes the outcomes of a runner's attempts together: one write transaction for every
    outcome that arrived within `window()` seconds of the first (at most `batch`), each
    conditional on the holder still holding the job's lease. Each outcome's future gets
    whether the lease was still held, or the error that kept it from being written (the job
    then comes back after its lease, as after a crash)."""

    def __init__(
        self,
        store: Store,
        holder: str,
        clock: Clock,
        window: Callable[[], float],
        batch: int,
    ) -> None:
        """`window()`: the seconds to wait, asked at each settle (the runner's depend on how
        late its loop runs)."""
        self.store = store
        self.holder = holder
        self.clock = clock
        self.window = window
        self.batch = max(1, batch)
        self._pending: list[Outcome] = []
        self._full = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def submit(self, job: OutboxJob, state: str, **details: Any) -> asyncio.Future[bool]:
        future = asyncio.get_running_loop().create_future()
        self._pending.append(Outcome(job, state, future, **details))
        if len(self._pending) >= self.batch:
            self._full.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._flush(), name="outbox-settle")
        return future

    async def drain(self) -> None:
        """Write whatever is waiting now, without waiting out the window."""
        self._full.set()
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    async def _flush(self) -> None:
        while self._pending:
            if not self._full.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.window()):
                        await self._full.wait()
            batch, self._pending = self._pending[: self.batch], self._pending[self.batch :]
            if len(self._pending) < self.batch:
                self._full.clear()
            await self._settle(batch)

    async def _settle(self, batch: list[Outcome]) -> None:
        try:
            try:
                async with self.store.write(background=True) as tx:
                    held = await self._write(tx, batch)
            except Exception:
                if len(batch) == 1:
                    raise
                # One outcome the database refused must not take the others down with it:
                # each is written on its own.
                for outcome in batch:
                    await self._settle([outcome])
                return
            for outcome in batch:
                if not outcome.future.done():
                    outcome.future.set_result(outcome.job.id in held)
        except BaseException as exc:
            for outcome in batch:
                if not outcome.future.done():
                    outcome.future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise

    async def _write(self, tx: Tx, batch: list[Outcome]) -> set[int]:
        """The batch's records, then its settles; the ids of the jobs still held."""
        recorded = sorted(
            (o for o in batch if o.record is not None),
            key=lambda o: (o.record.order if o.record else ("", 0), o.job.id),
        )
        versions: dict[str, int] = {}
        if len(batch) > 1:
            # The rows the records lock, all at once or not at all: a batch that waited for
            # one while holding others could deadlock with a transition locking two
            # approvals; failing here, its outcomes are written one per transaction. Their
            # versions come with the locks, so no record reads its own.
            versions = await tx.lock_versions_or_fail(
                {o.record.locks for o in recorded if o.record is not None and o.record.locks}
            )
        for outcome in recorded:
            assert outcome.record is not None
            locks = outcome.record.locks
            await outcome.record.write(tx, versions.get(locks) if locks else None)
        now = self.clock.now()
        done = [o.job.id for o in batch if o.state == "done"]
        held = await tx.finish_jobs(done, self.holder, now=now)
        # Jobs over their share, put back together (one statement per moment they are due).
        over: dict[datetime, list[int]] = {}
        for o in batch:
            if o.state == "defer" and o.error is None and o.run_after is not None:
                over.setdefault(o.run_after, []).append(o.job.id)
        for run_after, ids in sorted(over.items()):
            held |= await tx.defer_jobs(ids, self.holder, run_after=run_after)
        for outcome in sorted(batch, key=lambda o: o.job.id):
            job, error = outcome.job, outcome.error or ""
            if outcome.state == "defer" and outcome.error is None:
                continue
            if outcome.state == "retry":
                assert outcome.run_after is not None
                ok = await tx.reschedule_job(
                    job.id, self.holder, run_after=outcome.run_after, error=error
                )
            elif outcome.state == "defer":
                assert outcome.run_after is not None
                ok = await tx.defer_job(
                    job.id, self.holder, run_after=outcome.run_after, error=outcome.error
                )
            elif outcome.state == "dead":
                ok = await tx.bury_job(job.id, self.holder, now=now, error=error)
            else:
                continue
            if ok:
                held.add(job.id)
        return held
