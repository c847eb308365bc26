"""The statements on `approval_events`: the hash-chained audit trail (bot/audit.py computes
the hashes; these write and read it).

A family of `Tx` (store/repository.py).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from sqlalchemy import and_, bindparam, or_, select, update
from sqlalchemy.engine import Dialect

from store.fast_path import DriverStatement
from store.fast_path import run as driver_run
from store.records import Approval, ChainHead, Event
from store.schema import approval_events, approvals
from store.statements import Statements

_INSERT_EVENT = approval_events.insert().returning(approval_events)
_EVENTS_FOR = (
    select(approval_events)
    .where(approval_events.c.approval_id == bindparam("approval_id"))
    .order_by(approval_events.c.seq)
)


@functools.cache
def _driver_insert_event(dialect: Dialect, keys: tuple[str, ...]) -> DriverStatement:
    statement = approval_events.insert().returning(approval_events.c.id)
    return DriverStatement(statement, dialect, keys=keys, returns=[approval_events.c.id])


class EventStatements(Statements):
    """Appending to and reading the audit trail."""

    async def insert_event(self, values: Mapping[str, Any]) -> Event:
        """Append one audit event (bot.audit computed its chain hashes; the caller moved the
        approval's chain head in the same transaction)."""
        driver = await self._driver()
        if driver is None:
            row = await self._one(_INSERT_EVENT, values)
            assert row is not None
            return Event.from_row(row)
        statement = _driver_insert_event(self.conn.dialect, tuple(values))
        (row,) = await driver_run(driver, self._dialect, statement, values)
        return Event.from_row({**values, **statement.mapping(row)})

    async def events_for(self, approval_id: str) -> list[Event]:
        """One approval's audit trail, oldest first."""
        rows = await self._rows(_EVENTS_FOR, {"approval_id": approval_id})
        return [Event.from_row(r) for r in rows]

    async def chain_page(
        self,
        *,
        approval_id: str | None = None,
        after: tuple[str, int] | None = None,
        limit: int = 1000,
    ) -> list[tuple[Event, ChainHead]]:
        """Events in (approval_id, seq) order, a page at a time, each with what its approval
        row records about the trail (chain head, state, decider, hash), for verification."""
        head = [
            approvals.c.audit_seq,
            approvals.c.audit_head,
            approvals.c.state,
            approvals.c.decided_by,
            approvals.c.hash.label("approval_hash"),
            approvals.c.kind,
            approvals.c.capability,
            approvals.c.presentation,
            approvals.c.tool_name,
            approvals.c.tool_args,
            approvals.c.question,
            approvals.c.original_args,
            approvals.c.original_hash,
        ]
        stmt = select(approval_events, *head).join(
            approvals, approvals.c.id == approval_events.c.approval_id
        )
        if approval_id is not None:
            stmt = stmt.where(approval_events.c.approval_id == approval_id)
        if after is not None:
            last_approval, last_seq = after
            stmt = stmt.where(
                or_(
                    approval_events.c.approval_id > last_approval,
                    and_(
                        approval_events.c.approval_id == last_approval,
                        approval_events.c.seq > last_seq,
                    ),
                )
            )
        stmt = stmt.order_by(approval_events.c.approval_id, approval_events.c.seq).limit(limit)
        rows = (await self.conn.execute(stmt)).mappings().all()
        return [
            (
                Event.from_row(r),
                ChainHead(
                    r["audit_seq"],
                    r["audit_head"],
                    r["state"],
                    r["decided_by"],
                    r["approval_hash"],
                    r["kind"],
                    r["capability"],
                    r["presentation"],
                    r["tool_name"],
                    r["tool_args"],
                    r["question"],
                    r["original_args"],
                    r["original_hash"],
                ),
            )
            for r in rows
        ]

    async def approvals_without_events(self, limit: int = 10) -> list[str]:
        """Ids of approvals whose whole audit trail is gone (every approval has a
        `requested` event from the transaction that created it)."""
        stmt = (
            select(approvals.c.id)
            .where(
                ~select(approval_events.c.id)
                .where(approval_events.c.approval_id == approvals.c.id)
                .exists()
            )
            .order_by(approvals.c.id)
            .limit(limit)
        )
        return list((await self.conn.execute(stmt)).scalars().all())

    async def append_event(self, approval: Approval, values: Mapping[str, Any]) -> Event | None:
        """Append an audit event that changes nothing else (a refused attempt): moves the
        chain head if nobody appended since `approval` was read; None if someone did."""
        moved = await self._one(
            update(approvals)
            .where(approvals.c.id == approval.id, approvals.c.audit_seq == approval.audit_seq)
            .values(audit_seq=values["seq"], audit_head=values["hash"])
            .returning(approvals.c.id),
            {},
        )
        if moved is None:
            return None
        return await self.insert_event(values)
