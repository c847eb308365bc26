"""Standing grants: "approve, and allow the same for ...", given from a card, used at create.

A person entitled to approve a request may, with the approval, allow later requests of the
same tenant, capability and tool to be approved at once: for a lifetime the route bounds
(`max_grant_lifetime`; `grants = false` forbids them, and a quorum route forbids them unless
it says `grants = true`), optionally only in this run, only where chosen arguments equal
their value on this card or where a number is at most its value here, and up to a number of
uses. The grant is a row (store/standing_grants.py) and the approval that gave it records it.

A later request is approved by a grant only while the grant is live (not revoked, not past
its lifetime, uses left: one conditional update, so a revoke committing first leaves the
request pending, never both), only if its giver may still decide that very request today
(the eligibility rule every decision meets; a delegate's grant only while the delegation
lasts), and only if it needs no more approvals than its route asks for. It is still a row
with its own hash: its `approved` event names the grant and the giver, the record says
`approved_by_grant`, and the claim re-judges it like any approval, refusing one whose grant
was revoked before the claim (`policy_changed`, bot/grant.py).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from bot import audit, conditions, transitions
from bot.durations import format_duration
from bot.errors import GrantRefused, InvalidRequest, NotAnApprover, NotFound, SignoffError
from bot.model import Kind, State
from bot.routing import Directory, Route, Standing, covers
from bot.transitions import Transition
from store.records import Approval, StandingGrant
from store.repository import Store, Tx

# The actor of an approval a grant made: "grant:alice" (the principal is the giver's, so
# the claim re-judges the giver as it re-judges any approver).
GRANT_VIA = "grant"


@dataclass(frozen=True, slots=True)
class GrantScope:
    """What a person allows with their approval: for how long, in this run only or any,
    which arguments must equal their value on this card (`equal`), which numbers may be at
    most their value here (`at_most`), and how many times (None: no limit)."""

    lifetime: timedelta
    this_run: bool = False
    equal: tuple[str, ...] = ()
    at_most: tuple[str, ...] = ()
    max_uses: int | None = None


def check_scope(route: Route, row: Approval, scope: GrantScope) -> None:
    """GrantRefused unless the route lets its approvers give this grant from this card."""
    if row.kind != Kind.TOOL_CALL:
        raise GrantRefused("only a tool call's approval can allow the same for later calls")
    if not route.grants:
        why = (
            "it needs a quorum (a route allows grants on one with grants = true)"
            if route.required_approvals > 1
            else "grants = false"
        )
        raise GrantRefused(f"the route for {row.capability!r} allows no standing grants: {why}")
    if row.required_approvals > route.required_approvals:
        raise GrantRefused("this request asked for more approvals than its route: no grants")
    if not timedelta(0) < scope.lifetime <= route.max_grant_lifetime:
        raise GrantRefused(
            f"a grant here lasts at most {format_duration(route.max_grant_lifetime)} "
            f"(max_grant_lifetime), not {format_duration(scope.lifetime)}"
        )
    if scope.max_uses is not None and scope.max_uses < 1:
        raise InvalidRequest("a grant's use limit is at least 1")


def conditions_for(row: Approval, scope: GrantScope) -> dict[str, Any] | None:
    """The grant's conditions, from what this card shows: each `equal` argument equal to its
    value here, each `at_most` argument (a number) at most its value here."""
    arguments = row.tool_args or {}
    parts: list[dict[str, Any]] = []
    for op, keys in (("==", scope.equal), ("<=", scope.at_most)):
        for key in keys:
            if key not in arguments:
                raise InvalidRequest(f"the call has no argument {key!r} to bind the grant to")
            value = arguments[key]
            if op == "<=" and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise InvalidRequest(f"{key} is not a number: a grant can only hold it equal")
            parts.append({"arg": key, "op": op, "value": value})
    if not parts:
        return None
    document = {"all": parts}
    conditions.parse(document)  # what it stores it can read back
    return document


def new_grant(
    row: Approval, scope: GrantScope, standing: Standing, now: datetime
) -> dict[str, Any]:
    """The row of the grant `standing.principal` gives with their approval of `row`."""
    return {
        "id": str(uuid.uuid4()),
        "tenant": row.tenant,
        "capability": row.capability,
        "tool_name": row.tool_name,
        "run_id": row.run_id if scope.this_run else None,
        "conditions": conditions_for(row, scope),
        "granted_by": standing.principal,
        "as_delegate_of": standing.on_behalf_of,
        "approval_id": row.id,
        "created_at": now,
        "expires_at": now + scope.lifetime,
        "max_uses": scope.max_uses,
        "uses": 0,
    }


def grant_record(grant: StandingGrant) -> dict[str, Any]:
    """A grant as the audit trail, `--json` and the record keep it."""
    from bot.clock import utc_iso

    return {
        "id": grant.id,
        "tenant": grant.tenant,
        "capability": grant.capability,
        "tool": grant.tool_name,
        "run_id": grant.run_id,
        "conditions": grant.conditions,
        "granted_by": grant.granted_by,
        "as_delegate_of": grant.as_delegate_of,
        "approval_id": grant.approval_id,
        "created_at": utc_iso(grant.created_at),
        "expires_at": utc_iso(grant.expires_at),
        "max_uses": grant.max_uses,
        "uses": grant.uses,
        "revoked_at": utc_iso(grant.revoked_at) if grant.revoked_at else None,
        "revoked_by": grant.revoked_by,
    }


def _covers(grant: StandingGrant, row: Approval) -> bool:
    if grant.run_id is not None and grant.run_id != row.run_id:
        return False
    if grant.conditions is None:
        return True
    return conditions.parse(grant.conditions).holds(row.tool_args or {})


async def approve_by_grant(
    tx: Tx, directory: Directory, row: Approval, route: Route, now: datetime
) -> Transition | None:
    """Approve the new request `row` (pending, in this transaction) by a live grant that
    covers it and whose giver may decide it now; None (and nothing written) if none does."""
    if row.kind != Kind.TOOL_CALL or not route.grants:
        return None
    if row.required_approvals > route.required_approvals:
        return None  # the agent asked for more people than a grant's one
    for grant in await tx.live_standing_grants(row.tenant, row.capability, row.tool_name, now):
        if not _covers(grant, row):
            continue
        delegations = await tx.delegations_to(grant.granted_by, now)
        try:
            standing = directory.check_eligible(
                row, grant.granted_by, approving=True, delegations=delegations
            )
        except SignoffError:
            continue  # the giver may not decide this one (today's config, or self-approval)
        if grant.as_delegate_of is not None and not any(
            d.principal == grant.as_delegate_of and covers(d, row.capability) for d in delegations
        ):
            continue  # a delegate's grant ends with the delegation
        used = await tx.use_standing_grant(grant.id, now)
        if used is None:
            continue  # revoked, or its last use taken, since it was read
        data: dict[str, object] = {
            "note": None,
            "shown_hash": row.hash,
            "standing_grant": grant.id,
            "granted_by": grant.granted_by,
            "uses": used.uses,
        }
        if standing.on_behalf_of is not None:
            data["as_delegate_of"] = standing.on_behalf_of
        return await transitions.apply(
            tx,
            directory,
            row,
            {
                "state": State.APPROVED.value,
                "decided_by": grant.granted_by,
                "decided_at": now,
                "decision_note": None,
                "grant_expires_at": now + timedelta(seconds=row.grant_ttl_s or 0),
                "grant_id": grant.id,
            },
            State.APPROVED.value,
            now=now,
            actor=f"{GRANT_VIA}:{grant.granted_by}",
            data=data,
            shown_hash=row.hash,
        )
    return None


async def revoke(
    store: Store,
    directory: Directory,
    now: datetime,
    grant_id: str,
    principal: str,
    *,
    via: str = "cli",
    operator: bool = False,
) -> StandingGrant:
    """End a grant now: for the person who gave it or an operator (`operator`: the surface
    made them one for this session, as the web's OpenID provider's operator claim does). Its
    approval's audit trail records who ended it; requests it approved and not yet claimed are
    refused at their claim (bot/grant.py)."""
    who = directory.principal(principal)  # UnknownPrincipal
    async with store.write() as tx:
        grant = await tx.get_standing_grant(grant_id)
        if grant is None:
            raise NotFound(f"no standing grant with id {grant_id!r}; see `signoff grants list`")
        if principal != grant.granted_by and not (who.operator or operator):
            raise NotAnApprover(
                f"only {grant.granted_by}, who gave it, or an operator may revoke this grant"
            )
        row = await tx.lock_approval(grant.approval_id)  # its trail's head is ours
        revoked = await tx.revoke_standing_grant(grant.id, now, principal)
        if revoked is None:
            raise InvalidRequest(f"standing grant {grant.id} was revoked already")
        if row is not None:
            data = {"standing_grant": grant.id, "uses": revoked.uses}
            await audit.note(
                tx, row, "grant_revoked", actor=f"{via}:{principal}", at=now, data=data
            )
        return revoked


async def revoked_problem(tx: Tx, row: Approval, now: datetime) -> str | None:
    """Why the grant that approved `row` no longer holds (revoked before now), or None."""
    if row.grant_id is None:
        return None
    grant = await tx.get_standing_grant(row.grant_id)
    if grant is None:
        return f"the standing grant {row.grant_id} that approved it no longer exists"
    if grant.revoked_at is not None and grant.revoked_at <= now:
        return f"the standing grant {grant.id} that approved it was revoked by {grant.revoked_by}"
    return None


__all__ = [
    "GRANT_VIA",
    "GrantScope",
    "approve_by_grant",
    "check_scope",
    "conditions_for",
    "grant_record",
    "new_grant",
    "revoke",
    "revoked_problem",
]
