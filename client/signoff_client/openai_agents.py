"""signoff for the OpenAI Agents SDK: a tool with `needs_approval` asks a human through
signoff, the turn ends, and a later process (on the decision webhook) runs exactly the approved
call, once, and tells the model about a rejection.

    from signoff_client import SignoffClient
    from signoff_client.openai_agents import file_interruptions, resume_from_webhook

    @function_tool(needs_approval=True)
    def refund(charge: str, amount: int) -> str: ...

    # turn 1: the run stops at the gated call; file it and end the turn
    result = await Runner.run(agent, "Refund order 8812")
    await file_interruptions(client, result, run_id="conv-42", capability="payments.refund")

    # later, any process, on the decision webhook (headers + raw body as received)
    outcome = await resume_from_webhook(client, agent, headers, body, webhook_secret)
    # outcome.status: "resumed" | "waiting" | "already_resumed" | "refused" | "ignored"
    # outcome.result: the resumed RunResult (file its interruptions again if it has some)

Each interruption becomes one signoff request: `tool` is the interruption's tool name and its
parsed arguments, and `resume` carries the serialised `RunState` (or, with a `state_store`, a
key into it) with the interruption's call id. On resume the state is loaded, every gated call
in it is checked to hash to the hash its approval was decided on, approved calls are claimed
(one resumer wins; the others get NotPending and do nothing), approved or rejected in the
state, and the run goes on: the SDK runs each approved tool once and gives the model the
rejection text for the others. Each claimed call is completed with the tool's output as soon as
the tool returns.

Importing this module imports the `agents` package (the `openai-agents` extra);
`import signoff_client` alone does not.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import inspect
import json
import logging
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from agents import Agent, RunConfig, RunHooks, Runner, RunState
from agents.items import ToolApprovalItem
from agents.run_config import ToolErrorFormatterArgs

from signoff_client.client import ApprovalRecord, Claim, SignoffClient
from signoff_client.errors import (
    ApprovalExpired,
    NotCanonical,
    NotPending,
    PolicyChanged,
    SignoffError,
)
from signoff_client.hashing import approval_hash, canonical_json, record_hash
from signoff_client.webhooks import verify_webhook

__all__ = [
    "FileStateStore",
    "GatedCall",
    "ResumeOutcome",
    "ResumeRefused",
    "StateStore",
    "call_of",
    "default_presentation",
    "file_interruptions",
    "idempotency_key",
    "resume",
    "resume_from_webhook",
]

log = logging.getLogger("signoff_client.openai_agents")

# The key under `resume` that marks an approval as filed by this adapter.
MARKER = "openai_agents"
FORMAT = 1
# `complete` takes a result of up to 16 KiB canonical JSON; keep a margin for the wrapper.
RESULT_LIMIT = 16 * 1024 - 256
# States in which the call was claimed by someone: the run was (or is being) resumed.
_TAKEN = frozenset({"executing", "executed", "failed", "outcome_unknown"})
_CLOSED = frozenset({"rejected", "expired", "cancelled", "superseded"})
_REFUSED = "resume refused: "
_RESERVED = frozenset({"run_id", "capability", "tool", "presentation", "resume", "kind", "step"})

# call id -> the claim's idempotency key, while a resumed run executes its approved calls.
_IDEMPOTENCY_KEYS: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "signoff_openai_agents_idempotency_keys", default=None
)


class ResumeRefused(SignoffError):
    """The paused run does not match what was approved (a gated call in the stored state
    hashes to something else, or the state is not the one filed); nothing ran."""

    code = "resume_refused"


class StateStore(Protocol):
    """Where serialised run states live when they should not travel in signoff's `resume`
    field (large conversations: a request body is capped at 256 KiB by default). Keys are the
    SHA-256 of the state; signoff keeps the key and the digest, and a loaded state that does
    not match the digest is refused."""

    async def save(self, key: str, state: str) -> None: ...

    async def load(self, key: str) -> str: ...


class FileStateStore:
    """A StateStore in a directory (one file per state, written atomically). Every process
    that resumes needs to see the same directory."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def _path(self, key: str) -> Path:
        if not key or not all(c in "0123456789abcdef" for c in key):
            raise ValueError(f"not a state key: {key!r}")
        return self.directory / f"{key}.json"

    async def save(self, key: str, state: str) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".state-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(state)
            os.replace(tmp, self._path(key))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    async def load(self, key: str) -> str:
        return self._path(key).read_text("utf-8")


