"""The statements on `refusal_counts`: how often each actor was refused on each request.

A family of `Tx` (store/repository.py).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select, update

from store.records import RefusalCount
from store.schema import refusal_counts
from store.statements import Statements


class RefusalStatements(Statements):
    """Counting and reading refused attempts."""

    async def count_refusal(
        self, approval_id: str, actor: str, *, action: str, code: str, at: datetime
    ) -> int:
        """Count one more refusal of `actor` on `approval_id`; how many there are now. The
        caller holds the approval's row lock (Tx.lock_approval), so no other transaction
        counts for the same pair meanwhile and update-else-insert cannot race."""
        values = {"last_at": at, "last_action": action, "last_code": code}
        key = (refusal_counts.c.approval_id == approval_id) & (refusal_counts.c.actor == actor)
        counted = await self.conn.execute(
            update(refusal_counts)
            .where(key)
            .values(refused=refusal_counts.c.refused + 1, **values)
            .returning(refusal_counts.c.refused)
        )
        refused = counted.scalar()
        if refused is not None:
            return int(refused)
        first = {"approval_id": approval_id, "actor": actor, "refused": 1, **values}
        await self.conn.execute(refusal_counts.insert().values(**first))
        return 1

    async def refusal_counts(self, approval_id: str) -> list[RefusalCount]:
        """Who was refused on `approval_id`, how often and when last, first refused first."""
        rows = await self.conn.execute(
            select(refusal_counts)
            .where(refusal_counts.c.approval_id == approval_id)
            .order_by(refusal_counts.c.last_at, refusal_counts.c.actor)
        )
        return [RefusalCount.from_row(row) for row in rows.mappings()]
