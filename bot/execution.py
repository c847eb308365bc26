"""The agent's side of an approval: claim the approved call, report its outcome, supersede
or withdraw the request, and what happens when an execution's lease lapses.

These are the agent's own transitions (the tenant's API key is the authority), built like a
human decision: lock the row, judge it on the injected clock, one conditional update with its
audit event and outbox jobs. Every row's `execution` (not_started, started, finished) stays
truthful: a claim starts execution, only `complete` finishes it, and a lease that lapses
without a report becomes `outcome_unknown`, never a guess.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from bot import effects, transitions
from bot.canonical import approval_hash
from bot.clock import utc_iso
from bot.errors import ApprovalExpired, ClaimMismatch, NoRoute, NotFound, NotPending
from bot.intake import Draft, new_approval
from bot.model import Kind, State
from bot.routing import Directory, Route
from bot.transitions import Transition, Transitioner
from store.records import Approval
from store.repository import Tx

DEFAULT_LEASE = timedelta(minutes=10)
# The longest a claim may hold an approved call, whether asked for by config or by the agent.
MAX_LEASE = timedelta(hours=24)
_WITHDRAWABLE = (State.PENDING, State.APPROVED)
_FINISHED = (State.EXECUTED, State.FAILED)
_NOTHING_TO_RUN = "; nothing to execute"


def idempotency_key(root: Approval) -> str:
    """The key the agent passes to the effect's own API (Stripe's Idempotency-Key and the
    like), derived from the id and hash of the approval that first asked for the call: the
    same for every claim of it and of its interrupted_side_effect follow-ups (which may run
    a call that already took effect), different for any other call."""
    return hashlib.sha256(f"{root.id}:{root.hash}".encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Claimed:
    approval: Approval
    claim_token: str
    idempotency_key: str


class AgentActions(Transitioner):
    """The agent's transitions: `AgentActions(store, directory, clock, metrics)`."""

    async def claim(
        self, tenant: str, approval_id: str, lease: timedelta = DEFAULT_LEASE
    ) -> Claimed:
        """Take the approved call for execution: one caller wins and holds it for `lease`.
        A grant that ran out unclaimed is expired here and refused (ApprovalExpired)."""
        token = secrets.token_urlsafe(24)

        async def step(tx: Tx, row: Approval, now: datetime) -> Transition:
            if row.state != State.APPROVED:
                raise _not_claimable(row)
            return await self._move(
                tx,
                row,
                {
                    "state": State.EXECUTING.value,
                    "claim_token": token,
                    "claimed_at": now,
                    "lease_until": now + lease,
                },
                "claimed",
                now,
                tenant,
                {"lease_until": utc_iso(now + lease)},
            )

        result = await self._run(tenant, approval_id, step)
        claimed = result.approval
        root = claimed
        if claimed.origin_id is not None:
            async with self.store.read() as tx:
                root = await tx.get_approval(claimed.origin_id) or claimed
        return Claimed(claimed, token, idempotency_key(root))

    async def complete(
        self,
        tenant: str,
        approval_id: str,
        claim_token: str,
        outcome: Literal["succeeded", "failed"],
        result: Any = None,
    ) -> Approval:
        """Record how the claimed call ended. Repeating the same completion (a retry after a
        lost response) returns the recorded outcome without a second transition."""
        recorded = {"status": outcome, "result": result}

        async def step(tx: Tx, row: Approval, now: datetime) -> Transition | Approval:
            same_claim = row.claim_token is not None and hmac.compare_digest(
                row.claim_token.encode(), claim_token.encode("utf-8", "surrogateescape")
            )
            if row.state in _FINISHED and same_claim and row.outcome == recorded:
                return row
            if row.state != State.EXECUTING:
                raise _not_completable(row)
            if not same_claim:
                raise ClaimMismatch(
                    "claim_token does not match this approval's claim; only the caller that "
                    "claimed it can complete it"
                )
            target = State.EXECUTED if outcome == "succeeded" else State.FAILED
            return await self._move(
                tx,
                row,
                {"state": target.value, "executed_at": now, "outcome": recorded},
                target.value,
                now,
                tenant,
                {"outcome": outcome},
            )

        done = await self._run(tenant, approval_id, step)
        return done.approval if isinstance(done, Transition) else done

    async def supersede(self, tenant: str, approval_id: str, reason: str) -> Approval:
        """The preconditions no longer hold: close the request (pending or approved, never
        started) with the agent's reason, which the card and the webhook show."""
        return await self._withdraw(tenant, approval_id, State.SUPERSEDED, reason)

    async def cancel(self, tenant: str, approval_id: str, reason: str | None = None) -> Approval:
        """The agent withdraws its request (pending, or approved and not yet claimed)."""
        return await self._withdraw(tenant, approval_id, State.CANCELLED, reason)

    async def _withdraw(
        self, tenant: str, approval_id: str, target: State, reason: str | None
    ) -> Approval:
        async def step(tx: Tx, row: Approval, now: datetime) -> Transition:
            if row.state not in _WITHDRAWABLE:
                raise NotPending(
                    f"approval is {row.state}; only a pending or approved request that has not "
                    f"started can be {target.value}",
                    state=row.state,
                    decided_by=row.decided_by,
                    decided_at=row.decided_at,
                )
            return await self._move(
                tx,
                row,
                {"state": target.value, "decision_note": reason},
                target.value,
                now,
                tenant,
                {"note": reason, "from": row.state},
            )

        result = await self._run(tenant, approval_id, step)
        assert isinstance(result, Transition)
        return result.approval

    async def _run(self, tenant: str, approval_id: str, step: Any) -> Any:
        """Lock the tenant's row, expire it first if its clock ran out, then take `step`."""
        expired: Transition | None = None
        async with self.store.write() as tx:
            row = await tx.lock_approval(approval_id)
            if row is None or row.tenant != tenant:
                # Another tenant's id is indistinguishable from a missing one.
                raise NotFound(f"no approval with id {approval_id!r}")
            now = self.clock.now()
            if row.state == State.EXPIRED:
                raise expired_error(row, _NOTHING_TO_RUN)
            lapsed = expiry_due(row, now)
            if lapsed is not None:
                expired = await expire(tx, self.directory, row, now, lapsed)
            else:
                result = await step(tx, row, now)
        if expired is not None:
            self.committed(expired)
            raise expired_error(expired.approval, _NOTHING_TO_RUN)
        if isinstance(result, Transition):
            self.committed(result)
        return result

    async def _move(
        self,
        tx: Tx,
        row: Approval,
        values: dict[str, object],
        event_type: str,
        now: datetime,
        tenant: str,
        data: dict[str, object],
    ) -> Transition:
        return await transitions.apply(
            tx, self.directory, row, values, event_type, now=now, actor=f"agent:{tenant}", data=data
        )