@dataclass(frozen=True)
class GatedCall:
    """One gated call of a resumed run and what became of it in this process.

    `execution` is the truth about the tool: `not_started` (it never ran: rejected, or the
    run went on without it), `started` (it began and its outcome is unknown here: the run
    raised while it ran), `finished` (it returned; `outcome` and `output` say how)."""

    approval_id: str
    call_id: str
    tool: dict[str, Any]
    decision: str
    execution: Literal["not_started", "started", "finished"] = "not_started"
    outcome: Literal["succeeded", "failed"] | None = None
    output: Any = None
    message: str | None = None


@dataclass(frozen=True)
class ResumeOutcome:
    """What `resume` did.

    - `resumed`: this process continued the run (`result` is its RunResult, `calls` the gated
      calls with what happened to each).
    - `waiting`: an interruption of the same run step is still undecided (or not filed yet);
      nothing was done. The last decision's webhook resumes the run.
    - `already_resumed`: another resumer claimed the approved calls (or they ran already):
      nothing was done here. A redelivered webhook ends here.
    - `refused`: an earlier resume found the paused run did not match the approval and
      withdrew it (the webhook of that withdrawal ends here).
    - `ignored`: the approval was not filed by this adapter (resume_from_webhook only)."""

    status: Literal["resumed", "waiting", "already_resumed", "refused", "ignored"]
    approval_id: str
    calls: tuple[GatedCall, ...] = ()
    result: Any = None
    delivery_id: str | None = None
    detail: str = ""


Capability = str | Mapping[str, str] | Callable[[ToolApprovalItem], str]
Presentation = Callable[[ToolApprovalItem, dict[str, Any]], Mapping[str, Any]]
RejectionMessage = Callable[[ApprovalRecord], str]


def call_of(item: ToolApprovalItem) -> tuple[str, dict[str, Any]]:
    """The call an interruption stands for, as signoff stores and hashes it: the tool's name
    and its arguments as a JSON object. Arguments that are not a JSON object (some hosted
    tools) are wrapped as {"input": ...}. Used both when filing and when checking the state
    on resume, so both sides derive the same call."""
    name = item.qualified_name or item.name
    if not name:
        raise ValueError(f"interruption {item.call_id!r} names no tool")
    raw = item.arguments
    if raw is None or raw == "":
        return name, {}
    try:
        parsed = json.loads(raw)
    except ValueError:
        return name, {"input": raw}
    return name, parsed if isinstance(parsed, dict) else {"input": parsed}


def _field_value(value: Any) -> Any:
    if value is None or isinstance(value, str | bool | int | float):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def default_presentation(item: ToolApprovalItem, arguments: dict[str, Any]) -> dict[str, Any]:
    """`Run <tool>`, one field per argument, and the call id. The call id makes each
    interruption its own request: signoff returns the existing approval for the same run and
    hash, so without it the model asking again for an identical call (after a rejection,
    say) would get the old decision instead of a human's new one."""
    name, _ = call_of(item)
    fields: list[dict[str, Any]] = [
        {"label": (str(key) or "(empty)")[:200], "value": _field_value(value)}
        for key, value in arguments.items()
    ]
    fields.append({"label": "Tool call id", "value": str(item.call_id)})
    return {"title": f"Run {name}"[:300], "fields": fields}


def _capability_for(capability: Capability, item: ToolApprovalItem, name: str) -> str:
    if isinstance(capability, str):
        return capability
    if isinstance(capability, Mapping):
        try:
            return capability[name]
        except KeyError:
            raise ValueError(
                f"no capability for tool {name!r}: the capability mapping names "
                f"{sorted(capability)}"
            ) from None
    if callable(capability):
        return str(capability(item))
    raise TypeError("capability must be a string, a mapping of tool names, or a callable")


def _meta(record: ApprovalRecord) -> dict[str, Any] | None:
    resume_field = record.raw.get("resume")
    if not isinstance(resume_field, dict):
        return None
    meta = resume_field.get(MARKER)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        return None
    return meta


