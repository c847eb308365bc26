"""Decisions beyond yes and no: approve as edited (a new revision of the call, bot/edits.py),
answer instead of running (or answer a question), and approve while allowing the same for
later calls (a standing grant, bot/standing.py). Each is one transaction through bot.steps,
judged as every decision is (bot/judging.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from bot import edits, standing, steps, transitions
from bot.clock import utc_iso
from bot.decisions import FULL_HASH, Actor, Decision, check_decidable, corrupt, hash_intact
from bot.errors import ApprovalChanged, GrantRefused, InvalidRequest
from bot.grant import EDITED
from bot.judging import Judging
from bot.model import State
from bot.standing import GrantScope
from bot.steps import Outcome
from store.records import Approval, StandingGrant
from store.repository import Tx

# The longest answer a person may give (it is stored, shown and sent to the agent).
MAX_ANSWER = 4000


class RichDecisions(Judging):
    """Approve as edited, answer, approve and allow the same."""

    async def approve_and_allow(
        self,
        approval_id: str,
        shown_hash: str,
        actor: Actor,
        scope: GrantScope,
        note: str | None = None,
    ) -> tuple[Decision, StandingGrant]:
        """Approve what was shown, and allow the same for later calls (a standing grant,
        bot/standing.py): the approval and the grant commit together or not at all. The
        approval must decide the request: on a quorum route that allows grants, only the vote
        that completes the quorum gives one."""
        if not FULL_HASH.fullmatch(shown_hash or ""):
            raise ApprovalChanged("a decision must name the full 64-hex hash that was shown")
        self._check_decider(actor, note)
        if actor.break_glass:
            raise GrantRefused("a break-glass approval gives no standing grant")

        async def step(tx: Tx, row: Approval, now: datetime) -> Outcome:
            route = self.directory.route_of(row)
            standing.check_scope(route, row, scope)
            who = await self._standing(tx, row, "approve", actor, shown_hash, now)
            values = standing.new_grant(row, scope, who, now)
            recorded = {"standing_grant": values["id"], "grant": _shown(values)}
            approved = await self._apply(
                tx, "approve", row, actor, note, shown_hash, now, recorded=recorded
            )
            if approved.approval.state != State.APPROVED:
                raise GrantRefused(
                    "a standing grant comes with the approval that decides the request; "
                    "this one is a vote towards its quorum (approve without it)"
                )
            grant = await tx.insert_standing_grant(values)
            return Outcome([approved], value=(approved, grant))

        decided: tuple[Decision, StandingGrant] = await steps.run(
            self, approval_id, step, admit=check_decidable, noticed_by=actor.label
        )
        return decided

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
            if not FULL_HASH.fullmatch(digest or ""):
                raise ApprovalChanged(f"an edit must name the full 64-hex {name} hash")
        self._check_decider(actor, note)

        async def step(tx: Tx, row: Approval, now: datetime) -> Outcome:
            await self._standing(tx, row, "approve", actor, shown_hash, now)
            if not hash_intact(row):
                raise corrupt(row)
            route = self.directory.route_of(row)
            revision = edits.revise(row, arguments, route, self.directory)
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
            self, approval_id, step, admit=check_decidable, noticed_by=actor.label
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
        if not FULL_HASH.fullmatch(shown_hash or ""):
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
            self, approval_id, step, admit=check_decidable, noticed_by=actor.label
        )
        return decided


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


def _shown(values: dict[str, Any]) -> dict[str, Any]:
    """A grant as its approval's audit event keeps it (what it allows, until when)."""
    kept = ("run_id", "conditions", "max_uses")
    return {k: values[k] for k in kept} | {"expires_at": utc_iso(values["expires_at"])}
