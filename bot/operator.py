"""The Operator: every human decision goes through here, from every surface.

A decision is one short transaction, the one every action on a row runs in (bot.steps): lock
the row, judge it on the Operator's clock (state, expiry, shown hash, eligibility,
integrity), the conditional UPDATE, the audit event, and the outbox jobs the transition
causes. The row count of the conditional update, not
anything in memory, says who won; losers get an error naming the state the winner left.

Approve, reject, cancel and hand-off are here; the checks they share are bot/judging.py's,
and the decisions beyond yes and no (approve as edited, answer, approve and allow the same)
bot/rich_decisions.py's. What a decision is and says is bot/decisions.py's (re-exported).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from bot import audit, effects, escalation, steps, transitions
from bot.decisions import (
    DECISION_EVENTS,
    FULL_HASH,
    Action,
    Actor,
    Decision,
    check_decidable,
    decision_text,
)
from bot.errors import (
    ApprovalChanged,
    InvalidRequest,
    NotAnApprover,
    SelfApproval,
    SignoffError,
)
from bot.model import State
from bot.rich_decisions import MAX_ANSWER, RichDecisions
from bot.routing import Standing, keeping_authority, person_key
from bot.steps import Outcome
from store.records import Approval
from store.repository import Tx

# Refused attempts of one actor on one request recorded as audit events; the rest are counted.
RECORDED_REFUSALS = 3


class Operator(RichDecisions):
    """Every human decision: `Operator(store, directory, clock, metrics)`."""

    async def approve_shown(
        self, approval_id: str, shown_hash: str, actor: Actor, note: str | None = None
    ) -> Decision:
        """Approve exactly what was shown. With N-of-M, records a vote and approves on the
        N-th distinct approval."""
        return await self._decide("approve", approval_id, actor, note, shown_hash)

    async def reject_shown(
        self, approval_id: str, shown_hash: str, actor: Actor, note: str | None = None
    ) -> Decision:
        """Reject what was shown; one rejection rejects, whatever the quorum."""
        return await self._decide("reject", approval_id, actor, note, shown_hash)

    async def cancel(self, approval_id: str, actor: Actor, note: str | None = None) -> Decision:
        """Withdraw a pending request; for those entitled to decide it. (The agent withdraws
        its own request through the API, not through a human's authority.)"""
        return await self._decide("cancel", approval_id, actor, note, None)

    async def record_refusal(
        self, approval_id: str, actor_label: str, action: str, error: SignoffError
    ) -> None:
        """Record a refused attempt: who tried what, and why it was refused. Chat surfaces and
        the web call this for every refused click, reply or POST (the CLI's refusals are the
        operator's own terminal and are not recorded).

        Every refusal is counted (`refusal_counts`); the first RECORDED_REFUSALS of each
        actor on each request are also `refused` events in its audit trail, the last of them
        saying that more are only counted. So a person repeating a refused POST cannot grow
        the trail (and what `audit verify` reads) at will."""
        async with self.store.write() as tx:
            row = await tx.lock_approval(approval_id)  # the chain head is ours until commit
            if row is None:
                return
            now = self.clock.now()
            attempt = await tx.count_refusal(
                row.id, actor_label, action=action, code=error.code, at=now
            )
            if attempt > RECORDED_REFUSALS:
                return
            data: dict[str, Any] = {"action": action, "code": error.code, "reason": error.message}
            if attempt == RECORDED_REFUSALS:
                data["further_refusals"] = "counted, not recorded as events"
            await audit.note(tx, row, "refused", actor=actor_label, at=now, data=data)

    async def delegate(
        self,
        approval_id: str,
        actor: Actor,
        to: str,
        note: str | None = None,
        *,
        shown_hash: str | None = None,
    ) -> Decision:
        """Hand one pending request to another principal: they become its assignee and get
        its card; the original approvers keep their authority. For those entitled to decide
        it (or break-glass from the CLI). With `shown_hash` (a card or page offered the
        hand-off), a request changed since it was shown is handed to nobody."""
        self.directory.principal(to)
        return await self._decide("delegate", approval_id, actor, note, shown_hash, to=to)

    async def decide(
        self,
        action: Action,
        approval_id: str,
        shown_hash: str,
        actor: Actor,
        *,
        note: str | None = None,
        to: str | None = None,
    ) -> Decision:
        """What a button or form on a card asks for, judged against the hash the card showed:
        approve, reject, or hand over to `to`. Every surface decides through this."""
        if action == "approve":
            return await self.approve_shown(approval_id, shown_hash, actor, note)
        if action == "reject":
            return await self.reject_shown(approval_id, shown_hash, actor, note)
        if action == "delegate":
            if not to:
                raise InvalidRequest("choose whom to hand the request to")
            return await self.delegate(approval_id, actor, to, note, shown_hash=shown_hash)
        raise InvalidRequest(f"a card cannot {action} a request")

    async def _decide(
        self,
        action: Action,
        approval_id: str,
        actor: Actor,
        note: str | None,
        shown_hash: str | None,
        *,
        to: str | None = None,
    ) -> Decision:
        self._check_decider(actor, note)
        if action in ("approve", "reject") and not FULL_HASH.fullmatch(shown_hash or ""):
            raise ApprovalChanged("a decision must name the full 64-hex hash that was shown")

        async def step(tx: Tx, row: Approval, now: datetime) -> Outcome:
            if action == "delegate":
                assert to is not None
                decision = await self._hand_off(tx, row, actor, to, note, shown_hash, now)
            else:
                decision = await self._apply(tx, action, row, actor, note, shown_hash, now)
            return Outcome([decision], value=decision)

        decided: Decision = await steps.run(
            self, approval_id, step, admit=check_decidable, noticed_by=actor.label
        )
        return decided

    async def _hand_off(
        self,
        tx: Tx,
        row: Approval,
        actor: Actor,
        to: str,
        note: str | None,
        shown_hash: str | None,
        now: datetime,
    ) -> Decision:
        standing = await self._standing(tx, row, "delegate", actor, shown_hash, now)
        if not actor.break_glass:
            _check_hand_off(row, standing, to)
        if to == row.assignee:
            raise InvalidRequest(f"the request is already assigned to {to}")
        by = self.directory.name_of(actor.principal)
        data: dict[str, object] = {"from": row.assignee, "to": to, "note": note}
        if actor.break_glass:
            data["break_glass"] = True
        values: dict[str, object] = {
            "state": State.PENDING.value,
            "assignee": to,
            "approvers": keeping_authority(row),
            "assigned_note": f"handed over by {by}",
        }
        if row.escalate_at is not None:
            # The new assignee gets the full wait of the current step before it escalates.
            values["escalate_at"] = escalation.restarted(self.directory, row, now)
        decision = await transitions.apply(
            tx,
            self.directory,
            row,
            values,
            "delegated",
            now=now,
            actor=actor.label,
            data=data,
        )
        cards = effects.PersonalCards(decision.approval, to)
        await effects.cause(tx, cards, now=now, directory=self.directory)
        return decision


def _check_hand_off(row: Approval, standing: Standing, to: str) -> None:
    """A hand-off passes authority on, so it is for those entitled in their own right: a
    delegate handing a request on (to themselves, or further) would outlive their window,
    and a requester could pick who decides their own request."""
    if standing.on_behalf_of is not None:
        raise NotAnApprover(
            f"{standing.principal} decides here only as the delegate of "
            f"{standing.on_behalf_of} and may not hand the request on"
        )
    requester = person_key(row.requested_by)
    if requester and not row.allow_self_approval:
        if person_key(standing.principal) == requester:
            raise SelfApproval(
                f"{standing.principal} requested this and may not choose who decides it"
            )
        if person_key(to) == requester:
            raise SelfApproval(f"{to} requested this and may not be handed it to decide")


__all__ = [
    "DECISION_EVENTS",
    "MAX_ANSWER",
    "Action",
    "Actor",
    "Decision",
    "Operator",
    "decision_text",
]