async def file_interruptions(
    client: SignoffClient,
    result: Any,
    *,
    run_id: str,
    capability: Capability,
    presentation: Presentation | None = None,
    reason: str | Callable[[ToolApprovalItem, dict[str, Any]], str | None] | None = None,
    requested_by: str | None = None,
    state_store: StateStore | None = None,
    context_serializer: Callable[[Any], Mapping[str, Any]] | None = None,
    **request_fields: Any,
) -> list[ApprovalRecord]:
    """File one signoff request per interruption of `result` (a RunResult or
    RunResultStreaming that stopped for approvals) and return them, in interruption order.

    `capability` is one dotted capability for every tool, a mapping tool name -> capability,
    or a callable(item) -> capability. `presentation(item, arguments)` builds what the human
    reads (default: `default_presentation`). `request_fields` go into the create body as they
    are (approval_ttl, grant_ttl, approvers, required_approvals, callback_url, preconditions).
    The serialised RunState goes with every request in its `resume` field, or into
    `state_store` (recommended when the conversation is long) with only its key in signoff.

    Safe to call again for the same result (after a crash, say): signoff returns the same
    approvals. Then end the turn; `resume_from_webhook` picks the run up."""
    interruptions: Sequence[ToolApprovalItem] = list(getattr(result, "interruptions", []) or [])
    if not interruptions:
        return []
    clash = _RESERVED & set(request_fields)
    if clash:
        raise ValueError(
            f"{sorted(clash)} are set by the adapter (`step` is left out: a step shared by "
            "the interruptions of one model turn would make each replace the other)"
        )
    state_json = result.to_state().to_json(context_serializer=context_serializer)
    state = json.dumps(state_json, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(state.encode()).hexdigest()
    if state_store is not None:
        await state_store.save(digest, state)
    call_ids = [str(item.call_id) for item in interruptions]
    if None in (item.call_id for item in interruptions) or len(set(call_ids)) != len(call_ids):
        raise ValueError("every interruption needs its own call id to be filed")

    records = []
    for item, call_id in zip(interruptions, call_ids, strict=True):
        name, arguments = call_of(item)
        shown = dict((presentation or default_presentation)(item, arguments))
        meta: dict[str, Any] = {
            "format": FORMAT,
            "call_id": call_id,
            "call_ids": call_ids,
            "state_sha256": digest,
        }
        if state_store is None:
            meta["run_state"] = state
        else:
            meta["state_key"] = digest
        body: dict[str, Any] = {
            "run_id": run_id,
            "capability": _capability_for(capability, item, name),
            "tool": {"name": name, "arguments": arguments},
            "presentation": shown,
            "resume": {MARKER: meta},
            **request_fields,
        }
        why = reason(item, arguments) if callable(reason) else reason
        if why is not None:
            body["reason"] = why
        if requested_by is not None:
            body["requested_by"] = requested_by
        record = await client.request(**body)
        filed = _meta(record)
        if filed is None or (filed.get("call_id"), filed.get("state_sha256")) != (
            call_id,
            digest,
        ):
            # Same run_id and hash as an earlier request: signoff handed that one back, with
            # its own decision and its own paused state. Acting on it would resume another
            # pause of the run, so stop here and say how to make the requests distinct.
            raise ValueError(
                f"signoff returned the earlier approval {record.id} ({record.state}) for "
                f"{name} call {call_id}: the same run_id already asked for the identical "
                "call and presentation from another paused state. Put the call id in the "
                "presentation (as default_presentation does) or use a new run_id."
            )
        records.append(record)
    return records


# ----------------------------------------------------------------------------------------
# resume


def _default_rejection(record: ApprovalRecord) -> str:
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


@dataclass
class _Gate:
    """One gated call being resumed: its interruption, its approval, and what happened."""

    item: ToolApprovalItem
    record: ApprovalRecord
    name: str
    arguments: dict[str, Any]
    claim: Claim | None = None
    rejection: str | None = None
    is_function: bool = True
    started: bool = False
    finished: bool = False
    failed: bool = False
    output: Any = None
    completed: bool = False

    @property
    def call_id(self) -> str:
        return str(self.item.call_id)


def _output_json(value: Any) -> Any:
    """The tool's output as JSON signoff accepts (16 KiB canonical at most)."""
    if hasattr(value, "model_dump"):
        with contextlib.suppress(Exception):
            value = value.model_dump(mode="json")
    try:
        doc = json.loads(json.dumps(value, default=str, allow_nan=False))
        size = len(canonical_json(doc))
    except (TypeError, ValueError, NotCanonical):
        doc, size = str(value), len(canonical_json(str(value)))
    if size <= RESULT_LIMIT:
        return {"output": doc}
    text = doc if isinstance(doc, str) else json.dumps(doc, ensure_ascii=False)
    cut = RESULT_LIMIT // 2
    while len(canonical_json(text[:cut])) > RESULT_LIMIT - 64:
        cut //= 2
    return {"output_truncated": text[:cut], "output_chars": len(text)}


class _GateHooks(RunHooks[Any]):
    """Watches the approved calls run: marks them started, and completes each in signoff as
    soon as its tool returns (before the model is called again). Forwards every callback to
    the caller's hooks."""

    def __init__(
        self, client: SignoffClient, gates: Mapping[str, _Gate], inner: RunHooks[Any] | None
    ) -> None:
        self.client = client
        self.gates = gates
        self.inner = inner

    def _gate(self, context: Any) -> _Gate | None:
        gate = self.gates.get(getattr(context, "tool_call_id", None) or "")
        return gate if gate is not None and gate.claim is not None else None

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        if self.inner is not None:  # first: if the caller's hook raises, the tool never starts
            await self.inner.on_tool_start(context, agent, tool)
        gate = self._gate(context)
        if gate is not None:
            gate.started = True

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: object) -> None:
        gate = self._gate(context)
        if gate is not None:
            gate.finished, gate.output = True, result
            await _complete(self.client, gate)
        if self.inner is not None:
            await self.inner.on_tool_end(context, agent, tool, result)

    async def on_llm_start(self, *args: Any) -> None:
        if self.inner is not None:
            await self.inner.on_llm_start(*args)

    async def on_llm_end(self, *args: Any) -> None:
        if self.inner is not None:
            await self.inner.on_llm_end(*args)

    async def on_agent_start(self, *args: Any) -> None:
        if self.inner is not None:
            await self.inner.on_agent_start(*args)

    async def on_agent_end(self, *args: Any) -> None:
        if self.inner is not None:
            await self.inner.on_agent_end(*args)

    async def on_handoff(self, *args: Any) -> None:
        if self.inner is not None:
            await self.inner.on_handoff(*args)


