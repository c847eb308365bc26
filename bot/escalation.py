"""Escalation: a pending request nobody answered moves along its route's chain.

The sweeper calls `Escalator` each pass (its `escalate` hook). A request whose `escalate_at`
has passed is reassigned to the next step's principal or group (`escalated` event, a card to
the new assignee, the old cards say "escalated to Carol Diaz after 24h"); `escalate_at` moves
to the step after that, each step's `after` counting from the previous step. The original
approvers and every earlier assignee keep their authority (the assignee being replaced joins
`approvers`). When the
chain is exhausted the request waits for its TTL and then expires: escalation never decides.

The chain is the route's as configured now (matched again by tenant and capability), so a
config change applies to requests already waiting; a request whose route is gone stops
escalating.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta

from bot import effects, execution, transitions
from bot.clock import Clock
from bot.durations import format_duration
from bot.errors import NoRoute
from bot.metrics import Metrics
from bot.model import State
from bot.routing import Directory, keeping_authority
from bot.transitions import Transition, Transitioner
from store.engine import is_sqlite
from store.records import Approval
from store.repository import Store

log = logging.getLogger("signoff.escalation")


class Escalator(Transitioner):
    def __init__(
        self,
        store: Store,
        directory: Directory,
        clock: Clock | None = None,
        *,
        batch: int = 200,
        metrics: Metrics | None = None,
    ) -> None:
        super().__init__(store, directory, clock, metrics)
        self.batch = batch
        self.concurrency = 1 if is_sqlite(store.engine) else 8

    async def __call__(self, now: datetime) -> int:
        """Escalate what is due by `now`; how many requests moved."""
        async with self.store.read() as tx:
            due = await tx.due_escalations(now, self.batch)
        turn = asyncio.Semaphore(self.concurrency)

        async def one(approval_id: str) -> int:
            async with turn:
                try:
                    return await self._one(approval_id)
                except Exception:
                    log.exception(
                        "could not escalate approval %s; skipping it this pass",
                        approval_id,
                        extra={"approval_id": approval_id},
                    )
                    return 0

        return sum(await asyncio.gather(*(one(i) for i in due)))

    async def _one(self, approval_id: str) -> int:
        result: Transition | None = None
        async with self.store.write() as tx:
            row = await tx.lock_approval(approval_id, skip_locked=True)
            now = self.clock.now()
            if (
                row is None
                or row.state != State.PENDING
                or row.escalate_at is None
                or now < row.escalate_at
                or execution.expiry_due(row, now) is not None  # expiring wins; sweeper does it
            ):
                return 0
            try:
                chain = self.directory.route_for(row.tenant, row.capability).escalation
            except NoRoute:
                chain = ()
            if row.escalation_level >= len(chain):
                # The chain got shorter (config change) or the route is gone: nothing to do.
                await tx.clear_escalation(row.id)
                return 0
            step = chain[row.escalation_level]
            following = row.escalation_level + 1
            waited = _waited(step.after)
            values: dict[str, object] = {
                "state": State.PENDING.value,
                "assignee": step.to,
                "approvers": keeping_authority(row),
                "escalation_level": following,
                "escalate_at": now + chain[following].after if following < len(chain) else None,
                "assigned_note": (
                    f"escalated to {self._name(step.to)} after {waited} without a decision"
                ),
            }
            result = await transitions.apply(
                tx,
                self.directory,
                row,
                values,
                "escalated",
                now=now,
                actor="signoff:escalation",
                data={
                    "from": row.assignee,
                    "to": step.to,
                    "after": waited,
                    "level": following,
                    "last": following >= len(chain),
                },
            )
            await effects.enqueue_personal_cards(tx, self.directory, result.approval, step.to, now)
        self.committed(result)
        return 1

    def _name(self, key: str) -> str:
        return self.directory.describe(key).split(" (")[0]


def restarted(directory: Directory, row: Approval, now: datetime) -> datetime | None:
    """When the current escalation step fires if its wait starts again now (a hand-off gives
    the new assignee the step's full wait); None when no step is left."""
    try:
        chain = directory.route_for(row.tenant, row.capability).escalation
    except NoRoute:
        return None
    return now + chain[row.escalation_level].after if row.escalation_level < len(chain) else None


def _waited(after: timedelta) -> str:
    """ "24 h" rather than "1 d" for the waits people configure in hours."""
    hours, rest = divmod(int(after.total_seconds()), 3600)
    return f"{hours} h" if not rest and hours <= 72 else format_duration(after)
