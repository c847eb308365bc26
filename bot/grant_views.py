"""Standing grants as the surfaces show them: what a card offers beside Approve ("Approve,
and allow the same for …"), one line describing a grant, and the grants a person may see and
revoke. Every surface (web, Slack, Telegram, CLI) reads them here so that they offer and say
the same thing; bot/standing.py judges what is asked and writes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from bot.errors import SignoffError
from bot.routing import Directory
from store.records import Approval, StandingGrant
from store.repository import Store

# The lifetimes a card offers, each only below the route's `max_grant_lifetime` (which is
# always offered too).
_LIFETIMES = (timedelta(hours=1), timedelta(hours=8))
MAX_USES = 1000


@dataclass(frozen=True, slots=True)
class OfferedArgument:
    """An argument the grant may be bound to: equal to `value`, or (a number) at most it."""

    key: str
    value: Any
    number: bool


@dataclass(frozen=True, slots=True)
class GrantOffer:
    """What "Approve, and allow the same for …" offers on one card."""

    lifetimes: tuple[timedelta, ...]  # shortest first; the last is the route's bound
    arguments: tuple[OfferedArgument, ...]


def offer(directory: Directory, row: Approval) -> GrantOffer | None:
    """What a card of `row` offers, or None where its route gives no grants (or this approval
    would be a vote short of its quorum, which gives none). The decision re-checks all of it
    (bot/standing.check_scope): this only decides what to show."""
    if row.tool_name is None:
        return None
    try:
        route = directory.route_of(row)
    except SignoffError:
        return None
    approving = sum(1 for v in row.votes if v.decision == "approve")
    if not route.grants or row.required_approvals - approving != 1:
        return None
    longest = route.max_grant_lifetime
    lifetimes = tuple(sorted({t for t in _LIFETIMES if t < longest} | {longest}))
    arguments = tuple(
        OfferedArgument(key, value, isinstance(value, int | float) and not isinstance(value, bool))
        for key, value in (row.tool_args or {}).items()
    )
    return GrantOffer(lifetimes=lifetimes, arguments=arguments)


def describe(grant: StandingGrant) -> str:
    """One line: what it allows, given by whom, until when, how often it was used."""
    what = f"{grant.tenant}/{grant.capability} {grant.tool_name}"
    if grant.run_id:
        what += f" in run {grant.run_id}"
    parts = (grant.conditions or {}).get("all", [])
    if parts:
        what += " where " + " and ".join(f"{p['arg']} {p['op']} {p['value']!r}" for p in parts)
    uses = f"{grant.uses} of {grant.max_uses}" if grant.max_uses else f"{grant.uses}"
    who = grant.granted_by + (f" for {grant.as_delegate_of}" if grant.as_delegate_of else "")
    ended = (
        f"; revoked {grant.revoked_at:%Y-%m-%d %H:%M} UTC by {grant.revoked_by}"
        if grant.revoked_at
        else ""
    )
    return (
        f"{what}, given by {who}, until {grant.expires_at:%Y-%m-%d %H:%M} UTC, used {uses}{ended}"
    )


def may_revoke(
    directory: Directory, principal: str, grant: StandingGrant, *, operator: bool = False
) -> bool:
    """Whether `principal` may end `grant`: its giver, or an operator (bot/standing.revoke
    checks the same when it writes). `operator` says the surface made them one for this
    session (the web's OpenID provider's operator claim)."""
    if principal == grant.granted_by or operator:
        return True
    try:
        return directory.principal(principal).operator
    except SignoffError:
        return False


async def visible_grants(
    store: Store, directory: Directory, principal: str, now: datetime, *, operator: bool = False
) -> list[StandingGrant]:
    """The live grants `principal` may see and revoke, newest first: the ones they gave, and
    for an operator (or someone `operator` makes one, as may_revoke) every one."""
    async with store.read() as tx:
        found = await tx.list_standing_grants(live_at=now)
    return [g for g in found if may_revoke(directory, principal, g, operator=operator)]


__all__ = [
    "MAX_USES",
    "GrantOffer",
    "OfferedArgument",
    "describe",
    "may_revoke",
    "offer",
    "visible_grants",
]
