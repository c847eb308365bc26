"""The statements on `delegations`: create, revoke, list, and the active ones by or to a
principal (bot/delegations.py holds what they mean).

A family of `Tx` (store/repository.py).
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, func, or_, select, update

from store.records import Delegation
from store.schema import delegations
from store.statements import Statements

# Any constant, the same in every replica: the advisory lock key of delegation writes.
_DELEGATIONS_LOCK = 0x5160FF_DE1E


@functools.cache
def _delegations_from(count: int) -> Any:
    """Active delegations by any of `count` principals (:p0 ... :pN-1) at :now: one statement
    per count, so it is built and compiled once, not per request."""
    now = bindparam("now", type_=delegations.c.starts_at.type)
    return select(delegations).where(
        delegations.c.principal.in_([bindparam(f"p{i}") for i in range(count)]),
        delegations.c.starts_at <= now,
        or_(delegations.c.ends_at.is_(None), delegations.c.ends_at > now),
        delegations.c.revoked_at.is_(None),
    )


_DELEGATIONS_TO = select(delegations).where(
    delegations.c.delegate == bindparam("delegate"),
    delegations.c.starts_at <= bindparam("now", type_=delegations.c.starts_at.type),
    or_(
        delegations.c.ends_at.is_(None),
        delegations.c.ends_at > bindparam("now", type_=delegations.c.starts_at.type),
    ),
    delegations.c.revoked_at.is_(None),
)


class DelegationStatements(Statements):
    """Delegations and their writers' lock."""

    async def lock_delegations(self) -> None:
        """Take the delegations table's writer lock until this transaction ends, so a check
        across several rows (no circle) and the insert that relies on it are one step. SQLite
        write transactions are exclusive already; PostgreSQL takes an advisory lock."""
        if self._dialect == "postgresql":
            await self.conn.execute(select(func.pg_advisory_xact_lock(_DELEGATIONS_LOCK)))

    async def insert_delegation(self, values: Mapping[str, Any]) -> Delegation:
        row = await self._one(delegations.insert().returning(delegations), values)
        assert row is not None
        return Delegation.from_row(row)

    async def get_delegation(self, delegation_id: str) -> Delegation | None:
        row = await self._one(select(delegations).where(delegations.c.id == delegation_id), {})
        return Delegation.from_row(row) if row else None

    async def list_delegations(self, *, live_at: datetime | None = None) -> list[Delegation]:
        """Every delegation, or with `live_at` those not over by then (active or to come),
        soonest first."""
        stmt = select(delegations).order_by(delegations.c.starts_at, delegations.c.id)
        if live_at is not None:
            stmt = stmt.where(
                delegations.c.revoked_at.is_(None),
                or_(delegations.c.ends_at.is_(None), delegations.c.ends_at > live_at),
            )
        return [Delegation.from_row(r) for r in (await self.conn.execute(stmt)).mappings().all()]

    async def delegations_to(self, delegate: str, now: datetime) -> list[Delegation]:
        """Delegations naming `delegate` that are active at `now`."""
        params = {"delegate": delegate, "now": now}
        rows = await self._rows(_DELEGATIONS_TO, params)
        return [Delegation.from_row(r) for r in rows]

    async def delegations_from(
        self, principals: Collection[str], now: datetime
    ) -> list[Delegation]:
        """Delegations by any of `principals` that are active at `now` (one query however
        many approvers a request has)."""
        if not principals:
            return []
        names = sorted(principals)
        params: dict[str, Any] = {f"p{i}": name for i, name in enumerate(names)}
        params["now"] = now
        rows = await self._rows(_delegations_from(len(names)), params)
        return [Delegation.from_row(r) for r in rows]

    async def revoke_delegation(
        self, delegation_id: str, *, now: datetime, by: str
    ) -> Delegation | None:
        """Revoke a delegation not yet revoked; None if it was (or does not exist)."""
        row = await self._one(
            update(delegations)
            .where(delegations.c.id == delegation_id, delegations.c.revoked_at.is_(None))
            .values(revoked_at=now, revoked_by=by)
            .returning(delegations),
            {},
        )
        return Delegation.from_row(row) if row else None
