"""The judging every human decision shares, for the Operator (bot/operator.py) and the
decisions beyond yes and no (bot/rich_decisions.py): may this actor act on what they were
shown (`_standing`), what is refused before the row is touched (`_check_decider`), the
advisory `precheck` surfaces ask before they ask for more input, and `_apply`, the approve,
reject or cancel itself (with a quorum's votes).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from bot import expiry, transitions
from bot.decisions import (
    QUESTION_APPROVED,
    Action,
    Actor,
    Decision,
    check_open,
    corrupt,
    hash_intact,
)
from bot.errors import (
    AlreadyVoted,
    ApprovalChanged,
    InvalidRequest,
    NotAnApprover,
    NotFound,
)
from bot.model import Kind, State
from bot.routing import Standing
from bot.transitions import Transitioner
from store.records import Approval
from store.repository import Tx


class Judging(Transitioner):
    """The checks and the decision step every human decision is made of."""

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
            check_open(row)
            if expiry.expiry_due(row, now) is not None:
                raise expiry.expired_error(row)
            if action == "approve" and row.kind == Kind.QUESTION:
                raise InvalidRequest(QUESTION_APPROVED)
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
        *,
        recorded: dict[str, object] | None = None,
    ) -> Decision:
        """The decision itself; `recorded` adds to its audit event's data (a standing grant
        given with an approval)."""
        standing = await self._standing(tx, row, action, actor, shown_hash, now)
        if action == "approve" and row.kind == Kind.QUESTION:
            raise InvalidRequest(QUESTION_APPROVED)
        if action == "approve" and not hash_intact(row):
            raise corrupt(row)
        data: dict[str, object] = {"note": note, **(recorded or {})}
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
