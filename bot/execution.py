"""The agent's side of an approval: claim the approved call, report its outcome, supersede
or withdraw the request. (What happens when a lease lapses is bot.expiry's.)

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

from bot import expiry, transitions
from bot.clock import utc_iso
from bot.errors import ClaimMismatch, NotFound, NotPending
from bot.model import DEFAULT_LEASE, State
from bot.transitions import Transition, Transitioner
from store.records import Approval
from store.repository import Tx

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
                raise expiry.expired_error(row, _NOTHING_TO_RUN)
            lapsed = expiry.expiry_due(row, now)
            if lapsed is not None:
                expired = await expiry.expire(tx, self.directory, row, now, lapsed)
            else:
                result = await step(tx, row, now)
        if expired is not None:
            self.committed(expired)
            raise expiry.expired_error(expired.approval, _NOTHING_TO_RUN)
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
