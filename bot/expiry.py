"""The clocks of an approval and what happens when one runs out.

A pending request has its TTL (`approval_ttl`): past it, the request expires. An approved
grant has `grant_ttl`: unclaimed past it, it expires. A claimed call has its lease: if it
lapses without a report, the call started and its outcome is unknown, so the row becomes
`outcome_unknown` and a new `interrupted_side_effect` approval asks a human whether to run it
again. (Escalation is a clock too, with its own module: bot.escalation.)

Each clock is judged on the injected clock, against a locked row: by the sweeper, which runs
each of them by name over the rows due, and by any decision or claim that finds the row
overdue first, so a request is never decided after its deadline just because the sweeper had
not come round yet.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from bot import effects, grant, transitions
from bot.canonical import approval_hash
from bot.clock import utc_iso
from bot.errors import ApprovalExpired, NoRoute
from bot.intake import Draft, new_approval
from bot.model import Kind, State
from bot.routing import Directory, Route
from bot.transitions import Transition
from store.records import Approval
from store.repository import Tx

log = logging.getLogger("signoff.expiry")


def expiry_due(row: Approval, now: datetime) -> str | None:
    """Which of the row's expiry clocks has run out: "approval_ttl" for a pending request,
    "grant_ttl" for an unclaimed grant; None if neither."""
    if row.state == State.PENDING and now >= row.expires_at:
        return "approval_ttl"
    if row.state == State.APPROVED and row.grant_expires_at and now >= row.grant_expires_at:
        return "grant_ttl"
    return None


async def expire(
    tx: Tx,
    directory: Directory,
    row: Approval,
    now: datetime,
    clock_name: str,
    *,
    noticed_by: str | None = None,
) -> Transition:
    """Expire a pending request past its TTL or an approved grant past its grant TTL, from
    the sweeper or from the attempt (`noticed_by`, an actor label) that found it overdue."""
    deadline = row.expires_at if clock_name == "approval_ttl" else row.grant_expires_at
    assert deadline is not None
    data: dict[str, object] = {
        "clock": clock_name,
        "deadline": utc_iso(deadline),
        "from": row.state,
    }
    if noticed_by is not None:
        data["on_attempt_by"] = noticed_by
    return await transitions.apply(
        tx,
        directory,
        row,
        {"state": State.EXPIRED.value},
        "expired",
        now=now,
        actor="system",
        data=data,
    )


async def lapse(tx: Tx, directory: Directory, row: Approval, now: datetime) -> Transition:
    """An execution lease ran out without a report: the call started and its outcome is
    unknown. Record that, and raise an interrupted_side_effect approval for the same call,
    routed like the original, asking a human whether to run it again: unless the stored
    call fails its integrity check, when a re-run would put the altered call before a human
    under a fresh hash; then the lapse says why and the error is logged instead."""
    values: dict[str, object] = {"state": State.OUTCOME_UNKNOWN.value}
    data: dict[str, object] = {"lease_until": utc_iso(row.lease_until or now)}
    problem = grant.integrity_problem(row, await tx.events_for(row.id))
    follow_up: dict[str, object] | None = None
    if problem is not None:
        data["integrity"] = problem
        log.error(
            "approval %s: lease lapsed, and %s; no follow-up raised",
            row.id,
            problem,
            extra={"approval_id": row.id, "tenant": row.tenant},
        )
    else:
        try:
            route: Route | None = directory.route_of(row)
        except NoRoute:  # the config changed since: keep the original's approvers
            route = None
        follow_up, requested = new_approval(_interruption(row, route), now=now, actor="system")
        values["follow_up_id"] = data["follow_up_id"] = follow_up["id"]
    result = await transitions.apply(
        tx, directory, row, values, "lease_lapsed", now=now, actor="system", data=data
    )
    if follow_up is not None:
        inserted = await tx.insert_approval(follow_up)
        assert inserted is not None  # its presentation names the original: unique per original
        await tx.insert_event(requested)
        cards = effects.PostCards(inserted, route.notify if route else ())
        await effects.cause(tx, cards, now=now, directory=directory)
    return result


def _interruption(row: Approval, route: Route | None) -> Draft:
    original = row.presentation if isinstance(row.presentation, dict) else {}
    # As every card shows a time; the record keeps the exact instants (claimed_at, lease_until).
    started = f"{row.claimed_at:%Y-%m-%d %H:%M} UTC" if row.claimed_at else "unknown"
    lease = f"{row.lease_until:%Y-%m-%d %H:%M} UTC" if row.lease_until else "unknown"
    title = str(original.get("title") or row.capability)
    fields = [f for f in original.get("fields") or [] if isinstance(f, dict)]
    if row.kind == Kind.INTERRUPTED_SIDE_EFFECT:
        # A follow-up of a follow-up: keep pointing at the first request, say it once.
        fields = fields[2:]
    else:
        title = f"Outcome unknown: {title}"
    root = row.origin_id or row.id
    presentation = {
        "title": title[:300],
        "summary": (
            f"This call was approved and started at {started}, but its outcome was never "
            f"reported: the execution lease lapsed at {lease}. It may or may not have taken "
            "effect. Approve only if running it again is safe (check the target system "
            "first); reject to leave it as it is."
        ),
        "fields": [
            {"label": "Original approval", "value": root},
            {"label": "Started", "value": started},
            *fields,
        ],
    }
    kind = Kind.INTERRUPTED_SIDE_EFFECT
    if route is not None:
        ttls = (route.approval_ttl, route.grant_ttl)
        escalation = route.escalation[0].after if route.escalation else None
        self_approval = route.allow_self_approval
        remind_before = route.remind_before
    else:
        ttls, escalation, self_approval = (timedelta(hours=72), timedelta(hours=24)), None, False
        remind_before = None
    return Draft(
        tenant=row.tenant,
        run_id=row.run_id,
        kind=kind,
        capability=row.capability,
        tool_name=row.tool_name,
        tool_args=row.tool_args,
        presentation=presentation,
        hash=approval_hash(kind, row.capability, presentation, row.tool_name, row.tool_args),
        reason=row.reason,
        requested_by=row.requested_by,
        approvers=list(row.approvers),
        required_approvals=row.required_approvals,
        allow_self_approval=self_approval,
        approval_ttl=ttls[0],
        grant_ttl=ttls[1],
        first_escalation=escalation,
        remind_before=remind_before,
        step=row.step,
        preconditions=row.preconditions,
        resume=row.resume,
        callback_url=row.callback_url,
        origin_id=root,
    )


def expired_error(row: Approval, consequence: str = "") -> ApprovalExpired:
    """The refusal for an expired request, naming the clock that ran out: the grant's if it
    was approved, else the request's own TTL."""
    deadline = row.grant_expires_at or row.expires_at
    return ApprovalExpired(
        f"this request expired at {deadline:%Y-%m-%d %H:%M} UTC{consequence}",
        state=State.EXPIRED.value,
    )


async def expire_if_due(
    tx: Tx, directory: Directory, row: Approval, now: datetime
) -> Transition | None:
    """The sweeper's expiry clock: expire `row` (locked) if its TTL or grant TTL ran out."""
    clock_name = expiry_due(row, now)
    if clock_name is None:
        return None
    return await expire(tx, directory, row, now, clock_name)


async def lapse_if_due(
    tx: Tx, directory: Directory, row: Approval, now: datetime
) -> Transition | None:
    """The sweeper's lease clock: `row` (locked) lapses if it is still executing past its
    lease."""
    if row.state != State.EXECUTING or row.lease_until is None or now < row.lease_until:
        return None
    return await lapse(tx, directory, row, now)
