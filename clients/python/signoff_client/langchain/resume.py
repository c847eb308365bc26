"""Resuming a thread the middleware paused, once signoff has decided every action of the
review: `resume` (from an approval id) and `resume_from_webhook` check each action in the
checkpoint against its approval, claim the approved ones (one resumer wins), resume with the
middleware's own decisions, and complete each claimed call with the tool's result."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langgraph.types import Command

from signoff_client.client import ApprovalRecord, SignoffClient
from signoff_client.errors import ApprovalExpired, NotPending, SignoffError
from signoff_client.langchain.errors import ResumeRefused
from signoff_client.langchain.filing import Action, Review, filed_meta, reviews_of
from signoff_client.langgraph.runner import GraphRunner
from signoff_client.lifecycle import CLOSED, ClaimedCall, claim_mismatch, hashes_to
from signoff_client.telling import replaced_message
from signoff_client.webhooks import verify_webhook

__all__ = ["ResumeResult", "resume", "resume_from_webhook"]

log = logging.getLogger("signoff_client.langchain")

_TAKEN = frozenset({"executing", "executed", "failed", "outcome_unknown"})


@dataclass(frozen=True)
class ResumeResult:
    """What `resume` did: `resumed` (the agent ran on; `output` is what it returned and
    `decisions` what the middleware was given), `waiting` (an action of the review is
    undecided or not filed yet), `not_waiting` (the thread is not paused on this review any
    more: resumed already), `already_resumed` (another resumer claimed the approved calls),
    `ignored` (a webhook for a request this adapter did not file)."""

    status: Literal["resumed", "waiting", "not_waiting", "already_resumed", "ignored"]
    approval_id: str
    thread_id: str | None = None
    decisions: tuple[dict[str, Any], ...] = ()
    output: Any = None
    detail: str = ""


@dataclass(eq=False)
class _Pending:
    action: Action
    record: ApprovalRecord
    claim: ClaimedCall | None = None
    decision: dict[str, Any] | None = None


def _why_not(record: ApprovalRecord) -> str:
    note = record.raw.get("decision_note")
    suffix = f": {note}" if note else ""
    if record.state == "rejected":
        return f"{record.decided_by or 'A human'} rejected the call{suffix}."
    if record.state == "expired":
        return "Nobody decided on the call before its approval expired."
    return f"The call's approval was withdrawn ({record.state}){suffix}."


def _not_run(pending: _Pending, text: str) -> dict[str, Any]:
    """A decision for a call that does not run, as the review allows one."""
    allowed = pending.action.allowed
    if "reject" in allowed:
        return {"type": "reject", "message": text}
    if "respond" in allowed:
        return {"type": "respond", "message": f"The tool did not run. {text}"}
    raise ResumeRefused(
        f"approval {pending.record.id}: the call was not approved, and its review allows "
        f"neither reject nor respond (only {list(allowed)})"
    )


async def _filed(
    client: SignoffClient, trigger: ApprovalRecord, meta: Mapping[str, Any]
) -> dict[int, ApprovalRecord]:
    """The requests of the review, newest per action."""
    found: dict[int, ApprovalRecord] = {int(meta["index"]): trigger}
    cursor: str | None = None
    while len(found) < int(meta["count"]):
        page, cursor = await client.list(run_id=trigger.raw["run_id"], limit=500, cursor=cursor)
        for record in page:
            other = filed_meta(record)
            if other is not None and other.get("interrupt_id") == meta["interrupt_id"]:
                found.setdefault(int(other["index"]), record)
        if cursor is None:
            break
    return found


def _tool_call_ids(snapshot: Any, review: Review) -> list[str | None]:
    """Which of the model's tool calls each action is: per call, its own id; batched, the
    last AI message's calls matched in order by name and arguments."""
    if review.mode == "per_call":
        return [a.tool_call_id for a in review.actions]
    messages = (getattr(snapshot, "values", None) or {}).get("messages") or []
    calls = next(
        (list(m.tool_calls) for m in reversed(messages) if getattr(m, "tool_calls", None)), []
    )
    ids: list[str | None] = []
    for action in review.actions:
        match = next(
            (c for c in calls if c["name"] == action.name and c["args"] == action.args), None
        )
        if match is not None:
            calls.remove(match)
        ids.append(None if match is None else match.get("id"))
    return ids


