"""In the node: `signoff_interrupt` files the request for a call and pauses the graph with
`interrupt()`; on resume it returns the `Decision` the resume helper sent."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from langgraph.config import get_config
from langgraph.types import interrupt

from signoff_client.client import ApprovalRecord
from signoff_client.errors import NotPending
from signoff_client.langgraph.decision import Decision, node_call
from signoff_client.langgraph.gate import SignoffGate
from signoff_client.langgraph.pause import pause_run_id
from signoff_client.langgraph.runner import run_sync

__all__ = ["KEY", "MARKER", "asignoff_interrupt", "signoff_interrupt"]

log = logging.getLogger("signoff_client.langgraph")

# The key of the interrupt payload and of the resume value (a resume value without it was not
# sent by the resume helpers), and where a node finds the gate in config["configurable"].
KEY = "signoff"
# The key under the request's `resume` field that marks it as filed by this adapter; it holds
# the thread id, which is how a webhook finds its thread.
MARKER = "langgraph"
_UNSET: Any = object()


def signoff_interrupt(
    *,
    tool: Mapping[str, Any],
    capability: str,
    presentation: Mapping[str, Any],
    reason: str | None = None,
    requested_by: str | None = None,
    approvers: list[str] | None = None,
    approval_ttl: str | None = None,
    grant_ttl: str | None = None,
    required_approvals: int | None = None,
    preconditions: Any = None,
    callback_url: str | None = None,
    run_id: str | None = None,
    step: Any = _UNSET,
    gate: SignoffGate | None = None,
    input_schema: Any = None,
) -> Decision:
    """Inside a sync node: file a signoff request for `tool` and pause the graph until the
    decision; on resume, return the `Decision`. The request's fields are the create body's
    (see the reference). `run_id` defaults to one naming this pause (the thread, the node,
    the superstep and which signoff_interrupt of the node this is), so the node's re-run on
    resume, and a retry of a run that failed before its pause was saved, find the request
    already filed instead of filing another; `step` defaults to `{"langgraph_node": <node>}`.

    `input_schema`: the JSON Schema of the tool's arguments, which signoff checks an
    approver's edit against: a dict, a Pydantic model class, or a LangChain tool (its args
    schema). An approver may approve the call as edited where the route allows it: the
    Decision then carries the revision, which `run` runs, and `decision.message` for the
    model."""
    context = _Context.current(gate)
    body = context.body(
        tool, capability, presentation, run_id, step,
        reason=reason, requested_by=requested_by, approvers=approvers,
        approval_ttl=approval_ttl, grant_ttl=grant_ttl, required_approvals=required_approvals,
        preconditions=preconditions, callback_url=callback_url,
        input_schema=json_schema_of(input_schema),
    )  # fmt: skip
    record = run_sync(lambda: _file(context.gate, body))
    value = interrupt(_payload(record, body, context))
    decision, stray = _decision(value, record, context.gate)
    if stray is not None:
        run_sync(lambda: _withdraw(context.gate, stray, decision))
    return decision


async def asignoff_interrupt(
    *,
    tool: Mapping[str, Any],
    capability: str,
    presentation: Mapping[str, Any],
    reason: str | None = None,
    requested_by: str | None = None,
    approvers: list[str] | None = None,
    approval_ttl: str | None = None,
    grant_ttl: str | None = None,
    required_approvals: int | None = None,
    preconditions: Any = None,
    callback_url: str | None = None,
    run_id: str | None = None,
    step: Any = _UNSET,
    gate: SignoffGate | None = None,
    input_schema: Any = None,
) -> Decision:
    """`signoff_interrupt` for async nodes."""
    context = _Context.current(gate)
    body = context.body(
        tool, capability, presentation, run_id, step,
        reason=reason, requested_by=requested_by, approvers=approvers,
        approval_ttl=approval_ttl, grant_ttl=grant_ttl, required_approvals=required_approvals,
        preconditions=preconditions, callback_url=callback_url,
        input_schema=json_schema_of(input_schema),
    )  # fmt: skip
    record = await _file(context.gate, body)
    value = interrupt(_payload(record, body, context))
    decision, stray = _decision(value, record, context.gate)
    if stray is not None:
        await _withdraw(context.gate, stray, decision)
    return decision


@dataclass(frozen=True)
class _Context:
    gate: SignoffGate
    thread_id: str
    pause: str
    node: str | None

    @classmethod
    def current(cls, gate: SignoffGate | None) -> _Context:
        try:
            config = get_config()
        except RuntimeError:
            raise RuntimeError(
                "signoff_interrupt must be called inside a LangGraph node: it pauses the graph "
                "with interrupt()"
            ) from None
        configurable = config.get("configurable") or {}
        thread_id = configurable.get("thread_id")
        if thread_id is None:
            raise ValueError(
                "signoff_interrupt needs a checkpointer and a thread: compile the graph with "
                'a checkpointer and invoke it with config={"configurable": {"thread_id": ...}}'
            )
        if gate is None:
            gate = configurable.get(KEY)
            if gate is not None and not isinstance(gate, SignoffGate):
                raise TypeError(
                    f'config["configurable"]["{KEY}"] must be a SignoffGate, not '
                    f"{type(gate).__name__} (a string there would be copied to the checkpoint)"
                )
        metadata = config.get("metadata") or {}
        return cls(
            gate=gate or SignoffGate.from_env(),
            thread_id=str(thread_id),
            # Counted on every call, run_id given or not, so the calls after it keep their
            # places in the node.
            pause=pause_run_id(str(thread_id), configurable, metadata),
            node=metadata.get("langgraph_node"),
        )

    def body(
        self,
        tool: Mapping[str, Any],
        capability: str,
        presentation: Mapping[str, Any],
        run_id: str | None,
        step: Any,
        **optional: Any,
    ) -> dict[str, Any]:
        if not isinstance(tool, Mapping) or not isinstance(tool.get("name"), str):
            raise TypeError('tool must be {"name": str, "arguments": {...}}')
        arguments = tool.get("arguments", {})
        if not isinstance(arguments, Mapping):
            raise TypeError(f"tool arguments must be a JSON object, not {type(arguments).__name__}")
        if not isinstance(presentation, Mapping) or not presentation.get("title"):
            raise TypeError('presentation must be {"title": str, ...}')
        body: dict[str, Any] = {
            "run_id": run_id or self.pause,
            "capability": capability,
            "tool": {"name": tool["name"], "arguments": dict(arguments)},
            "presentation": dict(presentation),
            "resume": {MARKER: {"thread_id": self.thread_id, "node": self.node}},
        }
        if step is _UNSET:
            step = {"langgraph_node": self.node} if self.node else None
        if step is not None:
            body["step"] = step
        body.update({k: v for k, v in optional.items() if v is not None})
        return body


def json_schema_of(source: Any) -> dict[str, Any] | None:
    """The JSON Schema of a tool's arguments from a dict, a Pydantic model class, or a
    LangChain tool (the schema its model is shown, `tool_call_schema`, else `args_schema`)."""
    if source is None or isinstance(source, Mapping):
        return None if source is None else dict(source)
    for attribute in ("tool_call_schema", "args_schema"):
        schema = getattr(source, attribute, None)
        if schema is not None:
            return json_schema_of(schema)
    if hasattr(source, "model_json_schema"):
        return dict(source.model_json_schema())
    raise TypeError(
        "input_schema must be a JSON Schema (dict), a Pydantic model class or a LangChain tool"
    )


async def _file(gate: SignoffGate, body: dict[str, Any]) -> ApprovalRecord:
    """Create the request, or find it: signoff answers the same (run, call) with the request
    it already has, whatever its state, so a re-run of the node files nothing new."""
    async with gate.client() as client:
        return await client.request(**body)


def _payload(record: ApprovalRecord, body: dict[str, Any], context: _Context) -> dict[str, Any]:
    """What the paused graph shows its caller (`__interrupt__`): which approval it waits for."""
    return {
        KEY: {
            "approval_id": record.id,
            "hash": record.hash,
            "state": record.state,
            "run_id": body["run_id"],
            "thread_id": context.thread_id,
            "capability": record.capability,
            "tool": record.tool,
            "title": (record.presentation or {}).get("title"),
            "expires_at": record.expires_at,
        }
    }


def _decision(
    value: Any, record: ApprovalRecord, gate: SignoffGate
) -> tuple[Decision, ApprovalRecord | None]:
    """The Decision a resume value carries, and the request this execution of the node filed
    if it is not the one decided (then it asked for a different call than before: that stray
    request is withdrawn, and the decided call is what may run)."""
    answer = value.get(KEY) if isinstance(value, Mapping) else None
    if not isinstance(answer, Mapping) or "approval_id" not in answer:
        raise ValueError(
            "this interrupt was resumed with a value signoff's resume helpers did not send "
            f"({value!r}); resume it with resume or resume_from_webhook"
        )
    decision = Decision(
        approved=bool(answer.get("approved")),
        state=str(answer.get("state")),
        approval_id=str(answer["approval_id"]),
        hash=str(answer.get("hash")),
        tool=answer.get("tool"),
        idempotency_key=answer.get("idempotency_key"),
        decided_by=answer.get("decided_by"),
        note=answer.get("note"),
        origin_id=answer.get("origin_id"),
        edited=bool(answer.get("edited")),
        original_hash=answer.get("original_hash"),
        original_arguments=answer.get("original_arguments"),
        answer=answer.get("answer"),
        _claim_token=answer.get("claim_token"),
        _gate=gate,
    )
    if decision.approved and decision._claim_token:
        node_call(decision.approval_id, decision._claim_token).delivered = True
    stray = None if record.id in (decision.approval_id, decision.origin_id) else record
    return decision, stray


async def _withdraw(gate: SignoffGate, stray: ApprovalRecord, decision: Decision) -> None:
    log.warning(
        "on resume the node asked for a different call than approval %s (%s): withdrawing "
        "the new request; only the decided call may run",
        decision.approval_id,
        stray.id,
    )
    if stray.state in ("pending", "approved"):
        async with gate.client() as client:
            try:
                await client.cancel(
                    stray.id,
                    f"the node asked for this call again after approval {decision.approval_id} "
                    "was decided; that decision stands",
                )
            except NotPending:
                pass
