"""Resuming a paused thread with its decision: `resume` (from an approval id) and
`resume_from_webhook` claim an approved call for the thread (one resumer wins), check it,
resume with `Command(resume=...)`, and settle the claim after the graph returns or raises."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from langgraph.types import Command

from signoff_client.client import ApprovalRecord, Claim
from signoff_client.errors import NotPending
from signoff_client.langgraph.decision import NodeCall, forget_call, known_call, refuse
from signoff_client.langgraph.gate import SignoffGate
from signoff_client.langgraph.interrupt import KEY, MARKER
from signoff_client.langgraph.runner import GraphRunner
from signoff_client.lifecycle import CLOSED, claim_mismatch, resume_meta
from signoff_client.webhooks import verify_webhook

__all__ = ["ResumeResult", "resume", "resume_from_webhook"]

log = logging.getLogger("signoff_client.langgraph")


@dataclass(frozen=True)
class ResumeResult:
    """What a resume helper did.

    status: `resumed` (the thread ran on with the decision; `output` is what the graph
    returned), `pending` (not decided yet), `not_waiting` (the thread is not paused on this
    approval: already resumed, or moved on), `taken` (another caller claimed the call, or it
    already ran), `ignored` (a webhook this helper does not act on: not a LangGraph request,
    or a `released` or `lease_lapsed` event)."""

    status: Literal["resumed", "pending", "not_waiting", "taken", "ignored"]
    approval_id: str
    state: str
    thread_id: str | None = None
    output: Any = None

    @property
    def resumed(self) -> bool:
        return self.status == "resumed"


async def resume_from_webhook(
    graph: Any,
    headers: Mapping[str, str],
    body: bytes,
    secret: Any,
    *,
    gate: SignoffGate,
    config: Mapping[str, Any] | None = None,
    lease: str | None = None,
) -> ResumeResult:
    """Handle a decision webhook: verify its signature (BadWebhookSignature otherwise), then
    `resume` for its approval. Safe to call for every delivery, redeliveries included: only
    one caller claims an approved call, and a thread already resumed is not resumed again.
    `released` and `lease_lapsed` events are ignored (a released grant is retried by calling
    `resume`; a lapsed one waits for the human's follow-up decision, whose own webhook
    resumes the thread)."""
    verify_webhook(headers, body, secret)
    event = json.loads(body)
    approval = event.get("approval") or {}
    approval_id = str(approval.get("id"))
    thread_id = _thread_of(approval)
    if thread_id is None or event.get("event") in ("released", "lease_lapsed"):
        return ResumeResult("ignored", approval_id, str(approval.get("state")), thread_id)
    return await resume(graph, approval_id, gate=gate, config=config, lease=lease)


async def resume(
    graph: Any,
    approval_id: str,
    *,
    gate: SignoffGate,
    config: Mapping[str, Any] | None = None,
    lease: str | None = None,
    wait: float = 0,
) -> ResumeResult:
    """Resume the thread paused on `approval_id` with its decision.

    `wait`: seconds to wait for the decision if it is still pending, held on the server and
    answered as soon as it is committed (`SignoffClient.wait`): with it, an agent with no
    public URL resumes by id as soon as a person decides. Without it (or once it runs out),
    an undecided approval returns `pending` at once.

    Reads the approval; finds the thread (its id is stored with the request) and checks that
    the thread is paused on this approval. If approved: claims it (one resumer wins; the
    others get `taken`), checks the claimed call hashes to the approved hash, and resumes with
    the claim so the node runs exactly the stored call. If rejected, expired, cancelled or
    superseded: resumes with that outcome, claiming nothing. `config` adds to the run's
    config (the thread id comes from the approval; the gate is passed to the nodes as
    `configurable["signoff"]`); `lease` is the claim's lease (default the server's).

    If the graph raises before the call started, the claim is released (the call never ran)
    and the error propagates; call `resume` again to retry. (Formerly `resume_thread`.)"""
    async with gate.client() as client:
        record = await client.get(approval_id)
        thread_id = _thread_of(record.raw)
        if thread_id is None and record.origin_id:
            thread_id = _thread_of((await client.get(record.origin_id)).raw)
        if thread_id is None:
            raise ValueError(f"approval {approval_id} was not filed by signoff_interrupt")
        runner = await GraphRunner.open(graph, _run_config(config, thread_id, gate))
        waiting = _waiting_on(runner.snapshot, {record.id, record.origin_id} - {None})
        if waiting is None:
            return ResumeResult("not_waiting", record.id, record.state, thread_id)
        interrupt_id, asked, failed_before = waiting
        if failed_before:
            # The node failed after it received its decision, which the checkpoint keeps:
            # run it again as it is (a released claim is claimed again by the node itself).
            output = await runner.invoke(None)
            if _still_waiting(await runner.refresh(), interrupt_id):
                return await resume(graph, approval_id, gate=gate, config=config, lease=lease)
            return ResumeResult("resumed", record.id, record.state, thread_id, output)
        claim: Claim | None = None
        if record.state == "pending" and wait > 0:  # the thread waits on it: so do we
            record = await client.wait(record.id, wait)
            # Another resumer may have moved the thread on meanwhile.
            ids = {record.id, record.origin_id} - {None}
            if _waiting_on(await runner.refresh(), ids) is None:
                return ResumeResult("not_waiting", record.id, record.state, thread_id)
        if record.state == "pending":
            return ResumeResult("pending", record.id, record.state, thread_id)
        if record.state == "approved":
            try:
                claim = await client.claim(record.id, lease)
            except NotPending as exc:  # ApprovalExpired and PolicyChanged included
                record = await client.get(record.id)
                if record.state not in CLOSED:
                    return ResumeResult("taken", record.id, exc.state, thread_id)
            else:
                why = claim_mismatch(claim, asked.get("tool"), record.hash)
                if why is not None:
                    record = await refuse(client, claim, why)
                    claim = None
        elif record.state not in CLOSED:
            return ResumeResult("taken", record.id, record.state, thread_id)
        value = _resume_value(record, claim)
    try:
        output = await runner.invoke(Command(resume={interrupt_id: value}))
    except BaseException:
        if claim is not None:
            await _after_run(gate, claim, failed=True)
        raise
    if claim is not None:
        await _after_run(gate, claim, failed=False)
    return ResumeResult("resumed", record.id, record.state, thread_id, output)


def _thread_of(approval: Mapping[str, Any]) -> str | None:
    meta = resume_meta(approval, MARKER)
    thread_id = None if meta is None else meta.get("thread_id")
    return None if thread_id is None else str(thread_id)


def _run_config(
    config: Mapping[str, Any] | None, thread_id: str, gate: SignoffGate
) -> dict[str, Any]:
    run_config = dict(config or {})
    configurable = dict(run_config.get("configurable") or {})
    given = configurable.get("thread_id")
    if given is not None and str(given) != thread_id:
        raise ValueError(
            f"config names thread {given!r}, but the approval belongs to {thread_id!r}"
        )
    configurable["thread_id"] = thread_id
    configurable.setdefault(KEY, gate)
    run_config["configurable"] = configurable
    return run_config


def _waiting_on(snapshot: Any, approval_ids: set[str]) -> tuple[str, dict[str, Any], bool] | None:
    """(interrupt id, what it asked, whether its task failed) of the thread's pending signoff
    interrupt for one of `approval_ids`, or None."""
    errors = {}
    for task in getattr(snapshot, "tasks", ()) or ():
        for pending in task.interrupts:
            errors[pending.id] = task.error is not None
    for pending in getattr(snapshot, "interrupts", ()) or ():
        asked = pending.value.get(KEY) if isinstance(pending.value, Mapping) else None
        if isinstance(asked, Mapping) and asked.get("approval_id") in approval_ids:
            return pending.id, dict(asked), errors.get(pending.id, False)
    return None


def _still_waiting(snapshot: Any, interrupt_id: str) -> bool:
    pending = getattr(snapshot, "interrupts", ()) or ()
    tasks = getattr(snapshot, "tasks", ()) or ()
    failed = any(t.error is not None for t in tasks for i in t.interrupts if i.id == interrupt_id)
    return any(i.id == interrupt_id for i in pending) and not failed


def _resume_value(record: ApprovalRecord, claim: Claim | None) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "approval_id": record.id,
        "origin_id": record.origin_id,
        "hash": record.hash,
        "decided_by": record.decided_by,
        "note": record.raw.get("decision_note"),
    }
    if claim is not None:
        answer |= {
            "approved": True,
            "state": "approved",
            "tool": claim.tool,
            "claim_token": claim.claim_token,
            "idempotency_key": claim.idempotency_key,
            "edited": claim.edited,
            "original_hash": claim.original_hash,
            "original_arguments": claim.original_arguments,
        }
    else:
        answer |= {"approved": False, "state": record.state, "tool": record.tool}
        if record.answered:
            answer["answer"] = record.answer_text
    return {KEY: answer}


async def _after_run(gate: SignoffGate, claim: Claim, *, failed: bool) -> None:
    """After the graph returned or raised: send an outcome the node could not send; release a
    claim whose call never started when the graph failed (so the grant is not left executing
    until its lease lapses and a human is asked about a call that never ran)."""
    call = known_call(claim.claim_token) or NodeCall(claim.approval.id, claim.claim_token)
    async with gate.client() as client:
        await call.resend(client)
        if not call.started:
            if failed or not call.delivered:
                await call.release(client)
            else:
                log.warning(
                    "the node received approval %s but neither ran nor reported it; if it ran "
                    "the call, report it with decision.complete()/fail(), else signoff will ask "
                    "a human when the claim's lease lapses",
                    claim.approval.id,
                )
    if call.recorded or not call.started:
        forget_call(claim.claim_token)
