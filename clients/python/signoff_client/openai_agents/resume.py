"""Resuming a paused run once its approvals are decided: `resume` (from an approval id) and
`resume_from_webhook` load the stored `RunState`, check every gated call against what was
approved, claim the approved ones (one resumer wins), approve or reject each in the state,
and continue the run, recording each call's outcome as its tool returns."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agents import Agent, RunConfig, RunHooks, Runner, RunState

from signoff_client.client import ApprovalRecord, SignoffClient
from signoff_client.errors import ApprovalExpired, NotPending, PolicyChanged, SignoffError
from signoff_client.hashing import record_hash
from signoff_client.lifecycle import CLOSED, ClaimedCall, claim_mismatch, hashes_to, resume_meta
from signoff_client.openai_agents.calls import (
    ClaimHooks,
    GatedCall,
    PausedCall,
    after_failed_run,
    after_run,
    idempotency_keys,
    release_unstarted,
    watch_failures,
)
from signoff_client.openai_agents.edits import Edit, edits_in_run, run_edited
from signoff_client.openai_agents.errors import ResumeRefused
from signoff_client.openai_agents.filing import MARKER, call_of, filed_meta, filed_together
from signoff_client.openai_agents.run_state import StateStore, load_state
from signoff_client.telling import answered_message, replaced_message
from signoff_client.webhooks import verify_webhook

__all__ = ["RejectionMessage", "ResumeResult", "resume", "resume_from_webhook"]

log = logging.getLogger("signoff_client.openai_agents")

# States in which the call was claimed by someone: the run was (or is being) resumed.
_TAKEN = frozenset({"executing", "executed", "failed", "outcome_unknown"})
# The start of the decision note of a grant withdrawn because the paused run did not match it.
_REFUSED = "resume refused: "

RejectionMessage = Callable[[ApprovalRecord], str]


@dataclass(frozen=True)
class ResumeResult:
    """What `resume` did.

    - `resumed`: this process continued the run (`result` is its RunResult, `calls` the gated
      calls with what happened to each).
    - `waiting`: an interruption of the same run step is still undecided (or not filed yet);
      nothing was done. The last decision's webhook resumes the run.
    - `already_resumed`: another resumer claimed the approved calls (or they ran already):
      nothing was done here. A redelivered webhook ends here.
    - `refused`: an earlier resume found the paused run did not match the approval and
      withdrew it (the webhook of that withdrawal ends here).
    - `ignored`: the approval was not filed by this adapter (resume_from_webhook only).

    (Formerly `ResumeOutcome`: "outcome" is what signoff records of a call that ran.)"""

    status: Literal["resumed", "waiting", "already_resumed", "refused", "ignored"]
    approval_id: str
    calls: tuple[GatedCall, ...] = ()
    result: Any = None
    delivery_id: str | None = None
    detail: str = ""


def _default_rejection(record: ApprovalRecord) -> str:
    if record.answered:
        return answered_message(record)
    note = record.raw.get("decision_note")
    suffix = f": {note}" if note else ""
    if record.kind == "interrupted_side_effect":
        return (
            "This call was approved and started earlier, but its outcome was never reported; "
            f"a human declined to run it again{suffix}. It may or may not have taken effect."
        )
    if record.state == "rejected":
        who = record.decided_by or "a human"
        return f"The call was not run: {who} rejected it{suffix}."
    if record.state == "expired":
        return "The call was not run: nobody decided on it before the approval expired."
    if record.state == "cancelled":
        return f"The call was not run: its approval request was cancelled{suffix}."
    return f"The call was not run: its approval was withdrawn ({record.state}){suffix}."


async def refuse(client: SignoffClient, calls: Sequence[PausedCall], message: str) -> None:
    """Release what this process claimed, withdraw the grants the paused run no longer
    matches (so nothing else claims them), and raise."""
    await release_unstarted(client, calls)
    for call in calls:
        if call.record.state in ("pending", "approved"):
            try:
                await client.supersede(call.record.id, f"{_REFUSED}{message}"[:4000])
            except SignoffError:
                pass  # it moved on by itself: nothing can claim it for this run either
    raise ResumeRefused(message)


async def resume(
    client: SignoffClient,
    agent: Agent[Any],
    approval_id: str,
    *,
    state_store: StateStore | None = None,
    hooks: RunHooks[Any] | None = None,
    run_config: RunConfig | None = None,
    context_override: Any = None,
    context_deserializer: Callable[[Mapping[str, Any]], Any] | None = None,
    rejection_message: RejectionMessage | None = None,
    lease: str | None = None,
    wait: float = 0,
    **run_kwargs: Any,
) -> ResumeResult:
    """Continue the run an approval paused, once its decision (and those of the other
    interruptions of the same model turn) is known.

    `wait`: seconds to wait for the turn's undecided approvals, held on the server and
    answered as soon as the last is decided (`SignoffClient.wait_all`): an agent with no
    public URL resumes this way. Without it (or once it runs out), an undecided turn returns
    `waiting` at once.

    Loads the stored RunState with `agent` (the same agent graph, tools included, as turn 1),
    checks every gated call in it still hashes to its approval's hash (else ResumeRefused,
    and the grants are superseded), claims the approved calls (losing a claim means another
    resumer has the run: `already_resumed`), approves or rejects each in the state (the
    rejection text, `rejection_message(record)`, is what the model reads), runs
    `Runner.run(agent, state, ...)`, and completes each claimed call with its tool's output.

    If the run raises, the exception propagates after the claims are settled: see
    `calls.after_failed_run`."""
    trigger = await client.get(approval_id)
    meta = filed_meta(trigger)
    if meta is None:
        raise ValueError(f"approval {approval_id} was not filed by signoff_client.openai_agents")
    if trigger.state == "pending" and wait <= 0:
        return ResumeResult("waiting", approval_id, detail="its decision is pending")
    note = str(trigger.raw.get("decision_note") or "")
    if trigger.state == "superseded" and note.startswith(_REFUSED):
        return ResumeResult("refused", approval_id, detail=note)
    if trigger.state in _TAKEN:
        return ResumeResult("already_resumed", approval_id, detail=f"it is {trigger.state}")

    records, missing = await filed_together(client, trigger, meta)
    if missing:
        return ResumeResult(
            "waiting", approval_id, detail=f"calls {missing} of this step are not filed yet"
        )
    pending = [r.id for r in records.values() if r.state == "pending"]
    if pending and wait > 0:
        await client.wait_all(pending, wait)
        options = dict(
            state_store=state_store, hooks=hooks, run_config=run_config,
            context_override=context_override, context_deserializer=context_deserializer,
            rejection_message=rejection_message, lease=lease,
        )  # fmt: skip
        return await resume(client, agent, approval_id, **options, **run_kwargs)  # afresh
    if pending:
        return ResumeResult("waiting", approval_id, detail=f"still pending: {pending}")
    taken = [r.id for r in records.values() if r.state in _TAKEN]
    if taken:
        return ResumeResult("already_resumed", approval_id, detail=f"already claimed: {taken}")

    state = await RunState.from_string(
        agent,
        await load_state(meta, state_store, approval_id),
        context_override=context_override,
        context_deserializer=context_deserializer,
    )
    calls = await _paused_calls(client, state, meta, records, approval_id)
    taken_by = await _claim(client, calls, rejection_message or _default_rejection, lease)
    if taken_by is not None:
        return ResumeResult("already_resumed", approval_id, detail=taken_by)
    for call in calls:
        if call.claim is not None:
            state.approve(call.item)
        else:
            state.reject(call.item, rejection_message=call.rejection)

    by_call = {call.call_id: call for call in calls}
    keys = {c.call_id: c.claim.idempotency_key for c in calls if c.claim is not None}
    token = idempotency_keys.set(keys)
    edited = edits_in_run.set({c.call_id: c.edit for c in calls if c.edit is not None})
    try:
        result = await Runner.run(
            agent,
            state,
            hooks=ClaimHooks(client, by_call, hooks),
            run_config=watch_failures(run_config, by_call),
            **run_kwargs,
        )
    except BaseException:
        await after_failed_run(client, calls)
        raise
    finally:
        idempotency_keys.reset(token)
        edits_in_run.reset(edited)

    await after_run(client, calls, result)
    return ResumeResult(
        "resumed", approval_id, calls=tuple(call.report() for call in calls), result=result
    )


async def _paused_calls(
    client: SignoffClient,
    state: Any,
    meta: Mapping[str, Any],
    records: Mapping[str, ApprovalRecord],
    approval_id: str,
) -> list[PausedCall]:
    """The gated calls the state pauses at, each checked against its approval before anything
    is claimed: what the SDK would run must be what the humans decided on, whatever the
    stored state says."""
    interruptions = {str(item.call_id): item for item in state.get_interruptions()}
    if set(interruptions) != set(records):
        raise ResumeRefused(
            f"approval {approval_id}: the run state pauses at {sorted(interruptions)}, "
            f"not at the filed calls {sorted(records)}"
        )
    calls: list[PausedCall] = []
    for call_id in [str(c) for c in meta.get("call_ids") or [meta["call_id"]]]:
        item, record = interruptions[call_id], records[call_id]
        name, arguments = call_of(item)
        raw_type = getattr(item.raw_item, "type", None) or (
            item.raw_item.get("type") if isinstance(item.raw_item, dict) else None
        )
        calls.append(
            PausedCall(item, record, name, arguments, is_function=raw_type == "function_call")
        )
    for call in calls:
        record = call.record
        if not hashes_to(record, call.name, call.arguments) or record_hash(record) != record.hash:
            await refuse(
                client,
                calls,
                f"approval {record.id}: the paused run would call {call.name} with arguments "
                "that do not hash to what was approved",
            )
    return calls


async def _claim(
    client: SignoffClient,
    calls: Sequence[PausedCall],
    message_for: RejectionMessage,
    lease: str | None,
) -> str | None:
    """Claim every approved call, checking each claimed call; a call decided otherwise (or
    withdrawn since it was read) gets the rejection text the model reads. Returns why the run
    is already another resumer's (having handed back what it claimed), or None."""
    for call in calls:
        if call.record.state in CLOSED:
            call.rejection = message_for(call.record)
            continue
        try:
            claim = await client.claim(call.record.id, lease)
        except (ApprovalExpired, PolicyChanged):
            call.record = await client.get(call.record.id)
            call.rejection = message_for(call.record)
            continue
        except NotPending as exc:
            if exc.state in _TAKEN:  # another resumer has this run
                await release_unstarted(client, calls)
                return f"{call.record.id} is {exc.state}"
            call.record = await client.get(call.record.id)
            if call.record.state not in CLOSED:
                await release_unstarted(client, calls)
                raise
            call.rejection = message_for(call.record)  # withdrawn since we looked
            continue
        except BaseException:  # ApprovalCorrupt, the network...: give back what we hold
            await release_unstarted(client, calls)
            raise
        call.claim = ClaimedCall.from_claim(claim)
        asked = {"name": call.name, "arguments": call.arguments}
        why = claim_mismatch(claim, asked, call.record.hash)
        if why is None and claim.edited and not run_edited(call.item):
            why = (
                f"approval {claim.approval.id} was approved as edited, but {call.name} is not "
                "a function tool of the agent: the revision cannot be run in its place"
            )
        if why is not None:
            await refuse(client, calls, why)
        if claim.edited:
            revision = dict(claim.tool["arguments"])
            note = replaced_message(call.name, call.arguments, revision, claim.approval.decided_by)
            call.edit = Edit(revision, note)
    return None


async def resume_from_webhook(
    client: SignoffClient,
    agent: Agent[Any],
    headers: Mapping[str, str],
    body: bytes,
    secret: str | Sequence[str],
    **options: Any,
) -> ResumeResult:
    """Verify a decision webhook (headers and raw body as received; BadWebhookSignature if it
    does not verify) and `resume` the run of its approval (`options` as for `resume`).

    Webhooks for approvals this adapter did not file come back `ignored`. A redelivery, or
    a second resumer, of an approved call comes back `already_resumed` and runs nothing. A
    run whose calls were all rejected has nothing to claim, so a redelivered webhook would
    continue it again: dedupe on the result's `delivery_id` if that matters to you."""
    delivery_id = verify_webhook(headers, body, secret)
    event = json.loads(body)
    approval = event.get("approval") or {}
    approval_id = str(approval.get("id"))
    if resume_meta(approval, MARKER) is None:
        return ResumeResult("ignored", approval_id, delivery_id=delivery_id)
    result = await resume(client, agent, approval_id, **options)
    return dataclasses.replace(result, delivery_id=delivery_id)