async def _complete(client: SignoffClient, gate: _Gate) -> None:
    """Record the outcome of a finished call. A failure to reach signoff is logged and
    retried once the run returns; the lease lapsing is the last resort (outcome_unknown)."""
    if gate.completed or gate.claim is None:
        return
    if gate.failed:
        outcome: Literal["succeeded", "failed"] = "failed"
        result = {"error": "the tool raised", **_output_json(gate.output)}
    else:
        outcome, result = "succeeded", _output_json(gate.output)
    try:
        await client.complete(gate.record.id, gate.claim.claim_token, outcome, result)
    except Exception:
        log.exception("approval %s: could not record the outcome yet", gate.record.id)
        return
    gate.completed = True


def _wrap_run_config(run_config: RunConfig | None, gates: Mapping[str, _Gate]) -> RunConfig:
    """Learn which approved calls raised: the SDK's default failure handler turns the
    exception into text for the model and asks `tool_error_formatter` for that text."""
    config = run_config or RunConfig()
    inner = config.tool_error_formatter

    async def formatter(args: ToolErrorFormatterArgs[Any]) -> str | None:
        gate = gates.get(args.call_id)
        if args.kind == "tool_exception" and gate is not None and gate.claim is not None:
            gate.failed = True
        if inner is None:
            return None
        message = inner(args)
        if inspect.isawaitable(message):
            message = await message
        return message

    return dataclasses.replace(config, tool_error_formatter=formatter)


