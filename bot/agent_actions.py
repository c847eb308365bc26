"""The agent's side of an approval: claim the approved call (and recover, renew or release
that claim), report its outcome, supersede or withdraw the request. (What happens when a
lease lapses is bot.expiry's; what a claim re-checks is bot.grant's.)

These are the agent's own transitions (the tenant's API key is the authority), each a step in
the transaction a human decision runs in too (bot.steps): lock the row, judge it on the
injected clock, one conditional update with its audit event and outbox jobs. Every row's
`execution` (not_started, started, finished) stays truthful: a claim starts execution, a
release says it never started, only `complete` finishes it, and a lease that lapses without
a report becomes `outcome_unknown`, never a guess, until the agent reports what really
happened.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from bot import audit, grant, steps, transitions
from bot.clock import utc_iso
from bot.errors import (
    ApprovalCorrupt,
    ClaimMismatch,
    LeaseExhausted,
    NotPending,
    PolicyChanged,
)
from bot.model import DEFAULT_LEASE, MAX_LEASE, State
from bot.steps import Outcome, Step
from bot.transitions import Transition, Transitioner
from store.records import Approval
from store.repository import Tx

log = logging.getLogger("signoff.execution")

_WITHDRAWABLE = (State.PENDING, State.APPROVED)
_FINISHED = (State.EXECUTED, State.FAILED)
_NOTHING_TO_RUN = "; nothing to execute"
OUTCOME_REPORTED = "outcome reported by the agent"


def idempotency_key(root: Approval) -> str:
    """The key the agent passes to the effect's own API (Stripe's Idempotency-Key and the
    like), derived from the id and hash of the approval that first asked for the call: the
    same for every claim of it and of its interrupted_side_effect follow-ups (which may run
    a call that already took effect), different for any other call."""
    return hashlib.sha256(f"{root.id}:{root.hash}".encode()).hexdigest()


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()


def _same(stored: str | None, given: str) -> bool:
    return stored is not None and hmac.compare_digest(
        stored.encode(), given.encode("utf-8", "surrogateescape")
    )


@dataclass(frozen=True, slots=True)
class Claimed:
    approval: Approval
    claim_token: str
    idempotency_key: str


class AgentActions(Transitioner):
    """The agent's transitions: `AgentActions(store, directory, clock, metrics)`."""

    async def claim(
        self,
        tenant: str,
        approval_id: str,
        lease: timedelta = DEFAULT_LEASE,
        key: str | None = None,
    ) -> Claimed:
        """Take the approved call for execution: one caller wins and holds it for `lease`.
        The call is re-judged first (bot.grant): a row altered since it was approved is
        refused (ApprovalCorrupt, recorded in its trail), a grant today's config no longer
        allows is superseded (PolicyChanged), a grant that ran out is expired
        (ApprovalExpired). Claiming again with the same idempotency `key` while the claim is
        live returns the same claim, so a caller whose answer was lost can recover it."""
        token = secrets.token_urlsafe(24)
        key_digest = _digest(key) if key is not None else None

        async def step(tx: Tx, row: Approval, now: datetime) -> Outcome:
            if (
                row.state == State.EXECUTING
                and key_digest is not None
                and _same(row.claim_key, key_digest)
                and row.lease_until is not None
                and now < row.lease_until
            ):
                # The same claim again, as long as the call is still what was approved.
                refused = await self._rejudge(tx, row, now, "claim", policy=False)
                return refused or Outcome(value=(row, row.claim_token))
            if row.state != State.APPROVED:
                raise _not_claimable(row, now)
            refused = await self._rejudge(tx, row, now, "claim")
            if refused is not None:
                return refused
            moved = await self._move(
                tx,
                row,
                {
                    "state": State.EXECUTING.value,
                    "claim_token": token,
                    "claimed_at": now,
                    "lease_until": now + lease,
                    "claim_key": key_digest,
                },
                "claimed",
                now,
                tenant,
                {"lease_until": utc_iso(now + lease)},
            )
            return Outcome([moved], value=(moved.approval, token))

        claimed, claim_token = await self._run(tenant, approval_id, step)
        root = claimed
        if claimed.origin_id is not None:
            async with self.store.read() as tx:
                root = await tx.get_approval(claimed.origin_id) or claimed
        return Claimed(claimed, claim_token, idempotency_key(root))

    async def renew(
        self, tenant: str, approval_id: str, claim_token: str, lease: timedelta = DEFAULT_LEASE
    ) -> Approval:
        """Hold the claimed call `lease` longer from now, for a long-running call; never past
        24 h from the claim (LeaseExhausted), and never a lease that already ran out."""

        async def step(tx: Tx, row: Approval, now: datetime) -> Outcome:
            _check_claim(row, claim_token, "renewed")
            assert row.claimed_at is not None and row.lease_until is not None
            _check_live(row, now)
            ceiling = row.claimed_at + MAX_LEASE
            if row.lease_until >= ceiling:
                raise LeaseExhausted(
                    f"the claim already holds the call until {row.lease_until:%Y-%m-%d %H:%M} "
                    "UTC, the longest a claim may (24 h); complete it or let it lapse"
                )
            until = min(now + lease, ceiling)
            if until <= row.lease_until:
                return Outcome(value=row)  # already held that long
            moved = await self._move(
                tx,
                row,
                {"state": State.EXECUTING.value, "lease_until": until},
                "renewed",
                now,
                tenant,
                {"lease_until": utc_iso(until)},
            )
            return Outcome([moved], value=moved.approval)

        result: Approval = await self._run(tenant, approval_id, step)
        return result

    async def release(self, tenant: str, approval_id: str, claim_token: str) -> Approval:
        """The claimer did not start the call: hand the grant back (approved again, its
        grant clock unchanged), for this or another caller to claim. Unless a newer request
        of its step was made meanwhile: then, as if it had never been claimed when that one
        arrived (bot.intake), it is superseded by it, so the step keeps one grant."""

        async def step(tx: Tx, row: Approval, now: datetime) -> Outcome:
            _check_claim(row, claim_token, "released")
            _check_live(row, now)
            unclaimed: dict[str, object] = {
                "claim_token": None,
                "claimed_at": None,
                "lease_until": None,
                "claim_key": None,
            }
            claimed_at = utc_iso(row.claimed_at) if row.claimed_at else None
            newer = await _newer_of_step(tx, row)
            if newer is not None:
                note = f"replaced by a newer request for the same step ({newer})"
                values = unclaimed | {
                    "state": State.SUPERSEDED.value,
                    "decision_note": note,
                    "superseded_by": newer,
                }
                data = {"note": note, "from": row.state, "superseded_by": newer}
                moved = await self._move(
                    tx,
                    row,
                    values,
                    State.SUPERSEDED.value,
                    now,
                    tenant,
                    data | {"claimed_at": claimed_at, "released": True},
                )
                return Outcome([moved], value=moved.approval)
            moved = await self._move(
                tx,
                row,
                unclaimed | {"state": State.APPROVED.value},
                "released",
                now,
                tenant,
                {"claimed_at": claimed_at},
            )
            return Outcome([moved], value=moved.approval)

        result: Approval = await self._run(tenant, approval_id, step)
        return result

    async def complete(
        self,
        tenant: str,
        approval_id: str,
        claim_token: str,
        outcome: Literal["succeeded", "failed"],
        result: Any = None,
    ) -> Approval:
        """Record how the claimed call ended, whenever the report arrives: before or after
        its lease ran out, and after the sweeper recorded `outcome_unknown` (then the
        report is marked late, and the follow-up asking a human whether to run the call
        again is superseded if nobody has acted on it). Repeating the same completion (a
        retry after a lost response) returns the recorded outcome without a second
        transition."""
        recorded = {"status": outcome, "result": result}

        async def step(tx: Tx, row: Approval, now: datetime) -> Outcome:
            same_claim = _same(row.claim_token, claim_token)
            if row.state in _FINISHED and same_claim and row.outcome == recorded:
                return Outcome(value=row)
            if row.state not in (State.EXECUTING, State.OUTCOME_UNKNOWN):
                raise NotPending(
                    f"approval is {row.state}; only a claimed approval can complete",
                    state=row.state,
                )
            if not same_claim:
                raise ClaimMismatch(
                    "claim_token does not match this approval's claim; only the caller that "
                    "claimed it can complete it"
                )
            refused = await self._rejudge(tx, row, now, "complete", policy=False)
            if refused is not None:
                return refused
            data: dict[str, object] = {"outcome": outcome}
            lapsed = row.lease_until is not None and now >= row.lease_until
            if row.state == State.OUTCOME_UNKNOWN or lapsed:
                data["late"] = True  # reported after the lease the claim asked for
            target = State.EXECUTED if outcome == "succeeded" else State.FAILED
            values = {"state": target.value, "executed_at": now, "outcome": recorded}
            moved = [await self._move(tx, row, values, target.value, now, tenant, data)]
            if row.state == State.OUTCOME_UNKNOWN and row.follow_up_id is not None:
                follow_up = await tx.lock_approval(row.follow_up_id)
                if follow_up is not None and follow_up.state in _WITHDRAWABLE:
                    moved.append(
                        await self._move(
                            tx,
                            follow_up,
                            {"state": State.SUPERSEDED.value, "decision_note": OUTCOME_REPORTED},
                            State.SUPERSEDED.value,
                            now,
                            tenant,
                            {"note": OUTCOME_REPORTED, "from": follow_up.state},
                        )
                    )
            return Outcome(moved, value=moved[0].approval)

        done: Approval = await self._run(tenant, approval_id, step)
        return done

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
        async def step(tx: Tx, row: Approval, now: datetime) -> Outcome:
            if row.state not in _WITHDRAWABLE:
                raise NotPending(
                    f"approval is {row.state}; only a pending or approved request that has not "
                    f"started can be {target.value}",
                    state=row.state,
                    decided_by=row.decided_by,
                    decided_at=row.decided_at,
                )
            moved = await self._move(
                tx,
                row,
                {"state": target.value, "decision_note": reason},
                target.value,
                now,
                tenant,
                {"note": reason, "from": row.state},
            )
            return Outcome([moved], value=moved.approval)

        result: Approval = await self._run(tenant, approval_id, step)
        return result

    async def _rejudge(
        self, tx: Tx, row: Approval, now: datetime, action: str, *, policy: bool = True
    ) -> Outcome | None:
        """Judge the grant again before it is acted on (bot.grant); the refusal if it no
        longer holds, with what must be recorded of it."""
        events = await tx.events_for(row.id)
        problem = grant.integrity_problem(row, events)
        if problem is not None:
            # Nothing moves, but the trail says the attempt met an altered row.
            await audit.note(
                tx,
                row,
                "integrity_failed",
                actor=f"agent:{row.tenant}",
                at=now,
                data={"action": action, "problem": problem},
            )
            log.error(
                "approval %s: %s; %s refused",
                row.id,
                problem,
                action,
                extra={"approval_id": row.id, "tenant": row.tenant},
            )
            return Outcome(error=ApprovalCorrupt(f"approval {row.id}: {problem}"))
        if not policy:
            return None
        problem = await grant.policy_problem(tx, self.directory, row, events, now)
        if problem is None:
            return None
        note = f"the policy changed since it was approved: {problem}"
        superseded = await transitions.apply(
            tx,
            self.directory,
            row,
            {"state": State.SUPERSEDED.value, "decision_note": note},
            State.SUPERSEDED.value,
            now=now,
            actor="signoff:policy",
            data={"note": note, "from": row.state, "on_attempt_by": f"agent:{row.tenant}"},
        )
        error = PolicyChanged(f"{note}; nothing to execute", state=State.SUPERSEDED.value)
        return Outcome([superseded], error=error)

    async def _run(self, tenant: str, approval_id: str, step: Step) -> Any:
        """Take `step` on the tenant's own row (bot.steps); an expired row has nothing to
        run."""
        return await steps.run(self, approval_id, step, tenant=tenant, consequence=_NOTHING_TO_RUN)

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


