"""The statements on `votes`: one row per principal who decided a request, so an N-of-M
approval counts each person once.

A family of `Tx` (store/repository.py).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from sqlalchemy import bindparam, select

from store.records import Vote
from store.schema import votes
from store.statements import Statements, insert_for

_VOTES_FOR = (
    select(votes).where(votes.c.approval_id == bindparam("approval_id")).order_by(votes.c.at)
)


@functools.cache
def _insert_vote(dialect: str) -> Any:
    return (
        insert_for(dialect, votes)
        .on_conflict_do_nothing(index_elements=["approval_id", "principal"])
        .returning(votes.c.principal)
    )


class VoteStatements(Statements):
    """Casting and reading votes."""

    async def insert_vote(self, values: Mapping[str, Any]) -> bool:
        """Record one principal's vote; False when that principal already voted."""
        return (await self._one(_insert_vote(self._dialect), values)) is not None

    async def votes_for(self, approval_id: str) -> list[Vote]:
        """The votes cast on an approval, oldest first."""
        rows = await self._rows(_VOTES_FOR, {"approval_id": approval_id}, votes)
        return [Vote.from_row(r) for r in rows]
