"""The operator dashboard's statements (channels/web/dashboard.py): pending pages and
counts across every tenant, recent decisions, and the two charts' counts.

A family of `Tx` (store/repository.py). The charts' statements are built once per shape
(number of spans, bin edges): building and keying a statement of their size costs more than
running it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, bindparam, case, extract, func, literal_column, or_, select

from store.records import Approval
from store.schema import approval_events, approvals
from store.statements import Statements, one_of
from store.votes import attach_votes


@functools.cache
def _pending_flow(spans: int) -> Any:
    """One row of 3 counts per span, built once per number of spans (building and keying
    a statement of this size costs more than running it)."""
    events = approval_events.c
    ends = ["approved", "rejected", "expired", "cancelled", "superseded"]
    closing = ["expired", "cancelled", "superseded"]
    from_elsewhere = func.coalesce(events.data["from"].as_string(), "pending") != "pending"
    at = approval_events.c.at.type

    def count(i: int, types: list[str], *more: Any) -> Any:
        lo, hi = bindparam(f"b{i}", type_=at), bindparam(f"b{i + 1}", type_=at)
        where = [events.type.in_(types), events.at > lo, events.at <= hi, *more]
        return select(func.count()).select_from(approval_events).where(*where)

    columns = []
    for i in range(spans):
        columns += [
            count(i, ["requested"]).scalar_subquery(),
            count(i, ends).scalar_subquery(),
            count(i, closing, from_elsewhere).scalar_subquery(),
        ]
    return select(*columns)


@functools.cache
def _decision_times(dialect: str, edges: tuple[int, ...]) -> Any:
    """(bin, count) of decisions by time taken, built once per dialect and set of edges."""
    decided, created = approvals.c.decided_at, approvals.c.created_at
    if dialect == "postgresql":
        seconds = extract("epoch", decided - created)
    else:
        seconds = (func.julianday(decided) - func.julianday(created)) * 86400
    # Literal numbers, not parameters: the statement is built once, and PostgreSQL would
    # not match a GROUP BY expression whose literals are separate parameters anyway.
    bin_ = case(
        *[
            (seconds < literal_column(str(int(edge))), literal_column(str(i)))
            for i, edge in enumerate(edges)
        ],
        else_=literal_column(str(len(edges))),
    )
    when = bindparam("since", type_=decided.type), bindparam("until", type_=decided.type)
    binned = (
        select(bin_.label("bin"))
        .where(decided.is_not(None), decided > when[0], decided <= when[1])
        .subquery()
    )
    return select(binned.c.bin, func.count()).group_by(binned.c.bin)


class DashboardStatements(Statements):
    """The dashboard's pages and the counts its charts draw."""

    async def dashboard_pending(
        self,
        *,
        limit: int,
        after: tuple[datetime, str] | None = None,
        before: tuple[datetime, str] | None = None,
    ) -> list[Approval]:
        """One keyset page of every tenant's pending approvals, soonest deadline first (so
        the overdue lead), along the partial index on pending rows' expires_at: the rows
        after (expires_at, id) `after`, or the `limit` rows just before `before`."""
        stmt = select(approvals).where(one_of(approvals.c.state, "pending"))
        expires, key = approvals.c.expires_at, approvals.c.id
        if before is not None:
            at, last_id = before
            stmt = stmt.where(or_(expires < at, and_(expires == at, key < last_id)))
            stmt = stmt.order_by(expires.desc(), key.desc()).limit(limit)
            rows = (await self.conn.execute(stmt)).mappings().all()
            return await attach_votes(self, [Approval.from_row(r) for r in reversed(rows)])
        if after is not None:
            at, last_id = after
            stmt = stmt.where(or_(expires > at, and_(expires == at, key > last_id)))
        stmt = stmt.order_by(expires, key).limit(limit)
        rows = (await self.conn.execute(stmt)).mappings().all()
        return await attach_votes(self, [Approval.from_row(r) for r in rows])

    async def dashboard_pending_counts(self, now: datetime) -> tuple[int, int]:
        """(pending, of which overdue at `now`) across every tenant, from the partial index."""
        overdue = case((approvals.c.expires_at <= now, 1), else_=0)
        stmt = select(func.count(), func.coalesce(func.sum(overdue), 0)).where(
            one_of(approvals.c.state, "pending")
        )
        total, late = (await self.conn.execute(stmt)).one()
        return int(total), int(late)

    async def dashboard_recent_decisions(
        self, limit: int
    ) -> list[tuple[Approval, str | None, str | None]]:
        """The latest human decisions, newest first: each approval with the type and actor of
        the audit event that decided it (the actor names the surface: "web:alice"); a quorum's
        approval carries every vote that decided it."""
        decided = and_(
            approval_events.c.approval_id == approvals.c.id,
            approval_events.c.at == approvals.c.decided_at,
            approval_events.c.type.in_(["approved", "rejected", "cancelled"]),
        )
        stmt = (
            select(
                approvals,
                approval_events.c.type.label("decision_event"),
                approval_events.c.actor.label("decision_actor"),
            )
            .select_from(approvals.outerjoin(approval_events, decided))
            .where(approvals.c.decided_at.is_not(None))
            .order_by(approvals.c.decided_at.desc(), approvals.c.id.desc())
            .limit(limit)
        )
        rows = (await self.conn.execute(stmt)).mappings().all()
        found = await attach_votes(self, [Approval.from_row(r) for r in rows])
        return [
            (row, r["decision_event"], r["decision_actor"])
            for row, r in zip(found, rows, strict=True)
        ]

    async def dashboard_pending_flow(self, boundaries: Sequence[datetime]) -> list[tuple[int, int]]:
        """For each interval (boundaries[i], boundaries[i + 1]]: how many requests were made
        and how many left pending, from the audit trail. Left pending: approved or rejected,
        or expired, cancelled or superseded while pending (the event's `from`; those events
        also close approved grants). Each count is a range of the (type, at) index, which
        SQLite and PostgreSQL count without sorting or grouping anything; only expired,
        cancelled and superseded events are read beyond the index."""
        spans = len(boundaries) - 1
        if spans < 1:
            return []
        params = {f"b{i}": moment for i, moment in enumerate(boundaries)}
        row = (await self.conn.execute(_pending_flow(spans), params)).one()
        return [(int(row[3 * i]), int(row[3 * i + 1]) - int(row[3 * i + 2])) for i in range(spans)]

    async def dashboard_decision_times(
        self, since: datetime, until: datetime, edges: Sequence[int]
    ) -> list[int]:
        """How many human decisions in (since, until] took less than each of `edges`
        (seconds, ascending) from the request, bin by bin; the last count is the rest. Read
        from the (decided_at, created_at) index alone."""
        stmt = _decision_times(self._dialect, tuple(edges))
        counts = [0] * (len(edges) + 1)
        for index, n in (await self.conn.execute(stmt, {"since": since, "until": until})).all():
            counts[int(index)] = int(n)
        return counts
