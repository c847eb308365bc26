"""The Operator: every human decision goes through here, from every surface.

A decision is one short transaction, the one every action on a row runs in (bot.steps): lock
the row, judge it on the Operator's clock (state, expiry, shown hash, eligibility,
integrity), the conditional UPDATE, the audit event, and the outbox jobs the transition
causes. The row count of the conditional update, not
anything in memory, says who won; losers get an error naming the state the winner left.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from bot import audit, edits, escalation, expiry, steps, transitions
from bot.audit import row_hash
from bot.errors import (
    AlreadyVoted,
    ApprovalChanged,
    ApprovalCorrupt,
    InvalidRequest,
    NotAnApprover,
    NotFound,
    NotPending,
    SelfApproval,
    SignoffError,
)
from bot.grant import EDITED
from bot.model import DECIDABLE, Kind, State
from bot.outbox import jobs
from bot.routing import Directory, Standing, keeping_authority
from bot.steps import Outcome
from bot.transitions import Transition, Transitioner
from store.records import Approval, Event
from store.repository import Tx

_FULL_HASH = re.compile(r"[0-9a-f]{64}")

Action = Literal["approve", "reject", "cancel", "delegate"]


@dataclass(frozen=True, slots=True)
class Actor:
    """A verified identity: the surface established who this is before calling the Operator.

    `via` names the surface ("cli", "slack", "telegram", "web"). `break_glass` (CLI only)
    decides without the eligibility check and is recorded as such.
    """

    principal: str
    via: str
    break_glass: bool = False

    @property
    def label(self) -> str:
        return f"{self.via}:{self.principal}"


# A human decision is a transition like any other.
Decision = Transition

# The events a decision records; `decision_text` words each of them.
DECISION_EVENTS = frozenset(
    {"approved", "voted", "rejected", "delegated", "cancelled", State.ANSWERED.value}
)


def decision_text(approval: Approval, event: Event, directory: Directory) -> str:
    """What a decision did, in the one sentence every surface shows the person who took it:
    `approval` and `event` are the Decision's (or the row and the decision's stored event,
    for a page shown after it). Raises ValueError for an event no decision records."""
    if event.type == "voted":
        votes = len(event.data.get("votes") or [])
        needed = approval.required_approvals
        return f"Your approval is recorded: {votes} of {needed}; the request waits for the rest."
    if event.type == "delegated":
        return f"Handed to {directory.name_of(str(event.data['to']))}."
    if event.type == "approved" and approval.original_hash is not None:
        return "Approved as edited."
    if event.type in DECISION_EVENTS:
        return f"{event.type.capitalize()}."  # Approved. Rejected. Cancelled. Answered.
    raise ValueError(f"a {event.type!r} event is not a decision")


# Refused attempts of one actor on one request recorded as audit events; the rest are counted.
RECORDED_REFUSALS = 3
_QUESTION_APPROVED = "a question is answered, not approved: choose or write an answer"
# The longest answer a person may give (it is stored, shown and sent to the agent).
MAX_ANSWER = 4000


class Operator(Transitioner):
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

    async def approve_edited(
        self,
        approval_id: str,
        shown_hash: str,
        arguments: dict[str, Any],
        edited_hash: str,
        actor: Actor,
        note: str | None = None,
    ) -> Decision:
        """Approve the call shown (`shown_hash`) with these arguments instead: a new revision
        of it, whose hash the approver was shown with the difference (`edited_hash`). The
        revision and the approval commit together (events `edited`, then `approved`, or
        `voted` on a quorum, where the edit starts the count again)."""
        for name, digest in (("shown", shown_hash), ("edited", edited_hash)):
            if not _FULL_HASH.fullmatch(digest or ""):
                raise ApprovalChanged(f"an edit must name the full 64-hex {name} hash")
        self._check_decider(actor, note)

        async def step(tx: Tx, row: Approval, now: datetime) -> Outcome:
            await self._standing(tx, row, "approve", actor, shown_hash, now)
            if not _hash_intact(row):
                raise _corrupt(row)
            route = self.directory.route_for(row.tenant, row.capability)
            revision = edits.revise(row, arguments, route)
            if revision.hash != edited_hash:
                raise ApprovalChanged(
                    f"the edited call hashes to sha256:{revision.hash[:12]}, not the "
                    f"sha256:{edited_hash[:12]} you confirmed; review the edit again"
                )
            twin = await tx.approval_by_key(row.tenant, row.run_id, revision.hash)
            if twin is not None and twin.id != row.id:
                # One request per call in a run: the edit would make this one a copy of it.
                raise InvalidRequest(
                    f"the edited call is exactly request {twin.id} of the same run "
                    f"({twin.state}); decide that one instead"
                )
            if row.required_approvals > 1:
                await tx.clear_votes(row.id)  # every vote is on the same revision
            edited = await transitions.apply(
                tx,
                self.directory,
                row,
                {
                    "state": State.PENDING.value,
                    "tool_args": revision.arguments,
                    "hash": revision.hash,
                    # The call as the agent asked for it, from the first edit on.
                    "original_args": row.original_args if row.original_hash else row.tool_args,
                    "original_hash": row.original_hash or row.hash,
                },
                EDITED,
                now=now,
                actor=actor.label,
                data={
                    "from_hash": row.hash,
                    "hash": revision.hash,
                    "arguments": revision.arguments,
                    "changes": [change.record() for change in revision.changes],
                    "keys": revision.keys,
                    "note": note,
                },
                shown_hash=shown_hash,
            )
            approved = await self._apply(
                tx, "approve", edited.approval, actor, note, revision.hash, now
            )
            return Outcome([edited, approved], value=approved)

        decided: Decision = await steps.run(
            self, approval_id, step, admit=_check_decidable, noticed_by=actor.label
        )
        return decided

    async def answer(
        self,
        approval_id: str,
        shown_hash: str,
        actor: Actor,
        *,
        text: str | None = None,
        option: str | None = None,
    ) -> Decision:
        """Answer instead of deciding: a reply in words to a tool call (it never runs) or to a
        question, or one of a question's options. The request ends `answered`; one answer
        ends it, whatever its quorum."""
        if not _FULL_HASH.fullmatch(shown_hash or ""):
            raise ApprovalChanged("an answer must name the full 64-hex hash that was shown")
        if (text is None) == (option is None):
            raise InvalidRequest("answer with either a text or one of the question's options")
        if text is not None:
            text = text.strip()
            if not text:
                raise InvalidRequest("the answer is empty: write what the agent should read")
            if len(text) > MAX_ANSWER:
                raise InvalidRequest(f"the answer is longer than {MAX_ANSWER} characters")
        self._check_decider(actor, text)

        async def step(tx: Tx, row: Approval, now: datetime) -> Outcome:
            standing = await self._standing(tx, row, "answer", actor, shown_hash, now)
            given = _answer_for(row, text, option)
            data: dict[str, object] = {"answer": given, "shown_hash": shown_hash}
            if standing.on_behalf_of is not None:
                data["as_delegate_of"] = standing.on_behalf_of
            if actor.break_glass:
                data["break_glass"] = True
            answered = await transitions.apply(
                tx,
                self.directory,
                row,
                {
                    "state": State.ANSWERED.value,
                    "answer": given,
                    "decided_by": actor.principal,
                    "decided_at": now,
                    "decision_note": text,
                },
                State.ANSWERED.value,
                now=now,
                actor=actor.label,
                data=data,
                shown_hash=shown_hash,
            )
            return Outcome([answered], value=answered)

        decided: Decision = await steps.run(
            self, approval_id, step, admit=_check_decidable, noticed_by=actor.label
        )
        return decided

    async def precheck(
        self, approval_id: str, shown_hash: str, actor: Actor, action: Action
    ) -> None:
        """Raise now what the decision would raise, without deciding: for a surface that must
        ask for more input first (Slack's reject dialog) and should refuse before asking.
        Advisory only: the decision itself judges again inside its transaction."""
        self.directory.principal(actor.principal)
        now = self.clock.now()
        async with self.store.read() as tx:
            row = await tx.get_approval(approval_id)
            if row is None:
                raise NotFound(f"no approval with id {approval_id!r}")
            _check_open(row)
            if expiry.expiry_due(row, now) is not None:
                raise expiry.expired_error(row)
            if action == "approve" and row.kind == Kind.QUESTION:
                raise InvalidRequest(_QUESTION_APPROVED)
            await self._standing(tx, row, action, actor, shown_hash, now)

    async def _standing(
        self,
        tx: Tx,
        row: Approval,
        action: str,
        actor: Actor,
        shown_hash: str | None,
        now: datetime,
    ) -> Standing:
        """Whether `actor` may do `action` on what they were shown, judged at `now` with the
        delegations active then (read in `tx`); in whose name they act."""
        if shown_hash is not None and shown_hash != row.hash:
            raise ApprovalChanged(
                f"the request changed since it was shown: shown sha256:{shown_hash[:12]}, "
                f"now sha256:{row.hash[:12]}; review it again"
            )
        if actor.break_glass:
            return Standing(actor.principal)
        return self.directory.check_eligible(
            row,
            actor.principal,
            approving=action == "approve",
            delegations=await tx.delegations_to(actor.principal, now),
        )

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
        if action in ("approve", "reject") and not _FULL_HASH.fullmatch(shown_hash or ""):
            raise ApprovalChanged("a decision must name the full 64-hex hash that was shown")

        async def step(tx: Tx, row: Approval, now: datetime) -> Outcome:
            if action == "delegate":
                assert to is not None
                decision = await self._hand_off(tx, row, actor, to, note, shown_hash, now)
            else:
                decision = await self._apply(tx, action, row, actor, note, shown_hash, now)
            return Outcome([decision], value=decision)

        decided: Decision = await steps.run(
            self, approval_id, step, admit=_check_decidable, noticed_by=actor.label
        )
        return decided

    def _check_decider(self, actor: Actor, note: str | None) -> None:
        """What is refused before the row is touched: an unknown principal, a note that
        cannot be stored, break-glass outside the CLI."""
        self.directory.principal(actor.principal)  # UnknownPrincipal
        if note is not None and "\x00" in note:
            # PostgreSQL text cannot hold it and SQLite can: refuse it on both, in words.
            raise InvalidRequest(
                "the text contains a NUL character (U+0000), which cannot be stored; remove it"
            )
        if actor.break_glass and actor.via != "cli":
            raise NotAnApprover("break-glass decisions are only for the CLI operator")

    async def _apply(
        self,
        tx: Tx,
        action: Action,
        row: Approval,
        actor: Actor,
        note: str | None,
        shown_hash: str | None,
        now: datetime,
    ) -> Decision:
        standing = await self._standing(tx, row, action, actor, shown_hash, now)
        if action == "approve" and row.kind == Kind.QUESTION:
            raise InvalidRequest(_QUESTION_APPROVED)
        if action == "approve" and not _hash_intact(row):
            raise _corrupt(row)
        data: dict[str, object] = {"note": note}
        if shown_hash is not None:
            data["shown_hash"] = shown_hash
        if actor.break_glass:
            data["break_glass"] = True
        if standing.on_behalf_of is not None:
            data["as_delegate_of"] = standing.on_behalf_of

        target = {"approve": State.APPROVED, "reject": State.REJECTED, "cancel": State.CANCELLED}[
            action
        ]
        if action != "cancel" and row.required_approvals > 1:
            # One vote per person: a delegate and the one they stand in for count as one.
            # (The locked row came with its votes, read under the same lock.)
            votes = row.votes
            for vote in votes:
                if standing.counted_as in (vote.principal, vote.as_delegate_of or vote.principal):
                    who = vote.principal + (
                        f" (for {vote.as_delegate_of})" if vote.as_delegate_of else ""
                    )
                    raise AlreadyVoted(
                        f"{standing.counted_as} has already voted on this request (as {who})"
                    )
            if not await tx.insert_vote(
                {
                    "approval_id": row.id,
                    "principal": actor.principal,
                    "decision": action,
                    "as_delegate_of": standing.on_behalf_of,
                    "note": note,
                    "at": now,
                    "via": actor.via,
                }
            ):
                raise AlreadyVoted(f"{actor.principal} has already voted on this request")
            if action == "approve":
                voters = [v.principal for v in votes if v.decision == "approve"]
                voters.append(actor.principal)
                data["votes"] = voters
                if len(voters) < row.required_approvals:
                    target = State.PENDING  # a vote towards the quorum, not yet the decision

        values: dict[str, object] = {"state": target.value}
        if target != State.PENDING:
            values |= {"decided_by": actor.principal, "decided_at": now, "decision_note": note}
        if target == State.APPROVED:
            values["grant_expires_at"] = now + timedelta(seconds=row.grant_ttl_s or 0)
        event_type = "voted" if target == State.PENDING else target.value
        return await transitions.apply(
            tx,
            self.directory,
            row,
            values,
            event_type,
            now=now,
            actor=actor.label,
            data=data,
            shown_hash=shown_hash,
        )

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
        await jobs.enqueue_personal_cards(tx, self.directory, decision.approval, to, now)
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
    requester = (row.requested_by or "").casefold()
    if requester and not row.allow_self_approval:
        if standing.principal.casefold() == requester:
            raise SelfApproval(
                f"{standing.principal} requested this and may not choose who decides it"
            )
        if to.casefold() == requester:
            raise SelfApproval(f"{to} requested this and may not be handed it to decide")


def _check_open(row: Approval) -> None:
    """Only a pending request can be decided; say what it is instead."""
    if row.state == State.EXPIRED:
        raise expiry.expired_error(row)
    _check_decidable(row)


def _check_decidable(row: Approval) -> None:
    """Only a pending request can be decided (an expired one is refused as expired first)."""
    if row.state not in DECIDABLE:
        raise NotPending(state=row.state, decided_by=row.decided_by, decided_at=row.decided_at)


def _corrupt(row: Approval) -> ApprovalCorrupt:
    return ApprovalCorrupt(
        f"approval {row.id}: stored fields no longer hash to {row.hash[:12]}; "
        "it was altered outside signoff and cannot be approved"
    )


def _answer_for(row: Approval, text: str | None, option: str | None) -> dict[str, str]:
    """The answer as stored and sent: {"text": ...} or {"option": ...}, checked against what
    the request offers."""
    options = list((row.question or {}).get("options") or [])
    if option is not None:
        if option not in options:
            offered = ", ".join(repr(o) for o in options) or "none (answer in words)"
            raise InvalidRequest(f"{option!r} is not one of this request's options: {offered}")
        return {"option": option}
    if options:
        raise InvalidRequest(
            "this question is answered by choosing one of its options: "
            + ", ".join(repr(o) for o in options)
        )
    assert text is not None
    return {"text": text}


def _hash_intact(row: Approval) -> bool:
    """Whether the stored call still hashes to the row's hash (audit.content_hash: the same
    comparison claim, complete and `audit verify` make)."""
    return row_hash(row) == row.hash


__all__ = ["DECISION_EVENTS", "Actor", "Decision", "Operator", "decision_text"]
