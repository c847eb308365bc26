"""Which pending requests a person may decide: the candidates the database names, judged by
the Operator's own eligibility rule.

The database hands over, in deadline order along its index of pending rows and a bounded
batch at a time, only the rows whose assignee or approvers name the person, someone they
stand in for, or one of those people's groups (`Tx.pending_naming`); each is then judged by
`Directory.check_eligible` (approving=False, so a requester who may still reject or hand on
their request sees it). Used by the web inbox (channels.web_inbox) and the Slack App Home
(channels.slack_home).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from bot.errors import NotAnApprover
from bot.routing import GROUP_PREFIX, Directory, Standing
from store.records import Approval, Delegation
from store.repository import Store

_BATCH = 200  # candidate rows read per query
# At most this many candidates examined for one call: when many fail the exact rule (a
# delegation's scope, say), stop and let the caller continue from the last row examined.
_SCAN = 2000


@dataclass(frozen=True, slots=True)
class Pending:
    approval: Approval
    standing: Standing  # in their own right, or as whose delegate


async def pending_for(
    store: Store,
    directory: Directory,
    principal: str,
    now: datetime,
    *,
    limit: int,
    after: str | None = None,
) -> tuple[list[Pending], str | None]:
    """Up to `limit` pending requests `principal` may decide, soonest deadline first, after
    the request `after`; and the id to continue after, if there may be more."""
    found: list[Pending] = []
    async with store.read() as tx:
        delegations = await tx.delegations_to(principal, now)
        keys = candidate_keys(directory, principal, delegations)
        cursor: tuple[datetime, str] | None = None
        if after is not None:
            previous = await tx.get_approval(after)
            if previous is not None:
                cursor = (previous.expires_at, previous.id)
        scanned = 0
        while True:
            batch = await tx.pending_naming(keys, now, cursor, _BATCH)
            for row in batch:
                cursor = (row.expires_at, row.id)
                scanned += 1
                standing = standing_of(directory, row, principal, delegations)
                if standing is None:
                    continue
                if len(found) == limit:
                    return found, found[-1].approval.id  # one more exists
                found.append(Pending(row, standing))
            if len(batch) < _BATCH:
                return found, None
            if scanned >= _SCAN:
                assert cursor is not None
                return found, cursor[1]


def candidate_keys(directory: Directory, principal: str, delegations: list[Delegation]) -> set[str]:
    """What a request's assignee or approvers must name to possibly be `principal`'s: them,
    whoever they stand in for now, and those people's groups (a superset; the exact rule is
    `standing_of`)."""
    people = {principal} | {d.principal for d in delegations}
    groups = {
        f"{GROUP_PREFIX}{name}"
        for name, members in directory.groups.items()
        if people & set(members)
    }
    return people | groups


def standing_of(
    directory: Directory, row: Approval, principal: str, delegations: list[Delegation]
) -> Standing | None:
    """The Operator's eligibility rule, approving=False; None if `principal` may not decide."""
    try:
        return directory.check_eligible(row, principal, approving=False, delegations=delegations)
    except NotAnApprover:
        return None
