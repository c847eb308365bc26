"""The statements the sweeper's clocks run on approvals: which rows are due, and marks.

A family of `Tx` (store/repository.py). Each due read is a range of a partial index
(pending past `expires_at`, approved past `grant_expires_at`, executing past `lease_until`,
pending past `escalate_at` or `remind_at`); bot/sweeper.py then handles each id in a
transaction of its own.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select, update

from store.schema import approvals
from store.statements import Statements, one_of

_DUE_COLUMN = {
    "pending": approvals.c.expires_at,
    "approved": approvals.c.grant_expires_at,
    "executing": approvals.c.lease_until,
}


class ClockStatements(Statements):
    """Due approvals by clock (expiry, grant, lease, escalation, reminder) and their marks."""

    async def due(self, state: str, now: datetime, limit: int) -> list[str]:
        """Ids of approvals in `state` whose clock ran out by `now`, oldest first: pending
        past expires_at, approved past grant_expires_at, executing past lease_until."""
        column = _DUE_COLUMN[state]
        stmt = (
            select(approvals.c.id)
            .where(one_of(approvals.c.state, state), column <= now)
            .order_by(column)
            .limit(limit)
        )
        return list((await self.conn.execute(stmt)).scalars().all())

    async def due_escalations(self, now: datetime, limit: int) -> list[str]:
        """Ids of pending approvals whose next escalation step is due, oldest first."""
        stmt = (
            select(approvals.c.id)
            .where(one_of(approvals.c.state, "pending"), approvals.c.escalate_at <= now)
            .order_by(approvals.c.escalate_at)
            .limit(limit)
        )
        return list((await self.conn.execute(stmt)).scalars().all())

    async def clear_escalation(self, approval_id: str) -> None:
        """No escalation step left for this approval (its route's chain changed)."""
        await self.conn.execute(
            update(approvals).where(approvals.c.id == approval_id).values(escalate_at=None)
        )

    async def due_reminders(self, now: datetime, limit: int) -> list[str]:
        """Ids of pending approvals whose reminder is due by `now` and not yet sent, soonest
        first."""
        stmt = (
            select(approvals.c.id)
            .where(
                one_of(approvals.c.state, "pending"),
                approvals.c.reminded_at.is_(None),
                approvals.c.remind_at <= now,
            )
            .order_by(approvals.c.remind_at)
            .limit(limit)
        )
        return list((await self.conn.execute(stmt)).scalars().all())

    async def mark_reminded(self, approval_id: str, now: datetime) -> bool:
        """Record that the approval's reminder went out, only if it is still pending, due and
        not yet reminded: True for the one caller that wins, so two sweepers never remind
        twice."""
        stmt = (
            update(approvals)
            .where(
                approvals.c.id == approval_id,
                one_of(approvals.c.state, "pending"),
                approvals.c.reminded_at.is_(None),
                approvals.c.remind_at <= now,
            )
            .values(reminded_at=now)
        )
        return (await self.conn.execute(stmt)).rowcount == 1