async def _set_records(
    client: SignoffClient, trigger: ApprovalRecord, meta: Mapping[str, Any]
) -> tuple[dict[str, ApprovalRecord], list[str]]:
    """The approvals of the interruptions filed together with `trigger` (one model turn),
    newest per call id (an interrupted_side_effect follow-up carries its original's resume),
    and the call ids not filed (yet)."""
    call_ids = [str(c) for c in meta.get("call_ids") or [meta["call_id"]]]
    found: dict[str, ApprovalRecord] = {str(meta["call_id"]): trigger}
    if len(call_ids) > 1:
        cursor: str | None = None
        while True:
            page, cursor = await client.list(run_id=trigger.raw["run_id"], limit=500, cursor=cursor)
            for record in page:  # newest first
                other = _meta(record)
                if (
                    other is not None
                    and other.get("state_sha256") == meta.get("state_sha256")
                    and str(other.get("call_id")) in call_ids
                ):
                    found.setdefault(str(other["call_id"]), record)
            if cursor is None or len(found) == len(call_ids):
                break
    return found, [c for c in call_ids if c not in found]


async def _load_state(
    meta: Mapping[str, Any], state_store: StateStore | None, approval_id: str
) -> str:
    if "run_state" in meta:
        state = meta["run_state"]
    elif "state_key" in meta:
        if state_store is None:
            raise ValueError(
                f"approval {approval_id} keeps its run state in a state store: pass state_store"
            )
        state = await state_store.load(str(meta["state_key"]))
    else:
        raise ResumeRefused(f"approval {approval_id} carries no run state")
    if not isinstance(state, str) or hashlib.sha256(state.encode()).hexdigest() != meta.get(
        "state_sha256"
    ):
        raise ResumeRefused(
            f"approval {approval_id}: the stored run state is not the one that was filed"
        )
    return state


