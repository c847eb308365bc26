"""Which pending requests a person may decide: the candidates the database names, judged by
the Operator's own eligibility rule.

The database hands over, in deadline order along its index of pending rows and a bounded
batch at a time, only the rows whose assignee or approvers name the person, someone they
stand in for, or one of those people's groups (`Tx.pending_naming`); each is then judged by
`Directory.check_eligible` (approving=False, so a requester who may still reject or hand on
their request sees it). Used by the web inbox (channels.web.inbox) and the Slack App Home
(channels.slack.home).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from bot.errors import NotAnApprover
from bot.model import State
from bot.routing import GROUP_PREFIX, Directory, Standing
from store.records import Approval, Candidate, Delegation
from store.repository import Store

_BATCH = 200  # candidate rows read per query, at most
_BATCH_MIN = 50  # ... and at least
# At most this many candidates examined for one call: when many fail the exact rule (a
# delegation's scope, say), stop and let the caller continue from the last row examined.
_SCAN = 2000


@dataclass(frozen=True, slots=True)
class Pending:
    approval: Approval
    standing: Standing  # in their own right, or as whose delegate


@dataclass(frozen=True, slots=True)
class Found:
    items: list[Pending]  # the first `limit` requests, read whole
    counted: int  # requests found eligible and still pending, `items` included; <= `count`
    more: str | None  # the id to continue after (the last counted), if there may be more


async def pending_for(
    store: Store,
    directory: Directory,
    principal: str,
    now: datetime,
    *,
    limit: int,
    count: int | None = None,
    after: str | None = None,
) -> Found:
    """The first `limit` pending requests `principal` may decide, soonest deadline first,
    after the request `after`; how many are eligible, counting up to `count` (default
    `limit`); and where to continue if there may be more. Candidates are judged on their
    routing columns (`Candidate`); only the ones returned are read whole."""
    count = max(count or limit, limit)
    eligible: list[tuple[Candidate, Standing]] = []
    more: str | None = None
    async with store.read() as tx:
        delegations = await tx.delegations_to(principal, now)
        keys = candidate_keys(directory, principal, delegations)
        cursor: tuple[datetime, str] | None = None
        if after is not None:
            previous = await tx.get_approval(after)
            if previous is not None:
                cursor = (previous.expires_at, previous.id)
        scanned = 0
        while more is None:
            # No more rows than could still count (`count` eligible and one to say "more"),
            # but not so few that a run of ineligible ones takes a query each.
            asked = min(_BATCH, max(count + 1 - len(eligible), _BATCH_MIN))
            batch = await tx.pending_naming(keys, now, cursor, asked)
            for row in batch:
                cursor = (row.expires_at, row.id)
                scanned += 1
                standing = standing_of(directory, row, principal, delegations)
                if standing is None:
                    continue
                if len(eligible) == count:
                    more = eligible[-1][0].id  # one more exists
                    break
                eligible.append((row, standing))
            else:
                if len(batch) < asked:
                    break
                if scanned >= _SCAN:
                    assert cursor is not None
                    more = cursor[1]
        shown = eligible[:limit]
        whole = await tx.approvals_in([row.id for row, _ in shown])
    # A request decided between the two reads drops out, and out of the count (each read
    # sees what has committed when it runs, on both databases).
    items = [
        Pending(approval, standing)
        for row, standing in shown
        if (approval := whole.get(row.id)) is not None and approval.state == State.PENDING
    ]
    return Found(items, len(eligible) - (len(shown) - len(items)), more)


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
    directory: Directory, row: Candidate, principal: str, delegations: list[Delegation]
) -> Standing | None:
    """The Operator's eligibility rule, approving=False; None if `principal` may not decide."""
    try:
        return directory.check_eligible(row, principal, approving=False, delegations=delegations)
    except NotAnApprover:
        return None
