"""One gated (`ask`) call through the gateway, from filing the approval to running it once.

The approval's `tool` is exactly the MCP call, `{"name", "arguments"}`, and its presentation
shows the upstream's current definition of the tool (definition.py), listed afresh for every
gated call: a human approves the tool as it is described now. Asked again with the same
arguments, the call finds the same approval (the run id is derived from the call itself) and
acts on its state: still pending, it says so again; approved, it claims the grant, lists the
upstream's tools once more and runs the claim's stored call only if the tool's definition is
still the one the approver saw; executed, it returns the recorded result without running
anything; rejected, expired or withdrawn, it says so with the decider's note; started
without a recorded outcome, it says so and runs nothing.

When the definition has changed, nothing runs: every earlier request of the same call that is
still pending or approved is superseded through the API with the reason in words, and a new
request shows the new definition. signoff hands back an existing request of the same run id
and hash; when that request was superseded (a definition that changed and changed back), the
call is filed again with an "Asked again after" field, so the question is open again. Only a
new open request supersedes others.

A forwarded call waits at most the gateway's `call_timeout` for the upstream; no answer by
then is an unknown outcome (it may have run), never "not run".

A pending request of an `ask = "elicit"` rule is offered to the host's user as its approval
page when the host can open one (elicit.py), and the call waits for the decision.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import aiohttp
import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError

from signoff_client.client import ApprovalRecord, Claim
from signoff_client.errors import (
    ApprovalCorrupt,
    ApprovalExpired,
    NotCanonical,
    NotPending,
    SignoffError,
)
from signoff_client.hashing import original_hash, record_hash
from signoff_client.lifecycle import asked_call
from signoff_client.mcp.definition import (
    Ambiguous,
    BadDefinition,
    ToolDefinition,
    presentation,
    presented_digest,
    run_id_for,
)
from signoff_client.mcp.elicit import Host, decided_notice, elicit
from signoff_client.mcp.policy import Decision
from signoff_client.mcp.results import (
    NO_ANSWER,
    approval_meta,
    error,
    merge_meta,
    no_answer,
    own,
    replay,
    stored,
    text_result,
    upstream_failure,
)
from signoff_client.telling import answered_message, replaced_message

if TYPE_CHECKING:
    from signoff_client.mcp.gateway import Gateway

__all__ = ["AskCall", "Attempt"]

log = logging.getLogger("signoff_client.mcp")

_OPEN = ("pending", "approved")  # the states supersede accepts
_STARTED = ("executing", "executed", "failed", "outcome_unknown")  # the call was sent
# How many times a call is filed again past superseded requests of the same presentation
# (each flip of a definition back to one shown before adds one).
_MAX_REFILES = 50


@dataclass
class Attempt:
    """What one tools/call has done so far. Set before the upstream is sent the call, so that
    whatever fails afterwards is never reported as "not run"."""

    forwarded: bool = False
    # An allowed call: the upstream's own JSON-RPC error is passed through as it came.
    passthrough: bool = False


class AskCall:
    """A gated call: `await AskCall(gateway, decision, arguments, attempt).run()`."""

    def __init__(
        self,
        gateway: Gateway,
        decision: Decision,
        arguments: dict[str, Any],
        attempt: Attempt,
        host: Host | None = None,
    ) -> None:
        self.host = host  # the MCP client calling, when its user can be offered the page
        self.gateway = gateway
        self.signoff = gateway.signoff
        self.decision = decision
        self.name = decision.tool  # the exact name the upstream listed
        self.arguments = arguments
        self.attempt = attempt

    async def run(self) -> types.CallToolResult | types.InputRequiredResult:
        try:
            run_id = run_id_for(
                self.gateway.policy.server, self.name, self.arguments, self.gateway.run_scope
            )
        except NotCanonical as exc:
            return error(
                f"Not run: the arguments cannot be approved exactly ({exc}). Use plain JSON "
                "values (integers within ±2^53)."
            )
        definition = await self._current_definition()
        if not isinstance(definition, ToolDefinition):
            return definition
        try:
            earlier = await self._earlier_requests(run_id)
            started = [r for r in earlier if r.state in _STARTED]
            if started:
                # The call already ran (or started) under a request that showed something
                # else (an older definition, an older gateway): "once" holds, whatever the
                # upstream says about the tool now. Newest first.
                return await self._settle(started[0], definition)
            record = await self._file_open(run_id, definition)
            replaced = (
                await self._supersede_stale(earlier, record, definition)
                if record.state in _OPEN
                else []  # an outcome (rejected, expired, withdrawn) is no new question
            )
            host, policy = self.host, self.gateway.policy
            elicits = self.decision.ask == "elicit" and host is not None and host.can_open_url
            if record.state == "pending" and elicits and host is not None:
                asked = await elicit(
                    host,
                    self.signoff,
                    record,
                    web_url=policy.web_url or self.signoff.base_url,
                    wait=policy.elicit_wait,
                )
                if isinstance(asked, types.InputRequiredResult):
                    return asked  # 2026-07-28: the host asks its user, then calls again
                answer = await self._settle(
                    asked.record, definition, replaced=replaced, still=asked.note
                )
                return decided_notice(answer)
            if record.state == "pending" and self.gateway.wait > 0:
                record = await self.signoff.wait(record.id, self.gateway.wait, first=0.25, most=2.0)
            return await self._settle(record, definition, replaced=replaced)
        except SignoffError as exc:
            return self._failed(f"signoff refused the approval request ({exc.code}: {exc})")
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            return self._failed(f"the signoff service is unreachable ({type(exc).__name__}: {exc})")

    def _failed(self, why: str) -> types.CallToolResult:
        if self.attempt.forwarded:  # never claim "not run" for a call the upstream was sent
            return error(
                f"The approved call was sent to the upstream, but then {why}. Its outcome is "
                "unknown: do not call it again; signoff asks a human once the claim's lease "
                "runs out."
            )
        return error(f"Not run: {why}; nothing was executed.")

    # -- the definition a human is shown ----------------------------------------------------

    async def _current_definition(self) -> ToolDefinition | types.CallToolResult:
        """The tool as the upstream lists it now (a fresh tools/list), or the refusal."""
        try:
            tool = await self.gateway.fresh_tool(self.name)
        except Ambiguous as exc:
            return error(
                f"Not run: {exc.words()}. No approval was requested; the upstream's operator "
                "must give each tool its own name."
            )
        except Exception as exc:  # the upstream's transport or protocol: nothing was sent
            return error(
                f"Not run: the gateway could not list the upstream's tools to show the "
                f"approver ({upstream_failure(exc)}); no approval was requested."
            )
        if tool is None:
            return error(
                f"Not run: the upstream server no longer lists the tool {self.name!r}; no "
                "approval was requested."
            )
        try:
            return ToolDefinition.of(tool)
        except BadDefinition as exc:
            return error(
                f"Not run: the upstream's definition of {self.name!r} cannot be shown to a "
                f"human faithfully ({exc}); no approval was requested."
            )

    async def _file_open(self, run_id: str, definition: ToolDefinition) -> ApprovalRecord:
        """Ask signoff for the call as shown with `definition`, or find that request. signoff
        dedupes on (run id, hash): when the request it hands back was superseded (the
        definition changed and has now changed back, or the policy changed since it was
        approved), the call is filed again, with an "Asked again after" field naming that
        request, so that the question is open again instead of closed for good."""
        record = await self._file(run_id, definition)
        for _ in range(_MAX_REFILES):
            if record.state != "superseded":
                break
            log.info("%s was superseded: asking again for %s", record.id, self.name)
            record = await self._file(run_id, definition, after=record.id)
        return record

    async def _file(
        self, run_id: str, definition: ToolDefinition, *, after: str | None = None
    ) -> ApprovalRecord:
        """Ask signoff for the call as shown with `definition` (or find that request)."""
        decision, policy = self.decision, self.gateway.policy
        shown = presentation(
            policy.server, decision, definition, self.arguments, asked_again_after=after
        )
        body: dict[str, Any] = {
            "run_id": run_id,
            "capability": decision.capability,
            "tool": {"name": self.name, "arguments": self.arguments},
            "presentation": shown,
        }
        if policy.requested_by:
            body["requested_by"] = policy.requested_by
        if decision.approvers:
            body["approvers"] = list(decision.approvers)
        if decision.approval_ttl:
            body["approval_ttl"] = decision.approval_ttl
        return await self.signoff.request(**body)

    async def _earlier_requests(self, run_id: str) -> list[ApprovalRecord]:
        """The requests filed for this very call (same run id: same server, scope, name and
        arguments), newest first. An interrupted_side_effect follow-up of the same run is
        not one: it asks a human whether to run the call again, a question that is theirs
        to answer, not the gateway's to close or to answer from."""
        found, _ = await self.signoff.list(run_id=run_id, limit=100)
        call = {"name": self.name, "arguments": self.arguments}
        # One approved as edited holds the revision in `tool`: it is this call's still.
        return [r for r in found if r.kind == "tool_call" and asked_call(r) == call]

    async def _supersede_stale(
        self, earlier: list[ApprovalRecord], record: ApprovalRecord, definition: ToolDefinition
    ) -> list[str]:
        """Close every other open request of this call that shows something else, so that no
        grant of a superseded definition stays claimable. Returns the ids superseded."""
        replaced: list[str] = []
        for other in earlier:
            if other.id == record.id or other.state not in _OPEN or other.hash == record.hash:
                continue
            try:
                await self.signoff.supersede(
                    other.id, self._why_replaced(other, definition, record)
                )
            except NotPending:  # decided, claimed or closed meanwhile: its state speaks for it
                continue
            log.info("superseded %s by %s (what the approver saw changed)", other.id, record.id)
            replaced.append(other.id)
        return replaced

    def _why_replaced(
        self, old: ApprovalRecord, definition: ToolDefinition, new: ApprovalRecord
    ) -> str:
        shown = presented_digest(old.presentation)
        if shown is None:
            return (
                f"Replaced by request {new.id}: this request was filed by an older signoff-mcp "
                f"that did not show the definition of the MCP tool {self.name!r}; the new "
                "request shows it."
            )
        if shown != definition.digest:
            return _definition_changed(self.name, shown, definition.digest, new.id)
        return (
            f"Replaced by request {new.id} for the same call: what the approver is shown "
            "changed (the gateway policy's title or capability, or the layout of the card)."
        )

    # -- the approval's state -------------------------------------------------------------

    async def _settle(
        self,
        record: ApprovalRecord,
        definition: ToolDefinition,
        *,
        claimed: bool = False,
        replaced: list[str] | None = None,
        still: str | None = None,
    ) -> types.CallToolResult:
        """Answer from the approval's state; an approved one is claimed and run here."""
        state = record.state
        note = record.raw.get("decision_note")
        meta = approval_meta(record)
        if state == "pending":
            said = f"{still}\n" if still else ""  # why it waits still, the host asked
            earlier = (
                f"Earlier approval(s) of this call ({', '.join(replaced)}) no longer apply: "
                "what the approver is shown changed (the upstream's definition of the tool), "
                "so they were superseded and this new request shows it as it is now.\n"
                if replaced
                else ""
            )
            return error(
                "Waiting for human approval: this call has NOT been executed.\n"
                f"{earlier}{said}"
                f"Tool: {record.tool['name']}\n"
                f"Approval: {record.id} (capability {record.capability})\n"
                f"Who decides: {record.assignee}\n"
                f"Decide by: {record.expires_at or 'no deadline'}\n"
                "Nothing has run. Once a human approves it, call this tool again with exactly "
                "the same arguments: it then runs once and returns its result. Asking again "
                "before the decision files no second request.",
                meta=meta,
            )
        if state == "approved":
            if claimed:  # approved again after a claim was refused or handed back: do not loop
                return error(
                    f"Approved (approval {record.id}) but not run by this call (another caller "
                    "held it meanwhile). Call again with the same arguments to run it.",
                    meta=meta,
                )
            return await self._execute(record, definition)
        if state in ("executed", "failed"):
            return replay(record, meta)
        if state == "answered":
            # The person's words, saying the tool did not run: a plain result, unless the
            # tool declares an outputSchema, which words cannot satisfy (MCP clients refuse
            # a non-error result without conforming structuredContent).
            if self.gateway.declares_output(self.name):
                return error(answered_message(record), meta=meta)
            return text_result(answered_message(record), meta=meta)
        if state in ("executing", "outcome_unknown"):
            return error(
                f"Approved and started (approval {record.id}), but no outcome is recorded "
                f"({'still running or interrupted' if state == 'executing' else 'interrupted'}). "
                "It will NOT be run again by asking again; a human must check what happened.",
                meta=meta,
            )
        if state == "rejected":
            who = record.decided_by or "a human"
            return error(
                f"Rejected by {who}: {note or 'no reason given'}. The call was not executed.",
                meta=meta,
            )
        if state == "expired":
            return error(
                f"Expired: nobody decided approval {record.id} in time ({record.expires_at}). "
                "The call was not executed.",
                meta=meta,
            )
        # cancelled, superseded (withdrawn, replaced, or the policy changed since approval)
        return error(
            f"Not executed: the approval was {state}"
            + (f" ({note})" if note else "")
            + ". Nothing ran.",
            meta=meta,
        )

    # -- running an approved call ---------------------------------------------------------

    async def _execute(
        self, record: ApprovalRecord, definition: ToolDefinition
    ) -> types.CallToolResult:
        try:
            claim = await self.signoff.claim(record.id, self.gateway.lease)
        except (NotPending, ApprovalExpired):
            # Another caller won the claim, the grant ran out, or the policy changed and
            # signoff superseded it: the record says which.
            fresh = await self.signoff.get(record.id)
            return await self._settle(fresh, definition, claimed=True)
        except ApprovalCorrupt:
            return error(
                f"Not run: the stored call of approval {record.id} no longer matches what was "
                "approved; signoff refused to hand it out.",
                meta=approval_meta(record),
            )
        approval, tool = claim.approval, claim.tool
        if (
            record_hash(approval) != approval.hash
            or tool != approval.tool
            or tool.get("name") != self.name
            or (claim.edited and original_hash(approval) != claim.original_hash)
        ):
            await self.signoff.release(record.id, claim.claim_token)
            return error(
                f"Not run: approval {record.id} does not hash to what was approved.",
                meta=approval_meta(approval),
            )
        # The last look before running: the upstream may have redefined the tool since it was
        # listed for this call (or since the approver saw it, hours ago).
        refusal = await self._recheck(claim, definition)
        if refusal is not None:
            return refusal
        log.info("running approved call %s (approval %s)", self.name, record.id)
        self.attempt.forwarded = True
        try:
            result = await self._call_holding(claim, tool)
        except MCPError as exc:
            if exc.code in NO_ANSWER:
                return self._unknown(approval, exc)
            # The upstream answered with a protocol error: it refused the call.
            kept = {"error": {"code": exc.code, "message": exc.message}}
            done, problem = await self._complete(claim, "failed", kept)
            text = f"The upstream refused the approved call: {exc.message} (code {exc.code})."
            if problem:
                text += f"\n{_unrecorded(approval.id, problem)}"
            return error(text, meta=approval_meta(done or approval))
        except Exception as exc:  # transport lost: it may or may not have run
            return self._unknown(approval, exc)
        outcome: Literal["succeeded", "failed"] = "failed" if result.is_error else "succeeded"
        done, problem = await self._complete(claim, outcome, stored(result))
        meta = merge_meta(result.meta, approval_meta(done or approval))
        if claim.edited:  # the model must know the call that ran is not the one it sent
            said = replaced_message(
                self.name, claim.original_arguments, tool["arguments"], approval.decided_by
            )
            notice = types.TextContent(type="text", text=said)
            result = result.model_copy(update={"content": [notice, *result.content]})
        if problem:  # it ran: say so, with its result, and that signoff does not know yet
            notice = types.TextContent(type="text", text=_unrecorded(approval.id, problem))
            return result.model_copy(update={"content": [*result.content, notice], "meta": meta})
        return result.model_copy(update={"meta": meta})

    async def _recheck(
        self, claim: Claim, definition: ToolDefinition
    ) -> types.CallToolResult | None:
        """None if the upstream still defines the tool as the approver saw it (the digest in
        the claimed approval's own presentation); otherwise nothing runs: a new request is
        filed showing the tool as it is now (if it is still listed), and the claim is handed
        back and the approval superseded at once, naming the new request. That is the
        answer."""
        approval = claim.approval
        seen = presented_digest(approval.presentation)
        try:
            tool = await self.gateway.fresh_tool(self.name)
            now = ToolDefinition.of(tool) if tool is not None else None
        except (BadDefinition, Ambiguous) as exc:
            now, unusable = None, exc.words() if isinstance(exc, Ambiguous) else str(exc)
        except Exception as exc:  # could not look: do not run what cannot be checked
            await self.signoff.release(approval.id, claim.claim_token)
            return error(
                f"Not run: the gateway could not re-check the tool's definition with the "
                f"upstream before running approval {approval.id} ({upstream_failure(exc)}). "
                "The approval stands; call again with the same arguments.",
                meta=approval_meta(approval),
            )
        else:
            unusable = "it is no longer listed"
        if now is not None and seen is not None and now.digest == seen:
            return None
        if now is None:
            reason = (
                f"The MCP server no longer offers the tool {self.name!r} as the approver saw "
                f"it ({unusable}); nothing ran."
            )
            closed = await self._release_superseded(claim, reason)
            text = f"Not run. {reason} Approval {approval.id} is superseded."
            return error(text, meta=approval_meta(closed or approval))
        try:
            fresh = await self._file_open(approval.raw["run_id"], now)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.signoff.release(approval.id, claim.claim_token)
            raise
        if seen is None:
            reason = self._why_replaced(approval, now, fresh)
        else:
            reason = _definition_changed(self.name, seen, now.digest, fresh.id)
        await self._release_superseded(claim, reason)
        log.info("approval %s superseded: %s was redefined upstream", approval.id, self.name)
        return await self._settle(fresh, now, claimed=True, replaced=[approval.id])

    async def _release_superseded(self, claim: Claim, reason: str) -> ApprovalRecord | None:
        """Hand the claim back and supersede the approval straight after, so that it is
        claimable again for as short a time as two requests take (a caller that wins it in
        between re-checks the definition before running, and finds it changed)."""
        await self.signoff.release(claim.approval.id, claim.claim_token)
        try:
            return await self.signoff.supersede(claim.approval.id, reason)
        except NotPending:  # claimed meanwhile: that caller re-checks before it runs anything
            log.info("could not supersede %s: claimed meanwhile", claim.approval.id)
            return None

    def _unknown(self, approval: ApprovalRecord, exc: Exception) -> types.CallToolResult:
        """No answer from the upstream: the call may have run. Nothing is completed, so the
        claim's lease lapses to `outcome_unknown` and signoff asks a human about a re-run."""
        log.error("approved call %s: no answer from the upstream: %r", approval.id, exc)
        return error(
            "The approved call was sent to the upstream, so it may have run, but "
            f"{no_answer(exc, self.gateway.call_timeout)}. Its outcome is unknown: it will not "
            "be run again, and signoff asks a human once the claim's lease runs out.",
            meta=approval_meta(approval),
        )

    async def _call_holding(self, claim: Claim, tool: Mapping[str, Any]) -> types.CallToolResult:
        """Forward the claimed call, renewing the claim's lease while the upstream works."""
        answer: types.CallToolResult | Exception
        async with anyio.create_task_group() as group:
            group.start_soon(self._renew, claim)
            try:
                async with self.gateway.relay.forwarding() as progress:
                    called = await self.gateway.upstream.call_tool(
                        tool["name"],
                        dict(tool["arguments"]),
                        read_timeout_seconds=self.gateway.call_timeout,
                        progress_callback=progress,
                    )
                answer = own(called)
            except Exception as exc:  # raised below, unwrapped from the task group's group
                answer = exc
            finally:
                group.cancel_scope.cancel()
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def _renew(self, claim: Claim) -> None:
        left = _seconds_until(claim.lease_until)
        interval = max(left / 3, 1.0) if left else 60.0
        while True:
            await anyio.sleep(interval)
            try:
                await self.signoff.renew(claim.approval.id, claim.claim_token)
            except Exception:  # exhausted, or signoff away: the call goes on regardless
                log.warning("could not renew the claim of %s", claim.approval.id, exc_info=True)
                return

    async def _complete(
        self, claim: Claim, outcome: Literal["succeeded", "failed"], kept: Any
    ) -> tuple[ApprovalRecord | None, str | None]:
        """Record the outcome: (the record, None), or (None, why not). Retried, since a
        repeated completion is answered the same. If signoff stays away the row ends
        `outcome_unknown` and a human is asked; the caller still gets the result."""
        problem = "no answer"
        for attempt in range(4):
            try:
                done = await self.signoff.complete(
                    claim.approval.id, claim.claim_token, outcome, kept
                )
                return done, None
            except SignoffError as exc:
                log.exception("signoff refused the completion of %s", claim.approval.id)
                return None, f"signoff refused it: {exc.code}: {exc}"
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                problem = f"signoff is unreachable: {type(exc).__name__}: {exc}"
                await anyio.sleep(self.gateway.complete_retry * 2**attempt)
            except Exception as exc:  # whatever it is, the call has run: say so
                log.exception("could not record the outcome of %s", claim.approval.id)
                return None, f"{type(exc).__name__}: {exc}"
        log.error("could not record the outcome of %s: %s", claim.approval.id, problem)
        return None, problem


def _definition_changed(name: str, shown: str, now: str, new_id: str) -> str:
    """The reason an approval of a redefined tool is superseded, in words."""
    return (
        f"The MCP server changed the tool {name!r} (its description or input schema) after "
        f"this request was shown: the approver saw definition {shown[:19]}…, the tool is now "
        f"{now[:19]}…. This approval does not cover the tool as it is now and will not run; "
        f"request {new_id} shows the new definition."
    )


def _unrecorded(approval_id: str, problem: str) -> str:
    return (
        f"[signoff-mcp] The approved call RAN (approval {approval_id}), but its outcome could "
        f"not be recorded in signoff ({problem}). Do not call it again: signoff asks a human "
        "about this call once the claim's lease runs out."
    )


def _seconds_until(moment: str | None) -> float | None:
    if not moment:
        return None
    try:
        then = datetime.fromisoformat(moment.replace("Z", "+00:00"))
    except ValueError:
        return None
    return max((then - datetime.now(UTC)).total_seconds(), 0.0) or None
