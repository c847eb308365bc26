"""The statements on `standing_grants`: give, find the live ones for a call, use one (a
conditional update), revoke, list (bot/standing.py holds what they mean).

A family of `Tx` (store/repository.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, func, or_, select, update

from store.records import StandingGrant
from store.schema import standing_grants as grants
from store.statements import Statements

_NOW = bindparam("now", type_=grants.c.expires_at.type)
_LIVE = (
    grants.c.revoked_at.is_(None),
    grants.c.expires_at > _NOW,
    or_(grants.c.max_uses.is_(None), grants.c.uses < grants.c.max_uses),
)
_FOR_CALL = (
    select(grants)
    .where(
        grants.c.tenant == bindparam("tenant"),
        grants.c.capability == bindparam("capability"),
        grants.c.tool_name == bindparam("tool_name"),
        *_LIVE,
    )
    .order_by(grants.c.created_at, grants.c.id)
)
# One use, only while the grant is live: a revoke or the last use committing first makes
# this match nothing, so a request is approved by a grant or left pending, never both.
_USE = (
    update(grants)
    .where(grants.c.id == bindparam("w_id"), *_LIVE)
    .values(uses=grants.c.uses + 1)
    .returning(grants)
)


class StandingGrantStatements(Statements):
    """Standing grants: give, find, use, revoke, list."""

    async def insert_standing_grant(self, values: Mapping[str, Any]) -> StandingGrant:
        row = await self._one(grants.insert().returning(grants), values)
        assert row is not None
        return StandingGrant.from_row(row)

    async def get_standing_grant(self, grant_id: str) -> StandingGrant | None:
        row = await self._one(select(grants).where(grants.c.id == grant_id), {})
        return StandingGrant.from_row(row) if row else None

    async def live_standing_grants(
        self, tenant: str, capability: str, tool_name: str, now: datetime
    ) -> list[StandingGrant]:
        """The grants that could approve a call of this tool now, oldest first."""
        params = {"tenant": tenant, "capability": capability, "tool_name": tool_name, "now": now}
        return [StandingGrant.from_row(r) for r in await self._rows(_FOR_CALL, params)]

    async def use_standing_grant(self, grant_id: str, now: datetime) -> StandingGrant | None:
        """Count one use, if the grant is still live at `now`; the grant after it, or None."""
        rows = await self._rows(_USE, {"w_id": grant_id, "now": now})
        return StandingGrant.from_row(rows[0]) if rows else None

    async def count_live_standing_grants(self, now: datetime) -> int:
        """How many grants are live at `now` (the dashboard's summary)."""
        stmt = select(func.count()).select_from(grants).where(*_LIVE)
        return int((await self.conn.execute(stmt, {"now": now})).scalar_one())

    async def revoke_standing_grant(
        self, grant_id: str, now: datetime, by: str
    ) -> StandingGrant | None:
        """End a grant now (once); the revoked grant, or None if it was revoked before."""
        stmt = (
            update(grants)
            .where(grants.c.id == grant_id, grants.c.revoked_at.is_(None))
            .values(revoked_at=now, revoked_by=by)
            .returning(grants)
        )
        row = await self._one(stmt, {})
        return StandingGrant.from_row(row) if row else None

    async def list_standing_grants(
        self, *, live_at: datetime | None = None, tenant: str | None = None
    ) -> list[StandingGrant]:
        """Every grant (or those live at `live_at`), newest first."""
        stmt = select(grants).order_by(grants.c.created_at.desc(), grants.c.id)
        params: dict[str, Any] = {}
        if live_at is not None:
            stmt = stmt.where(*_LIVE)
            params["now"] = live_at
        if tenant is not None:
            stmt = stmt.where(grants.c.tenant == tenant)
        rows = (await self.conn.execute(stmt, params)).mappings().all()
        return [StandingGrant.from_row(r) for r in rows]