async def _refuse(client: SignoffClient, gates: Sequence[_Gate], message: str) -> None:
    """Release what this process claimed, withdraw the grants the paused run no longer
    matches (so nothing else claims them), and raise."""
    for gate in gates:
        if gate.claim is not None and not gate.started:
            with contextlib.suppress(SignoffError):
                await client.release(gate.record.id, gate.claim.claim_token)
            gate.claim = None
    for gate in gates:
        if gate.record.state in ("pending", "approved"):
            with contextlib.suppress(SignoffError):
                await client.supersede(gate.record.id, f"{_REFUSED}{message}"[:4000])
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
    **run_kwargs: Any,
) -> ResumeOutcome:
    """Continue the run an approval paused, once its decision (and those of the other
    interruptions of the same model turn) is known.

    Loads the stored RunState with `agent` (the same agent graph, tools included, as turn 1),
    checks every gated call in it still hashes to its approval's hash (else ResumeRefused,
    and the grants are superseded), claims the approved calls (losing a claim means another
    resumer has the run: `already_resumed`), approves or rejects each in the state (the
    rejection text, `rejection_message(record)`, is what the model reads), runs
    `Runner.run(agent, state, ...)`, and completes each claimed call with its tool's output.

    If the run raises, the exception propagates after the claims are settled: see
    `_after_failed_run`."""
    trigger = await client.get(approval_id)
    meta = _meta(trigger)
    if meta is None:
        raise ValueError(f"approval {approval_id} was not filed by signoff_client.openai_agents")
    if trigger.state == "pending":
        return ResumeOutcome("waiting", approval_id, detail="its decision is pending")
    note = str(trigger.raw.get("decision_note") or "")
    if trigger.state == "superseded" and note.startswith(_REFUSED):
        return ResumeOutcome("refused", approval_id, detail=note)
    if trigger.state in _TAKEN:
        return ResumeOutcome("already_resumed", approval_id, detail=f"it is {trigger.state}")

    records, missing = await _set_records(client, trigger, meta)
    if missing:
        return ResumeOutcome(
            "waiting", approval_id, detail=f"calls {missing} of this step are not filed yet"
        )
    pending = [r.id for r in records.values() if r.state == "pending"]
    if pending:
        return ResumeOutcome("waiting", approval_id, detail=f"still pending: {pending}")
    taken = [r.id for r in records.values() if r.state in _TAKEN]
    if taken:
        return ResumeOutcome("already_resumed", approval_id, detail=f"already claimed: {taken}")

    state_text = await _load_state(meta, state_store, approval_id)
    state = await RunState.from_string(
        agent,
        state_text,
        context_override=context_override,
        context_deserializer=context_deserializer,
    )
    interruptions = {str(item.call_id): item for item in state.get_interruptions()}
    if set(interruptions) != set(records):
        raise ResumeRefused(
            f"approval {approval_id}: the run state pauses at {sorted(interruptions)}, "
            f"not at the filed calls {sorted(records)}"
        )

    # Check every gated call before claiming anything: what the SDK would run must be what
    # the humans decided on, whatever the stored state says.
    gates: list[_Gate] = []
    for call_id in [str(c) for c in meta.get("call_ids") or [meta["call_id"]]]:
        item, record = interruptions[call_id], records[call_id]
        name, arguments = call_of(item)
        raw_type = getattr(item.raw_item, "type", None) or (
            item.raw_item.get("type") if isinstance(item.raw_item, dict) else None
        )
        gates.append(_Gate(item, record, name, arguments, is_function=raw_type == "function_call"))
    for gate in gates:
        record = gate.record
        paused = approval_hash(
            record.kind, record.capability, record.presentation, gate.name, gate.arguments
        )
        if paused != record.hash or record_hash(record) != record.hash:
            await _refuse(
                client,
                gates,
                f"approval {record.id}: the paused run would call {gate.name} with arguments "
                "that do not hash to what was approved",
            )

    message_for = rejection_message or _default_rejection
    for gate in gates:
        if gate.record.state in _CLOSED:
            gate.rejection = message_for(gate.record)
            continue
        try:
            gate.claim = await client.claim(gate.record.id, lease)
        except (ApprovalExpired, PolicyChanged):
            gate.record = await client.get(gate.record.id)
            gate.rejection = message_for(gate.record)
            continue
        except NotPending as exc:
            if exc.state in _TAKEN:  # another resumer has this run
                await _release_all(client, gates)
                return ResumeOutcome(
                    "already_resumed", approval_id, detail=f"{gate.record.id} is {exc.state}"
                )
            gate.record = await client.get(gate.record.id)
            if gate.record.state not in _CLOSED:
                await _release_all(client, gates)
                raise
            gate.rejection = message_for(gate.record)  # withdrawn since we looked
            continue
        except BaseException:  # ApprovalCorrupt, the network...: give back what we hold
            await _release_all(client, gates)
            raise
        claimed = gate.claim
        if claimed.approval.hash != gate.record.hash or canonical_json(claimed.tool) != (
            canonical_json({"name": gate.name, "arguments": gate.arguments})
        ):
            await _refuse(client, gates, f"approval {gate.record.id}: the claimed call differs")

    for gate in gates:
        if gate.claim is not None:
            state.approve(gate.item)
        else:
            state.reject(gate.item, rejection_message=gate.rejection)

    by_call = {gate.call_id: gate for gate in gates}
    keys = {g.call_id: g.claim.idempotency_key for g in gates if g.claim is not None}
    token = _IDEMPOTENCY_KEYS.set(keys)
    try:
        result = await Runner.run(
            agent,
            state,
            hooks=_GateHooks(client, by_call, hooks),
            run_config=_wrap_run_config(run_config, by_call),
            **run_kwargs,
        )
    except BaseException:
        await _after_failed_run(client, gates)
        raise
    finally:
        _IDEMPOTENCY_KEYS.reset(token)

    await _after_run(client, gates, result)
    return ResumeOutcome(
        "resumed",
        approval_id,
        calls=tuple(_report(gate) for gate in gates),
        result=result,
    )


async def _release_all(client: SignoffClient, gates: Sequence[_Gate]) -> None:
    """Hand back claims whose tool never started: approved again, nothing ran."""
    for gate in gates:
        if gate.claim is not None and not gate.started:
            try:
                await client.release(gate.record.id, gate.claim.claim_token)
            except SignoffError:
                log.exception("approval %s: could not release the claim", gate.record.id)
            gate.claim = None


async def _after_failed_run(client: SignoffClient, gates: Sequence[_Gate]) -> None:
    """The resumed run raised. Finished calls are completed. If nothing started, the claims
    are released: the stored state is still the truth, and the `released` webhook lets a
    later resume retry. If something did start, the state no longer is (it would run that
    call again), so the calls that never started are completed as not run. A call that
    started without finishing is left to its lease: it may have taken effect, so signoff
    raises an interrupted_side_effect approval and a human decides whether to run it again."""
    for gate in gates:
        if gate.claim is not None and gate.finished:
            await _complete(client, gate)
    if not any(gate.started or gate.finished for gate in gates if gate.claim is not None):
        await _release_all(client, gates)
        return
    for gate in gates:
        if gate.claim is None or gate.completed or gate.started:
            continue
        if gate.is_function:
            await _not_run(client, gate, "the resumed run failed before running the tool")
        # A hosted or shell tool may have started without a hook telling us: leave the
        # claim to lapse, and signoff asks a human whether to run it again.


