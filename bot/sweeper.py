"""The sweeper: the clocks of every approval, enforced from the database, not from memory.

Each pass expires pending requests past their TTL and approved grants past their grant TTL,
turns executions whose lease lapsed into `outcome_unknown` (raising an
interrupted_side_effect approval), and moves unanswered requests along their route's
escalation chain (bot.escalation). Work comes in bounded
batches of ids, and each row is one short transaction that locks it and judges it again, so
a decision racing the sweeper on the same row produces exactly one outcome and a large
backlog never holds a lock for long.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from bot import escalation, execution
from bot.clock import Clock
from bot.metrics import Metrics
from bot.model import State
from bot.routing import Directory
from bot.transitions import Transition, Transitioner
from store.engine import is_sqlite
from store.repository import Store

log = logging.getLogger("signoff.sweeper")

# What `_each` does to a pending row due to escalate, beside the states whose clocks ran out.
_ESCALATE = "escalate"


@dataclass
class SweepReport:
    expired: int = 0
    grants_expired: int = 0
    lapsed: int = 0
    escalated: int = 0

    @property
    def total(self) -> int:
        return self.expired + self.grants_expired + self.lapsed + self.escalated


class Sweeper(Transitioner):
    def __init__(
        self,
        store: Store,
        directory: Directory,
        clock: Clock | None = None,
        *,
        batch: int = 200,
        concurrency: int | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        super().__init__(store, directory, clock, metrics)
        self.batch = batch
        # SQLite has one writer: rows in flight together only queue ahead of decisions.
        # PostgreSQL overlaps their round trips (measured: bench/sweeper_backlog.py).
        self.concurrency = concurrency or (1 if is_sqlite(store.engine) else 8)

    async def sweep(self) -> SweepReport:
        """One pass: at most `batch` rows of each kind. Returns what moved."""
        now = self.clock.now()
        report = SweepReport()
        async with self.store.read() as tx:
            pending = await tx.due(State.PENDING, now, self.batch)
            grants = await tx.due(State.APPROVED, now, self.batch)
            leases = await tx.due(State.EXECUTING, now, self.batch)
            unanswered = await tx.due_escalations(now, self.batch)
        report.expired = await self._each(pending, State.PENDING)
        report.grants_expired = await self._each(grants, State.APPROVED)
        report.lapsed = await self._each(leases, State.EXECUTING)
        report.escalated = await self._each(unanswered, _ESCALATE)
        return report

    async def sweep_all(self) -> SweepReport:
        """Passes until nothing is due (a backlog larger than one batch)."""
        total = SweepReport()
        while True:
            report = await self.sweep()
            for name in ("expired", "grants_expired", "lapsed", "escalated"):
                setattr(total, name, getattr(total, name) + getattr(report, name))
            if report.total == 0:
                return total

    async def _each(self, approval_ids: list[str], seen_state: str) -> int:
        """Rows `concurrency` at a time, each its own short transaction."""
        turn = asyncio.Semaphore(self.concurrency)

        async def one(approval_id: str) -> int:
            async with turn:
                return await self._guarded(approval_id, seen_state)

        return sum(await asyncio.gather(*(one(i) for i in approval_ids)))

    async def _guarded(self, approval_id: str, seen_state: str) -> int:
        """One row; a row that fails (and would fail again) must not stop the rest."""
        try:
            return await self._one(approval_id, seen_state)
        except Exception:
            log.exception(
                "sweeper could not process approval %s; skipping it this pass",
                approval_id,
                extra={"approval_id": approval_id},
            )
            return 0

    async def _one(self, approval_id: str, seen_state: str) -> int:
        """Judge one row again under its lock; someone may have decided it since the scan.
        A row locked right now (a decision, another replica's sweeper) is left for the next
        pass rather than waited for."""
        result: Transition | None = None
        async with self.store.write() as tx:
            row = await tx.lock_approval(approval_id, skip_locked=True)
            now = self.clock.now()
            if row is None:
                return 0
            if seen_state == _ESCALATE:
                result = await escalation.escalate(tx, self.directory, row, now)
            elif row.state != seen_state:
                return 0
            elif row.state == State.EXECUTING:
                if row.lease_until is not None and now >= row.lease_until:
                    result = await execution.lapse(tx, self.directory, row, now)
            else:
                clock_name = execution.expiry_due(row, now)
                if clock_name is not None:
                    result = await execution.expire(tx, self.directory, row, now, clock_name)
        if result is None:
            return 0
        self.committed(result)
        return 1

    async def run(self, interval: float, stop: asyncio.Event) -> None:
        """Sweep every `interval` seconds until `stop` is set. A failed pass (database
        briefly unreachable) is logged and retried on the next tick."""
        while not stop.is_set():
            try:
                report = await self.sweep()
                if report.total:
                    log.info(
                        "sweep: %d expired, %d grants expired, %d leases lapsed, %d escalated",
                        report.expired,
                        report.grants_expired,
                        report.lapsed,
                        report.escalated,
                    )
                    continue  # more may be due: go again without waiting
            except Exception:
                log.exception("sweep failed; retrying in %.1f s", interval)
            try:
                await asyncio.wait_for(stop.wait(), timeout=interval)
            except TimeoutError:
                pass
