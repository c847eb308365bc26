"""The sweeper: the clocks of every approval, enforced from the database, not from memory.

Each pass runs every clock by name: expiry of pending requests past their TTL and of grants
past their grant TTL and lapsed execution leases (bot.expiry), and escalation of unanswered
requests along their route's chain (bot.escalation), and reminders before expiry
(bot.reminders), and, with `[retention] sweep`, archiving (bot.archive) every
`sweep_interval`. Each clock finds its due rows in a
bounded batch of ids, then judges each row again in one short transaction that locks it, so
a decision racing the sweeper on the same row produces exactly one outcome and a large
backlog never holds a lock for long.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from bot import escalation, expiry, reminders
from bot.archive import Retention, archive
from bot.clock import Clock
from bot.durations import parse_duration
from bot.metrics import Metrics
from bot.model import State
from bot.routing import Directory
from bot.transitions import Transition, Transitioner
from store.engine import is_sqlite
from store.records import Approval
from store.repository import Store, Tx

log = logging.getLogger("signoff.sweeper")

# What a clock does to one due row, locked: a transition, True for an effect that is not one
# (a reminder queued), or None / False if it is not due after all.
Act = Callable[[Tx, Directory, Approval, datetime], Awaitable[Transition | bool | None]]


Scan = Callable[[Tx, datetime, int], Awaitable[list[str]]]


@dataclass(frozen=True)
class Deadline:
    """One of an approval's clocks as the sweeper runs it: which rows are due by `now` (at
    most `limit` ids), and what to do to each of them."""

    name: str  # the SweepReport field it counts into
    due: Scan
    act: Act


def _in_state(state: State) -> Scan:
    return lambda tx, now, limit: tx.due(state, now, limit)


DEADLINES = (
    Deadline("expired", _in_state(State.PENDING), expiry.expire_if_due),
    Deadline("grants_expired", _in_state(State.APPROVED), expiry.expire_if_due),
    Deadline("lapsed", _in_state(State.EXECUTING), expiry.lapse_if_due),
    Deadline(
        "escalated", lambda tx, now, limit: tx.due_escalations(now, limit), escalation.escalate
    ),
    Deadline(
        "reminded", lambda tx, now, limit: tx.due_reminders(now, limit), reminders.remind_if_due
    ),
)


@dataclass
class SweepReport:
    expired: int = 0
    grants_expired: int = 0
    lapsed: int = 0
    escalated: int = 0
    reminded: int = 0

    @property
    def total(self) -> int:
        return self.expired + self.grants_expired + self.lapsed + self.escalated + self.reminded


ARCHIVE_BATCHES_PER_PASS = 10


def retention_for(config: Any) -> dict[str, Any]:
    """The Sweeper's archiving arguments from a `Config`: none unless `[retention] sweep`."""
    retention = config.retention
    if not retention.sweep:
        return {}
    return {
        "retention": Retention.from_config(config),
        "archive_every": parse_duration(retention.sweep_interval).total_seconds(),
    }


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
        retention: Retention | None = None,
        archive_every: float = 3600.0,
    ) -> None:
        super().__init__(store, directory, clock, metrics)
        self.batch = batch
        # Archiving rides on the sweeper's loop: one more clock, far slower than the others.
        self.retention = retention
        self.archive_every = archive_every
        self._archived_at: datetime | None = None
        # SQLite has one writer: rows in flight together only queue ahead of decisions.
        # PostgreSQL overlaps their round trips (measured: python -m bench sweeper_backlog).
        self.concurrency = concurrency or (1 if is_sqlite(store.engine) else 8)

    async def sweep(self) -> SweepReport:
        """One pass: at most `batch` rows of each deadline. Returns what moved."""
        now = self.clock.now()
        async with self.store.read() as tx:
            due = [(each, await each.due(tx, now, self.batch)) for each in DEADLINES]
        report = SweepReport()
        for deadline, approval_ids in due:
            setattr(report, deadline.name, await self._each(approval_ids, deadline.act))
        return report

    async def sweep_all(self) -> SweepReport:
        """Passes until nothing is due (a backlog larger than one batch)."""
        total = SweepReport()
        while True:
            report = await self.sweep()
            for field in fields(SweepReport):
                setattr(total, field.name, getattr(total, field.name) + getattr(report, field.name))
            if report.total == 0:
                return total

    async def _each(self, approval_ids: list[str], act: Act) -> int:
        """Rows `concurrency` at a time, each its own short transaction."""
        turn = asyncio.Semaphore(self.concurrency)

        async def one(approval_id: str) -> int:
            async with turn:
                return await self._guarded(approval_id, act)

        return sum(await asyncio.gather(*(one(i) for i in approval_ids)))

    async def _guarded(self, approval_id: str, act: Act) -> int:
        """One row; a row that fails (and would fail again) must not stop the rest."""
        try:
            return await self._one(approval_id, act)
        except Exception:
            log.exception(
                "sweeper could not process approval %s; skipping it this pass",
                approval_id,
                extra={"approval_id": approval_id},
            )
            return 0

    async def _one(self, approval_id: str, act: Act) -> int:
        """Judge one row again under its lock; someone may have decided it since the scan.
        A row locked right now (a decision, another replica's sweeper) is left for the next
        pass rather than waited for."""
        async with self.store.write() as tx:
            row = await tx.lock_approval(approval_id, skip_locked=True)
            if row is None:
                return 0
            result = await act(tx, self.directory, row, self.clock.now())
        if not result:
            return 0
        if isinstance(result, Transition):
            self.committed(result)
        return 1

    async def archive_if_due(self) -> int:
        """With a retention, archive decided requests past it when `archive_every` went by
        since the last run finished (the first pass starts one); the number archived. At
        most `ARCHIVE_BATCHES_PER_PASS` files a pass, so a backlog of years does not hold
        up the other clocks; each file is its own transaction, so decisions interleave."""
        now = self.clock.now()
        if self.retention is None or (
            self._archived_at is not None
            and (now - self._archived_at).total_seconds() < self.archive_every
        ):
            return 0
        report = await archive(
            self.store, self.clock, self.retention, max_batches=ARCHIVE_BATCHES_PER_PASS
        )
        if len(report.files) < ARCHIVE_BATCHES_PER_PASS:  # else more wait: next pass goes on
            self._archived_at = now
        if report.requests:
            log.info(
                "archived %d decided requests into %d file(s)", report.requests, len(report.files)
            )
        return report.requests

    async def run(self, interval: float, stop: asyncio.Event) -> None:
        """Sweep every `interval` seconds until `stop` is set. A failed pass (database
        briefly unreachable) is logged and retried on the next tick."""
        while not stop.is_set():
            try:
                report = await self.sweep()
                if report.total:
                    log.info(
                        "sweep: %d expired, %d grants expired, %d leases lapsed, %d escalated, "
                        "%d reminded",
                        report.expired,
                        report.grants_expired,
                        report.lapsed,
                        report.escalated,
                        report.reminded,
                    )
                    continue  # more may be due: go again without waiting
            except Exception:
                log.exception("sweep failed; retrying in %.1f s", interval)
            try:
                await self.archive_if_due()
            except Exception:
                log.exception("archiving failed; retrying in %.0f s", self.archive_every)
            try:
                await asyncio.wait_for(stop.wait(), timeout=interval)
            except TimeoutError:
                pass
