"""The statements on `votes`: one row per principal who decided a request, so an N-of-M
approval counts each person once.

A family of `Tx` (store/repository.py). Every approval the store returns carries its votes
(`attach_votes`), read for any number of approvals in one statement, so a list of requests
never costs a query per row.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import bindparam, delete, select

from store.records import Approval, Vote
from store.schema import votes
from store.statements import Statements, insert_for

_VOTES_OF = select(votes).order_by(votes.c.approval_id, votes.c.at, votes.c.principal)
_VOTES_FOR = (
    select(votes).where(votes.c.approval_id == bindparam("approval_id")).order_by(votes.c.at)
)
_CLEAR_VOTES = delete(votes).where(votes.c.approval_id == bindparam("approval_id"))


@functools.cache
def _insert_vote(dialect: str) -> Any:
    return (
        insert_for(dialect, votes)
        .on_conflict_do_nothing(index_elements=["approval_id", "principal"])
        .returning(votes.c.principal)
    )


async def read_votes(
    statements: Statements, approval_ids: Collection[str]
) -> dict[str, tuple[Vote, ...]]:
    """The votes cast on each of these approvals, oldest first: one statement for any number
    of approvals (those without votes are left out)."""
    if not approval_ids:
        return {}
    if len(approval_ids) == 1:  # one request being decided or shown: the driver path
        [approval_id] = approval_ids
        rows = await statements._rows(_VOTES_FOR, {"approval_id": approval_id})
        return {approval_id: tuple(Vote.from_row(r) for r in rows)} if rows else {}
    stmt = _VOTES_OF.where(votes.c.approval_id.in_(sorted(approval_ids)))
    result: dict[str, tuple[Vote, ...]] = {}
    for row in (await statements.conn.execute(stmt)).mappings().all():
        result[row["approval_id"]] = (*result.get(row["approval_id"], ()), Vote.from_row(row))
    return result


async def attach_votes(statements: Statements, rows: Sequence[Approval]) -> list[Approval]:
    """`rows` with their votes, read in one statement for the quorums among them (only an
    N-of-M request has votes: the rest are returned as they are, without a read)."""
    quorums = {row.id for row in rows if row.required_approvals > 1}
    cast = await read_votes(statements, quorums)
    return [replace(row, votes=cast[row.id]) if row.id in cast else row for row in rows]


async def with_votes(statements: Statements, row: Approval | None) -> Approval | None:
    """One approval with its votes (attach_votes)."""
    return None if row is None else (await attach_votes(statements, [row]))[0]


class VoteStatements(Statements):
    """Casting and reading votes."""

    async def insert_vote(self, values: Mapping[str, Any]) -> bool:
        """Record one principal's vote; False when that principal already voted."""
        return (await self._one(_insert_vote(self._dialect), values)) is not None

    async def votes_for(self, approval_id: str) -> list[Vote]:
        """The votes cast on an approval, oldest first."""
        return list((await read_votes(self, [approval_id])).get(approval_id, ()))

    async def clear_votes(self, approval_id: str) -> None:
        """Forget the votes cast on an approval: its call was edited, and every vote must be
        on the same revision (the audit trail keeps the earlier ones)."""
        await self.conn.execute(_CLEAR_VOTES, {"approval_id": approval_id})
