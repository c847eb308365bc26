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

from sqlalchemy import and_, select

from store.records import Approval, Vote
from store.schema import approval_events, votes
from store.statements import Statements, insert_for

# The events a vote is recorded with (bot/operator.py): a vote towards the quorum, or the one
# that decided the request.
_VOTE_EVENTS = ("voted", "approved", "rejected")

# Each vote with the actor of the events recorded at the same moment on the same request; the
# one whose actor ("web:alice") names the voter gives the surface.
_VOTES_OF = (
    select(votes, approval_events.c.actor.label("event_actor"))
    .select_from(
        votes.outerjoin(
            approval_events,
            and_(
                approval_events.c.approval_id == votes.c.approval_id,
                approval_events.c.at == votes.c.at,
                approval_events.c.type.in_(_VOTE_EVENTS),
            ),
        )
    )
    .order_by(votes.c.approval_id, votes.c.at, votes.c.principal)
)


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
    """The votes cast on each of these approvals, oldest first, each with the surface it was
    cast on: one statement for any number of approvals (those without votes are left out)."""
    if not approval_ids:
        return {}
    stmt = _VOTES_OF.where(votes.c.approval_id.in_(sorted(approval_ids)))
    found: dict[tuple[str, str], Vote] = {}
    for row in (await statements.conn.execute(stmt)).mappings().all():
        key = (row["approval_id"], row["principal"])
        via, _, actor = (row["event_actor"] or "").partition(":")
        if actor != row["principal"]:
            via = ""
        if key not in found or (via and found[key].via is None):
            found[key] = replace(Vote.from_row(row), via=via or None)
    result: dict[str, tuple[Vote, ...]] = {}
    for (approval_id, _), vote in found.items():  # in the statement's order: oldest first
        result[approval_id] = (*result.get(approval_id, ()), vote)
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