async def _refuse(client: SignoffClient, pending: Sequence[_Pending], why: str) -> None:
    for item in pending:
        if item.claim is not None and not item.claim.started:
            await item.claim.release(client)
    for item in pending:
        if item.record.state in ("pending", "approved"):
            try:
                await client.supersede(item.record.id, f"resume refused: {why}"[:4000])
            except SignoffError:
                pass
    raise ResumeRefused(why)


async def _decide(client: SignoffClient, item: _Pending, lease: str | None) -> str | None:
    """Set the item's decision (claiming an approved call); the reason the run is another
    resumer's, or None."""
    record, allowed = item.record, item.action.allowed
    if record.state == "answered":
        if "respond" in allowed:
            item.decision = {"type": "respond", "message": record.answer_text or ""}
        else:
            who = record.decided_by or "a person"
            item.decision = _not_run(item, f"{who} answered instead: {record.answer_text}")
        return None
    if record.state in CLOSED:
        item.decision = _not_run(item, _why_not(record))
        return None
    if record.edited and "edit" not in allowed:
        why = "the approver edited the call, but this tool's review does not allow edits"
        try:
            await client.supersede(record.id, f"Not run: {why}.")
        except NotPending:
            pass
        item.decision = _not_run(item, f"Not run: {why}.")
        return None
    try:
        claim = await client.claim(record.id, lease)
    except ApprovalExpired:
        item.record = await client.get(record.id)
        item.decision = _not_run(item, _why_not(item.record))
        return None
    except NotPending as exc:
        if exc.state in _TAKEN:
            return f"{record.id} is {exc.state}"
        item.record = await client.get(record.id)
        item.decision = _not_run(item, _why_not(item.record))
        return None
    item.claim = ClaimedCall.from_claim(claim)
    why = claim_mismatch(claim, item.action.tool, record.hash)
    if why is not None:
        raise ResumeRefused(why)
    if claim.edited:
        item.decision = {
            "type": "edit",
            "edited_action": {"name": item.action.name, "args": dict(claim.tool["arguments"])},
        }
        log.info(
            "%s", replaced_message(item.action.name, item.action.args, claim.tool["arguments"])
        )
    else:
        item.decision = {"type": "approve"}
    return None


def _run_config(config: Mapping[str, Any] | None, thread_id: str) -> dict[str, Any]:
    run = dict(config or {})
    configurable = dict(run.get("configurable") or {})
    if configurable.get("thread_id", thread_id) != thread_id:
        raise ValueError(f"config names another thread than the approval's ({thread_id!r})")
    configurable["thread_id"] = thread_id
    run["configurable"] = configurable
    return run