# -- clocks running out (shared with the sweeper) -------------------------------------------


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
    routed like the original, asking a human whether to run it again."""
    try:
        route: Route | None = directory.route_for(row.tenant, row.capability)
    except NoRoute:  # the config changed since: keep the original's approvers, default TTLs
        route = None
    values, requested = new_approval(_interruption(row, route), now=now, actor="system")
    result = await transitions.apply(
        tx,
        directory,
        row,
        {"state": State.OUTCOME_UNKNOWN.value},
        "lease_lapsed",
        now=now,
        actor="system",
        data={"lease_until": utc_iso(row.lease_until or now), "follow_up_id": values["id"]},
    )
    inserted = await tx.insert_approval(values)
    assert inserted is not None  # its presentation names the original: unique per original
    await tx.insert_event(requested)
    await effects.enqueue_cards(tx, directory, inserted, route.notify if route else (), now)
    return result


def _interruption(row: Approval, route: Route | None) -> Draft:
    original = row.presentation if isinstance(row.presentation, dict) else {}
    started = utc_iso(row.claimed_at) if row.claimed_at else "unknown"
    lease = utc_iso(row.lease_until) if row.lease_until else "unknown"
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
    else:
        ttls, escalation, self_approval = (timedelta(hours=72), timedelta(hours=24)), None, False
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


def _not_claimable(row: Approval) -> NotPending:
    return NotPending(
        f"approval is {row.state}; only an approved request can be claimed"
        + (" (another caller holds it)" if row.state == State.EXECUTING else ""),
        state=row.state,
        decided_by=row.decided_by,
        decided_at=row.decided_at,
    )


def _not_completable(row: Approval) -> NotPending:
    if row.state == State.OUTCOME_UNKNOWN:
        message = (
            "the execution lease lapsed before this report, so the outcome is recorded as "
            "unknown and a new approval asks whether to run the call again"
        )
    else:
        message = f"approval is {row.state}; only a claimed (executing) approval can complete"
    return NotPending(message, state=row.state)
