"""The statements that read many approvals at once: the API's pages, the CLI's list, the
inbox's candidates, the metrics' counts, a scan of every pending request.

A family of `Tx` (store/repository.py). The web dashboard's reads are store/dashboard.py.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import fields
from datetime import datetime
from typing import Any

from sqlalchemy import Select, and_, bindparam, func, literal_column, or_, select, tuple_

from store.records import Approval, Candidate, HomeChange
from store.schema import approvals, votes
from store.statements import Statements, one_of
from store.votes import attach_votes

_CANDIDATE_COLUMNS = [approvals.c[f.name] for f in fields(Candidate)]
_VOTES_CAST = (
    select(func.count())
    .where(votes.c.approval_id == approvals.c.id)
    .scalar_subquery()
    .label("votes")
)
_HOME_CHANGE_COLUMNS = [approvals.c[f.name] for f in fields(HomeChange) if f.name != "votes"]
_PAGE_FILTERS = frozenset({"state", "run_id", "capability", "assignee"})
_PENDING = one_of(approvals.c.state, "pending")
_ZERO = literal_column("0")


@functools.cache
def _pending_naming(dialect: str, after: bool) -> Any:
    """`pending_naming`'s statement, built once per shape: a Home counting hundreds of
    candidates runs it a few times a publish, and building it cost as much as running it."""
    if dialect == "postgresql":
        named = func.json_array_elements_text(approvals.c.approvers).table_valued("value")
    else:
        named = func.json_each(approvals.c.approvers).table_valued("value")
    keys = bindparam("keys", expanding=True)
    listed = select(named.c.value).where(named.c.value.in_(keys)).exists()
    stmt = select(*_CANDIDATE_COLUMNS).where(
        _PENDING,
        approvals.c.expires_at > bindparam("now", type_=approvals.c.expires_at.type),
        or_(approvals.c.assignee.in_(keys), listed),
    )
    if after:
        after_at = bindparam("after_at", type_=approvals.c.expires_at.type)
        stmt = stmt.where(
            or_(
                approvals.c.expires_at > after_at,
                and_(
                    approvals.c.expires_at == after_at,
                    approvals.c.id > bindparam("after_id", type_=approvals.c.id.type),
                ),
            )
        )
    return stmt.order_by(approvals.c.expires_at, approvals.c.id).limit(bindparam("limit"))


class ListingStatements(Statements):
    """Pages, lists and counts of approvals."""

    async def page_approvals(
        self,
        tenant: str,
        *,
        filters: Mapping[str, str],
        before: tuple[datetime, str] | None,
        limit: int,
        ids: Sequence[str] = (),
    ) -> list[Approval]:
        """One page of a tenant's approvals, newest first, after the cursor `before`
        ((created_at, id) of the last row of the previous page). `filters` are equality
        conditions on state, run_id, capability, assignee.

        With a state (and nothing else) the page is a range of the (tenant, state,
        created_at, id) index read backwards from the cursor (0009): its cost follows
        `limit`, not how many rows the tenant has, or how few are in that state."""
        stmt: Select[Any] = select(approvals).where(approvals.c.tenant == tenant)
        if ids:  # `ids` in the query: only these requests (at most a page's worth)
            stmt = stmt.where(approvals.c.id.in_(list(ids)))
        for name, value in filters.items():
            if name not in _PAGE_FILTERS:
                raise ValueError(f"cannot filter approvals on {name!r}")
            stmt = stmt.where(approvals.c[name] == value)
        if before is not None:
            # A row value, which both databases turn into one index range (an OR of two
            # conditions is a filter over every row before the cursor on SQLite).
            stmt = stmt.where(
                tuple_(approvals.c.created_at, approvals.c.id)
                < tuple_(
                    bindparam("before_at", before[0], type_=approvals.c.created_at.type),
                    bindparam("before_id", before[1], type_=approvals.c.id.type),
                )
            )
        stmt = stmt.order_by(approvals.c.created_at.desc(), approvals.c.id.desc()).limit(limit)
        rows = (await self.conn.execute(stmt)).mappings().all()
        return await attach_votes(self, [Approval.from_row(r) for r in rows])

    async def pending_page(self, after_id: str, limit: int) -> list[Approval]:
        """Pending approvals in id order after `after_id` (a scan in bounded pages)."""
        stmt = (
            select(approvals)
            .where(_PENDING, approvals.c.id > after_id)
            .order_by(approvals.c.id)
            .limit(limit)
        )
        rows = (await self.conn.execute(stmt)).mappings().all()
        return await attach_votes(self, [Approval.from_row(r) for r in rows])

    async def list_approvals(
        self, *, tenant: str | None = None, state: str | None = None, limit: int = 100
    ) -> list[Approval]:
        """The newest approvals first, optionally of one tenant and in one state."""
        stmt: Select[Any] = select(approvals)
        if tenant is not None:
            stmt = stmt.where(approvals.c.tenant == tenant)
        if state is not None:
            stmt = stmt.where(approvals.c.state == state)
        stmt = stmt.order_by(approvals.c.created_at.desc(), approvals.c.id.desc()).limit(limit)
        rows = (await self.conn.execute(stmt)).mappings().all()
        return await attach_votes(self, [Approval.from_row(r) for r in rows])

    async def pending_naming(
        self,
        keys: Collection[str],
        now: datetime,
        after: tuple[datetime, str] | None,
        limit: int,
    ) -> list[Candidate]:
        """Pending approvals still open at `now` whose assignee or approvers name one of
        `keys` (principals and "group:NAME" entries), soonest deadline first, after the
        cursor `after` ((expires_at, id) of the last row already read): the inbox's
        candidates, along the partial index on pending rows' expires_at, filtered in the
        database so a page never ships other people's requests to be looked at. The caller
        judges each candidate by the eligibility rule itself, then reads the few it shows
        whole (`approvals_in`): a Home counting hundreds parses none of their calls."""
        params: dict[str, Any] = {"keys": list(keys), "now": now, "limit": limit}
        if after is not None:
            params["after_at"], params["after_id"] = after
        stmt = _pending_naming(self._dialect, after is not None)
        rows = (await self.conn.execute(stmt, params)).mappings().all()
        return [Candidate.from_row(r) for r in rows]

    async def approvals_in(self, approval_ids: Collection[str]) -> dict[str, Approval]:
        """The approvals with these ids, by id (those that exist)."""
        if not approval_ids:
            return {}
        stmt = select(approvals).where(approvals.c.id.in_(list(approval_ids)))
        rows = (await self.conn.execute(stmt)).mappings().all()
        found = await attach_votes(self, [Approval.from_row(r) for r in rows])
        return {row.id: row for row in found}

    async def home_changes(self, approval_ids: Collection[str]) -> dict[str, HomeChange]:
        """What a Slack Home refresh reads of these requests (those that exist), by id: one
        statement, no call or presentation parsed, votes counted rather than read."""
        if not approval_ids:
            return {}
        stmt = select(*_HOME_CHANGE_COLUMNS, _VOTES_CAST).where(
            approvals.c.id.in_(list(approval_ids))
        )
        rows = (await self.conn.execute(stmt)).mappings().all()
        return {row["id"]: HomeChange.from_row(row) for row in rows}

    async def pending_summary(self) -> list[tuple[str, str, int, datetime]]:
        """(tenant, capability, pending count, oldest created_at) for the metrics: read from
        the partial index of pending rows in its own order (0009), never from the table."""
        stmt = (
            select(
                approvals.c.tenant,
                approvals.c.capability,
                func.count(),
                func.min(approvals.c.created_at),
            )
            .where(_PENDING)
            .group_by(approvals.c.tenant, approvals.c.capability)
        )
        return [tuple(row) for row in (await self.conn.execute(stmt)).all()]  # type: ignore[misc]

    async def past_last_escalation(self) -> list[tuple[str, int]]:
        """(tenant, count) of pending approvals that escalated and have no step left: a
        range of the partial index that holds only those rows (0009)."""
        stmt = (
            select(approvals.c.tenant, func.count())
            .where(
                _PENDING, approvals.c.escalation_level > _ZERO, approvals.c.escalate_at.is_(None)
            )
            .group_by(approvals.c.tenant)
        )
        return [tuple(row) for row in (await self.conn.execute(stmt)).all()]  # type: ignore[misc]