async def resume(
    client: SignoffClient,
    agent: Any,
    approval_id: str,
    *,
    config: Mapping[str, Any] | None = None,
    lease: str | None = None,
    wait: float = 0,
) -> ResumeResult:
    """Resume the thread paused on the review `approval_id` belongs to, once every action of
    it is decided. `agent` is the compiled `create_agent` graph with the same checkpointer
    as turn 1. If the agent raises after its tools ran, their results are still recorded;
    a claimed call with no result is left to its lease (signoff then asks a human).

    `wait`: seconds to wait for the review's undecided actions, held on the server and
    answered as soon as the last is decided (`SignoffClient.wait_all`): an agent with no
    public URL resumes this way. Without it (or once it runs out), an undecided review
    returns `waiting` at once."""
    trigger = await client.get(approval_id)
    meta = filed_meta(trigger)
    if meta is None:
        raise ValueError(f"approval {approval_id} was not filed by signoff_client.langchain")
    thread_id = str(meta["thread_id"])
    runner = await GraphRunner.open(agent, _run_config(config, thread_id))
    allowed = {}
    if meta.get("mode") == "per_call":
        allowed = {str(trigger.tool["name"]) if trigger.tool else "": meta.get("allowed") or ()}
    review = next(
        (r for r in reviews_of(runner.snapshot, allowed) if r.interrupt_id == meta["interrupt_id"]),
        None,
    )
    if review is None:
        return ResumeResult("not_waiting", approval_id, thread_id)
    records = await _filed(client, trigger, meta)
    undecided = [r.id for r in records.values() if r.state == "pending"]
    if undecided and wait > 0:
        await client.wait_all(undecided, wait)
        return await resume(client, agent, approval_id, config=config, lease=lease)  # afresh
    if len(records) < len(review.actions):
        return ResumeResult("waiting", approval_id, thread_id, detail="not every action is filed")
    pending = [_Pending(a, records[a.index]) for a in review.actions]
    if any(p.record.state == "pending" for p in pending):
        return ResumeResult("waiting", approval_id, thread_id, detail="an action is undecided")
    taken = [p.record.id for p in pending if p.record.state in _TAKEN]
    if taken:
        return ResumeResult("already_resumed", approval_id, thread_id, detail=f"{taken}")
    for item in pending:
        if not hashes_to(item.record, item.action.name, item.action.args):
            await _refuse(
                client,
                pending,
                f"approval {item.record.id}: the paused action "
                f"{item.action.name} does not hash to what was filed",
            )
    ids = _tool_call_ids(runner.snapshot, review)
    try:
        for item in pending:
            lost = await _decide(client, item, lease)
            if lost is not None:
                for other in pending:
                    if other.claim is not None:
                        await other.claim.release(client)
                return ResumeResult("already_resumed", approval_id, thread_id, detail=lost)
    except ResumeRefused as refused:
        await _refuse(client, pending, str(refused))
    decisions = [item.decision or {} for item in pending]
    answer: Any = decisions[0] if review.mode == "per_call" else {"decisions": decisions}
    for item in pending:
        if item.claim is not None:
            item.claim.started = True  # handed to the agent: never handed back from here
    try:
        output = await runner.invoke(Command(resume={review.interrupt_id: answer}))
    except BaseException:
        await _record(client, pending, ids, await runner.refresh(), ran_all=False)
        raise
    await _record(client, pending, ids, await runner.refresh(), ran_all=True)
    return ResumeResult("resumed", approval_id, thread_id, tuple(decisions), output)


async def _record(
    client: SignoffClient,
    pending: Sequence[_Pending],
    ids: Sequence[str | None],
    snapshot: Any,
    *,
    ran_all: bool,
) -> None:
    """Complete each claimed call with the tool's result as the model got it. After a run
    that returned, a claimed call with no result never ran (the agent went on without it);
    after one that raised, it may have started: it is left to its lease."""
    messages = (getattr(snapshot, "values", None) or {}).get("messages") or []
    results = {getattr(m, "tool_call_id", None): m for m in messages if m.type == "tool"}
    for item, call_id in zip(pending, ids, strict=True):
        if item.claim is None:
            continue
        message = results.get(call_id) if call_id else None
        if message is not None:
            content = (
                message.content
                if isinstance(message.content, str)
                else json.dumps(message.content, default=str)
            )
            outcome = "failed" if getattr(message, "status", None) == "error" else "succeeded"
            await item.claim.record(client, outcome, {"output": content})
        elif ran_all:
            await item.claim.record_not_run(client, "the resumed agent went on without the tool")
        else:
            log.warning(
                "approval %s: the agent failed; the call's outcome is unknown", item.record.id
            )


async def resume_from_webhook(
    client: SignoffClient,
    agent: Any,
    headers: Mapping[str, str],
    body: bytes,
    secret: str | Sequence[str],
    **options: Any,
) -> ResumeResult:
    """Verify a decision webhook (BadWebhookSignature otherwise) and `resume` the thread of
    its approval; a webhook for a request this adapter did not file comes back `ignored`,
    and a redelivery `not_waiting` or `already_resumed`, running nothing."""
    verify_webhook(headers, body, secret)
    approval = json.loads(body).get("approval") or {}
    approval_id = str(approval.get("id"))
    if not isinstance((approval.get("resume") or {}).get("langchain_hitl"), Mapping):
        return ResumeResult("ignored", approval_id)
    return await resume(client, agent, approval_id, **options)