async def _newer_of_step(tx: Tx, row: Approval) -> str | None:
    """The request of `row`'s step made next after it, if any. A newer request supersedes
    the older ones that have not started; a claimed one was passed over because it had, so
    handing it back must meet that request. Under the step's lock, the one a create takes
    (bot.intake): a create that read the step while this claim still stood has committed
    (and is seen here), or comes after this transaction and sees the row approved."""
    if row.step_key is None:
        return None  # a request without a step replaces nothing and is replaced by nothing
    await tx.lock_step(row.tenant, row.run_id, row.step_key)
    ids = await tx.step_requests(row.tenant, row.run_id, row.step_key)
    later = ids[ids.index(row.id) + 1 :] if row.id in ids else []
    return later[0] if later else None


def _not_claimable(row: Approval, now: datetime) -> NotPending:
    why = ""
    if row.state == State.EXECUTING:
        lapsed = row.lease_until is not None and now >= row.lease_until
        why = (
            f" (its claim's lease ran out at {row.lease_until:%Y-%m-%d %H:%M:%S} UTC; the "
            "claimer reports what happened with complete)"
            if lapsed
            else " (another caller holds it)"
        )
    return NotPending(
        f"approval is {row.state}; only an approved request can be claimed{why}",
        state=row.state,
        decided_by=row.decided_by,
        decided_at=row.decided_at,
    )


def _check_claim(row: Approval, claim_token: str, what: str) -> None:
    if row.state != State.EXECUTING:
        raise NotPending(
            f"approval is {row.state}; only a claimed (executing) approval can be {what}",
            state=row.state,
        )
    if not _same(row.claim_token, claim_token):
        raise ClaimMismatch(
            f"claim_token does not match this approval's claim; only the caller that claimed "
            f"it can have it {what}"
        )


def _check_live(row: Approval, now: datetime) -> None:
    """Renew and release act on a live claim: once its lease ran out, the call may have
    run, and only `complete` can say what happened."""
    if row.lease_until is not None and now >= row.lease_until:
        raise LeaseExhausted(
            f"the lease ran out at {row.lease_until:%Y-%m-%d %H:%M:%S} UTC; report what "
            "happened with complete"
        )