async def _not_run(client: SignoffClient, gate: _Gate, why: str) -> None:
    assert gate.claim is not None
    try:
        await client.complete(
            gate.record.id, gate.claim.claim_token, "failed", {"ran": False, "error": why}
        )
        gate.completed = True
    except SignoffError:
        log.exception("approval %s: could not record the outcome", gate.record.id)


async def _after_run(client: SignoffClient, gates: Sequence[_Gate], result: Any) -> None:
    outputs: dict[str, Any] = {}
    for item in getattr(result, "new_items", []) or []:
        if getattr(item, "type", None) == "tool_call_output_item":
            raw = item.raw_item
            call_id = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
            outputs[str(call_id)] = item.output
    for gate in gates:
        if gate.claim is None or gate.completed:
            continue
        if not gate.finished and gate.call_id in outputs and not gate.is_function:
            # No hook for this kind of tool: its output item says it ran.
            gate.started = gate.finished = True
            gate.output = outputs[gate.call_id]
        if gate.finished:
            await _complete(client, gate)
            continue
        # The run went on without running the approved tool (a tool input guardrail
        # refused it, say). Record that as the outcome, so the grant is spent and a later
        # webhook does not continue the run a second time.
        await _not_run(client, gate, "the resumed run went on without running the tool")
    for gate in gates:
        if gate.claim is not None and gate.finished and not gate.completed:
            await _complete(client, gate)  # the retry of a completion the hook could not send


def _report(gate: _Gate) -> GatedCall:
    execution: Literal["not_started", "started", "finished"] = (
        "finished" if gate.finished else "started" if gate.started else "not_started"
    )
    outcome: Literal["succeeded", "failed"] | None = None
    if gate.finished:
        outcome = "failed" if gate.failed else "succeeded"
    return GatedCall(
        approval_id=gate.record.id,
        call_id=gate.call_id,
        tool={"name": gate.name, "arguments": gate.arguments},
        decision="approved" if gate.claim is not None else gate.record.state,
        execution=execution,
        outcome=outcome,
        output=gate.output,
        message=gate.rejection,
    )


async def resume_from_webhook(
    client: SignoffClient,
    agent: Agent[Any],
    headers: Mapping[str, str],
    body: bytes,
    secret: str | Sequence[str],
    **options: Any,
) -> ResumeOutcome:
    """Verify a decision webhook (headers and raw body as received; BadWebhookSignature if it
    does not verify) and `resume` the run of its approval (`options` as for `resume`).

    Webhooks for approvals this adapter did not file come back `ignored`. A redelivery, or
    a second resumer, of an approved call comes back `already_resumed` and runs nothing. A
    run whose calls were all rejected has nothing to claim, so a redelivered webhook would
    continue it again: dedupe on `outcome.delivery_id` if that matters to you."""
    delivery_id = verify_webhook(headers, body, secret)
    event = json.loads(body)
    approval = event.get("approval") or {}
    approval_id = str(approval.get("id"))
    resume_field = approval.get("resume")
    if not isinstance(resume_field, dict) or MARKER not in resume_field:
        return ResumeOutcome("ignored", approval_id, delivery_id=delivery_id)
    outcome = await resume(client, agent, approval_id, **options)
    return dataclasses.replace(outcome, delivery_id=delivery_id)


def idempotency_key(context: Any) -> str | None:
    """For a gated function tool (declared with a `ctx: RunContextWrapper` first parameter):
    the idempotency key of the claim it runs under, to pass to the effect's API (Stripe's
    Idempotency-Key) so a re-run after an unknown outcome cannot apply twice. None outside a
    resume."""
    call_id = getattr(context, "tool_call_id", None)
    keys = _IDEMPOTENCY_KEYS.get()
    return keys.get(call_id) if keys and call_id else None
