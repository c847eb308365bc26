"""signoff for LangGraph: gate a tool call inside a node on a human decision that may come days
later, and run exactly the approved call, once.

In a node, call `signoff_interrupt(...)` where you would call `interrupt()`::

    def refund(state):
        decision = signoff_interrupt(
            tool={"name": "refund", "arguments": {"charge": state["charge"], "amount": 12000}},
            capability="payments.refund",
            presentation={"title": "Refund €120.00 to Zoë"},
        )
        if not decision.approved:
            return {"outcome": decision.state}          # rejected, expired, ...
        result = decision.run(lambda args: stripe_refund(**args, key=decision.idempotency_key))
        return {"outcome": "refunded", "refund": result}

The first time, it files a signoff request and pauses the graph (`interrupt()`); the process
may exit. When the decision webhook arrives, `resume_from_webhook(graph, headers, body, secret,
gate=gate)` (or `resume_thread(graph, approval_id, gate=gate)`) claims the approved call (one
resumer wins) and resumes the thread with `Command(resume=...)` carrying the decision.
LangGraph re-runs the node from its start: `signoff_interrupt` files again, which signoff
answers with the same request (same run, same call: nothing new is filed), and returns the
`Decision`. `decision.run(fn)` runs `fn` on the *stored* arguments (the claim's, not the
node's), then records the outcome with signoff; a later re-run of the node (a second
interrupt, a retry) finds the call finished and does not run it again.

Where the signoff URL and key come from: `gate=SignoffGate(...)`, else a `SignoffGate` in
`config["configurable"]["signoff"]` (an object, which LangGraph never writes to the
checkpoint; the resume helpers put theirs there), else SIGNOFF_URL and SIGNOFF_API_KEY. Never
put the API key as a string in `configurable`: LangGraph copies string values there into the
checkpoint's metadata.

Works with any checkpointer: the resume helpers use the graph's async API, or its sync API in a
worker thread when the checkpointer is sync-only (SqliteSaver). See docs/integrations.md.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import logging
import os
import threading
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import aiohttp
from langgraph.config import get_config
from langgraph.types import Command, interrupt

from signoff_client.client import ApprovalRecord, Claim, SignoffClient
from signoff_client.errors import (
    ClaimMismatch,
    LeaseExhausted,
    NotCanonical,
    NotPending,
    RequestTooLarge,
    SignoffError,
)
from signoff_client.hashing import approval_hash, canonical_json
from signoff_client.webhooks import verify_webhook

__all__ = [
    "CallMismatch",
    "ClaimLost",
    "Decision",
    "GatedCallFailed",
    "NotApproved",
    "ResumeResult",
    "SignoffGate",
    "asignoff_interrupt",
    "resume_from_webhook",
    "resume_thread",
    "signoff_interrupt",
]

log = logging.getLogger("signoff_client.langgraph")

T = TypeVar("T")

# The key of the interrupt payload and of the resume value: a resume value without it was not
# sent by these helpers.
KEY = "signoff"
# States in which the call never ran and never will: the thread resumes with that outcome.
CLOSED = frozenset({"rejected", "expired", "cancelled", "superseded"})
MAX_RESULT_BYTES = 16 * 1024  # the server's bound on a completion's result
_UNSET: Any = object()


class NotApproved(SignoffError):
    """The decision is not an approval: the call must not run."""

    code = "langgraph_not_approved"


class ClaimLost(SignoffError):
    """This run no longer holds the claim on the approved call (another caller holds it, or its
    lease ran out), so it does not run the call."""

    code = "langgraph_claim_lost"


class GatedCallFailed(SignoffError):
    """The gated call already ran, in an earlier execution of this node, and failed."""

    code = "langgraph_gated_call_failed"


class CallMismatch(SignoffError):
    """The claimed call is not the call the thread asked for, or does not hash to the hash
    the human approved."""

    code = "langgraph_claim_mismatch"


class SignoffGate:
    """Where signoff is, for the nodes and the resume helpers. Holds no connection: each
    operation opens a short-lived client, so a gate works from any thread and event loop
    (LangGraph runs sync nodes in worker threads)."""

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 30.0) -> None:
        if not base_url or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"SignoffGate needs an http(s) URL, got {base_url!r}")
        if not api_key:
            raise ValueError("SignoffGate needs the tenant's API key")
        self.base_url = base_url
        self._api_key = api_key
        self.timeout = timeout

    @classmethod
    def from_env(cls) -> SignoffGate:
        """The gate SIGNOFF_URL and SIGNOFF_API_KEY describe."""
        url, key = os.environ.get("SIGNOFF_URL"), os.environ.get("SIGNOFF_API_KEY")
        if not url or not key:
            raise RuntimeError(
                "no signoff gate: pass gate=SignoffGate(url, api_key), put one in "
                'config["configurable"]["signoff"], or set SIGNOFF_URL and SIGNOFF_API_KEY'
            )
        return cls(url, key)

    def __repr__(self) -> str:  # never the key
        return f"SignoffGate({self.base_url!r})"

    def client(self) -> SignoffClient:
        return SignoffClient(self.base_url, self._api_key, timeout=self.timeout)

    def interrupt(self, **request: Any) -> Decision:
        """`signoff_interrupt(..., gate=self)`."""
        return signoff_interrupt(**request, gate=self)

    async def ainterrupt(self, **request: Any) -> Decision:
        """`asignoff_interrupt(..., gate=self)`."""
        return await asignoff_interrupt(**request, gate=self)

    async def resume(self, graph: Any, approval_id: str, **options: Any) -> ResumeResult:
        """`resume_thread(graph, approval_id, gate=self, ...)`."""
        return await resume_thread(graph, approval_id, gate=self, **options)

    async def resume_webhook(
        self, graph: Any, headers: Mapping[str, str], body: bytes, secret: Any, **options: Any
    ) -> ResumeResult:
        """`resume_from_webhook(graph, headers, body, secret, gate=self, ...)`."""
        return await resume_from_webhook(graph, headers, body, secret, gate=self, **options)


# --- Progress of claimed calls in this process ------------------------------------------------


@dataclass
class _Progress:
    delivered: bool = False  # a node received the decision
    started: bool = False  # the call was handed to the tool (run/arun, complete/fail)
    finished: bool = False  # its outcome was recorded with signoff
    unsent: tuple[str, Any] | None = None  # an outcome signoff has not acknowledged yet


# Keyed by claim token. A node and the resume helper that resumed it run in one process, so
# the helper learns here whether the call started; a re-run of the node in this process learns
# that it must not start it again even if signoff has not heard the outcome.
_PROGRESS: dict[str, _Progress] = {}
_PROGRESS_LOCK = threading.Lock()


def _progress(token: str) -> _Progress:
    with _PROGRESS_LOCK:
        return _PROGRESS.setdefault(token, _Progress())


# --- The decision a node receives ---------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """What the human decided about the call a node asked for.

    `approved` is True when the call was approved and claimed for this thread: execute
    `tool` (the stored call, which hashes to what the human approved, not the node's local
    arguments) with `run(fn)`/`arun(fn)`, which also record the outcome. Otherwise `state`
    says why not (rejected, expired, cancelled, superseded) and `note` carries the decider's
    note or the reason; the call never ran."""

    approved: bool
    state: str
    approval_id: str
    hash: str
    tool: dict[str, Any] | None = None
    idempotency_key: str | None = None
    decided_by: str | None = None
    note: str | None = None
    origin_id: str | None = None
    _claim_token: str | None = field(default=None, repr=False, compare=False)
    _gate: SignoffGate | None = field(default=None, repr=False, compare=False)

    @property
    def arguments(self) -> dict[str, Any]:
        """The stored call's arguments; NotApproved unless approved."""
        return dict(self._approved_tool()["arguments"])

    def _approved_tool(self) -> dict[str, Any]:
        if not self.approved or self.tool is None:
            raise NotApproved(f"approval {self.approval_id} is {self.state}: nothing may run")
        return self.tool

    def run(self, fn: Callable[[dict[str, Any]], T]) -> T:
        """Run the approved call once: `fn(arguments)` on the stored arguments, then record
        its outcome (`fn`'s return value, kept when it is JSON, else its repr; or the
        exception, which is re-raised). If an earlier execution of this node already ran the
        call, `fn` is not called: the recorded result is returned (GatedCallFailed if it
        failed). ClaimLost if this thread no longer holds the claim."""
        arguments = self.arguments
        replay = _run_sync(self._begin)
        if replay is not None:
            return _replayed(replay)
        try:
            result = fn(arguments)
        except Exception as exc:
            error = _error_json(exc)
            _run_sync(lambda: self._finish("failed", error))
            raise
        recorded = _result_json(result)
        _run_sync(lambda: self._finish("succeeded", recorded))
        return result

    async def arun(self, fn: Callable[[dict[str, Any]], Awaitable[T] | T]) -> T:
        """`run` for async nodes; `fn` may be sync or async."""
        arguments = self.arguments
        replay = await self._begin()
        if replay is not None:
            return _replayed(replay)
        try:
            result = fn(arguments)
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:
            await self._finish("failed", _error_json(exc))
            raise
        await self._finish("succeeded", _result_json(result))
        return result  # type: ignore[return-value]

    def complete(self, result: Any = None) -> None:
        """Record that you executed the call yourself and it succeeded (`result`: JSON)."""
        self._approved_tool()
        _progress(self._token()).started = True
        _run_sync(lambda: self._finish("succeeded", _result_json(result)))

    def fail(self, error: BaseException | str) -> None:
        """Record that you executed the call yourself and it failed."""
        self._approved_tool()
        _progress(self._token()).started = True
        _run_sync(lambda: self._finish("failed", _error_json(error)))

    async def acomplete(self, result: Any = None) -> None:
        self._approved_tool()
        _progress(self._token()).started = True
        await self._finish("succeeded", _result_json(result))

    async def afail(self, error: BaseException | str) -> None:
        self._approved_tool()
        _progress(self._token()).started = True
        await self._finish("failed", _error_json(error))

    def _token(self) -> str:
        if self._claim_token is None:
            raise NotApproved(f"approval {self.approval_id} carries no claim")
        return self._claim_token

    def _client(self) -> SignoffClient:
        assert self._gate is not None
        return self._gate.client()

    async def _begin(self) -> tuple[str, Any] | None:
        """Make sure this run holds the claim right now (renewing its lease), or learn that
        the call already ran: then its (outcome, result), to replay instead of running."""
        token = self._token()
        progress = _progress(token)
        if progress.started:
            if progress.unsent is not None:
                return progress.unsent
            if progress.finished:
                async with self._client() as client:
                    return _outcome_of(await client.get(self.approval_id))
            raise ClaimLost(
                f"the call of approval {self.approval_id} already started in this process "
                "and its outcome is unknown: it is not started again"
            )
        async with self._client() as client:
            try:
                await client.renew(self.approval_id, token)
            except NotPending as exc:
                if exc.state in ("executed", "failed"):
                    return _outcome_of(await client.get(self.approval_id))
                if exc.state != "approved":
                    raise ClaimLost(
                        f"approval {self.approval_id} is {exc.state}; the call does not run"
                    ) from exc
                # The grant was handed back (an attempt that failed before the call released
                # it): claim it again. One caller wins, as on the first claim.
                try:
                    claim = await client.claim(self.approval_id)
                except NotPending as lost:
                    raise ClaimLost(
                        f"approval {self.approval_id} is {lost.state}; the call does not run"
                    ) from lost
                try:
                    _check_claim(claim, self.tool)
                except CallMismatch as mismatch:
                    await _refuse(client, claim, str(mismatch))
                    raise
                token = claim.claim_token
                object.__setattr__(self, "_claim_token", token)
            except (ClaimMismatch, LeaseExhausted) as exc:
                raise ClaimLost(
                    f"this thread no longer holds the claim on approval {self.approval_id}: "
                    f"{exc.message}; the call does not run"
                ) from exc
        progress = _progress(token)
        progress.delivered = progress.started = True
        return None

    async def _finish(self, outcome: Literal["succeeded", "failed"], result: Any) -> None:
        progress = _progress(self._token())
        progress.unsent = (outcome, result)
        if await _send_outcome(self._gate, self.approval_id, self._token(), outcome, result):
            progress.unsent = None
            progress.finished = True


def _outcome_of(record: ApprovalRecord) -> tuple[str, Any]:
    outcome = record.raw.get("outcome") or {}
    return str(outcome.get("status")), outcome.get("result")


def _replayed(done: tuple[str, Any]) -> Any:
    """The result of a call that already ran, instead of running it again."""
    status, result = done
    if status == "succeeded":
        return result
    raise GatedCallFailed(f"the gated call already ran and failed: {result!r}", result=result)


def _result_json(value: Any) -> Any:
    """`value` as the recorded result when it is JSON and fits; else a bounded stand-in."""
    try:
        size = len(canonical_json(value))
    except NotCanonical:
        return {"repr": repr(value)[:2000]}
    if size > MAX_RESULT_BYTES - 64:
        return {"truncated": True, "repr": repr(value)[:2000]}
    return value


def _error_json(error: BaseException | str) -> dict[str, str]:
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return {"error": text[:4000]}


async def _send_outcome(
    gate: SignoffGate | None,
    approval_id: str,
    token: str,
    outcome: Literal["succeeded", "failed"],
    result: Any,
) -> bool:
    """Record the outcome, retrying a lost answer (a completion is safe to repeat). Never
    raises for the network: the call ran, and the resume helper tries again after the graph
    returns; until then the row stays executing, and if nobody reports, its lease lapses to
    outcome_unknown and signoff asks a human."""
    assert gate is not None
    for attempt in range(3):
        try:
            async with gate.client() as client:
                try:
                    await client.complete(approval_id, token, outcome, result)
                except RequestTooLarge:
                    stand_in = {"truncated": True, "repr": repr(result)[:2000]}
                    await client.complete(approval_id, token, outcome, stand_in)
            return True
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("recording the outcome of %s failed (%s)", approval_id, exc)
            if attempt < 2:
                await asyncio.sleep(0.2 * 2**attempt)
        except SignoffError as exc:  # refused: retrying would not change the answer
            log.error("signoff refused the outcome of %s: %s", approval_id, exc)
            return False
    return False


# --- In the node -----------------------------------------------------------------------------


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
) -> Decision:
    """Inside a sync node: file a signoff request for `tool` and pause the graph until the
    decision; on resume, return the `Decision`. The request's fields are the create body's
    (see the reference). `run_id` defaults to one derived from the thread id and this node's
    task, so the node's re-run on resume finds its own request instead of filing a new one;
    `step` defaults to `{"langgraph_node": <node>}`."""
    context = _Context.current(gate)
    body = context.body(
        tool, capability, presentation, run_id, step,
        reason=reason, requested_by=requested_by, approvers=approvers,
        approval_ttl=approval_ttl, grant_ttl=grant_ttl, required_approvals=required_approvals,
        preconditions=preconditions, callback_url=callback_url,
    )  # fmt: skip
    record = _run_sync(lambda: _file(context.gate, body))
    value = interrupt(_payload(record, body, context))
    decision, stray = _decision(value, record, context.gate)
    if stray is not None:
        _run_sync(lambda: _withdraw(context.gate, stray, decision))
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
) -> Decision:
    """`signoff_interrupt` for async nodes."""
    context = _Context.current(gate)
    body = context.body(
        tool, capability, presentation, run_id, step,
        reason=reason, requested_by=requested_by, approvers=approvers,
        approval_ttl=approval_ttl, grant_ttl=grant_ttl, required_approvals=required_approvals,
        preconditions=preconditions, callback_url=callback_url,
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
    namespace: str
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
        return cls(
            gate=gate or SignoffGate.from_env(),
            thread_id=str(thread_id),
            namespace=str(configurable.get("checkpoint_ns") or ""),
            node=(config.get("metadata") or {}).get("langgraph_node"),
        )

    def run_id(self) -> str:
        """One run per node task of the thread: the task's namespace names the node and the
        superstep, and stays the same when LangGraph re-runs the task on resume. (A later
        visit of the same node is a new task: asking again for the same call there is a new
        request, not the old, finished one.)"""
        run_id = f"langgraph:{self.thread_id}:{self.namespace}"
        if len(run_id) > 256:
            digest = hashlib.sha256(f"{self.thread_id}\n{self.namespace}".encode()).hexdigest()
            run_id = f"langgraph:sha256:{digest}"
        return run_id

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
            "run_id": run_id or self.run_id(),
            "capability": capability,
            "tool": {"name": tool["name"], "arguments": dict(arguments)},
            "presentation": dict(presentation),
            "resume": {"langgraph": {"thread_id": self.thread_id, "node": self.node}},
        }
        if step is _UNSET:
            step = {"langgraph_node": self.node} if self.node else None
        if step is not None:
            body["step"] = step
        body.update({k: v for k, v in optional.items() if v is not None})
        return body


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
            f"({value!r}); resume it with resume_thread or resume_from_webhook"
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
        _claim_token=answer.get("claim_token"),
        _gate=gate,
    )
    if decision.approved and decision._claim_token:
        _progress(decision._claim_token).delivered = True
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


# --- Resuming ------------------------------------------------------------------------------


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
    `resume_thread` for its approval. Safe to call for every delivery, redeliveries included:
    only one caller claims an approved call, and a thread already resumed is not resumed
    again. `released` and `lease_lapsed` events are ignored (a released grant is retried by
    calling `resume_thread`; a lapsed one waits for the human's follow-up decision, whose own
    webhook resumes the thread)."""
    verify_webhook(headers, body, secret)
    event = json.loads(body)
    approval = event.get("approval") or {}
    approval_id = str(approval.get("id"))
    thread_id = _thread_of(approval)
    if thread_id is None or event.get("event") in ("released", "lease_lapsed"):
        return ResumeResult("ignored", approval_id, str(approval.get("state")), thread_id)
    return await resume_thread(graph, approval_id, gate=gate, config=config, lease=lease)


async def resume_thread(
    graph: Any,
    approval_id: str,
    *,
    gate: SignoffGate,
    config: Mapping[str, Any] | None = None,
    lease: str | None = None,
) -> ResumeResult:
    """Resume the thread paused on `approval_id` with its decision.

    Reads the approval; finds the thread (its id is stored with the request) and checks that
    the thread is paused on this approval. If approved: claims it (one resumer wins; the
    others get `taken`), checks the claimed call hashes to the approved hash, and resumes with
    the claim so the node runs exactly the stored call. If rejected, expired, cancelled or
    superseded: resumes with that outcome, claiming nothing. `config` adds to the run's
    config (the thread id comes from the approval; the gate is passed to the nodes as
    `configurable["signoff"]`); `lease` is the claim's lease (default the server's).

    If the graph raises before the call started, the claim is released (the call never ran)
    and the error propagates; call `resume_thread` again to retry."""
    async with gate.client() as client:
        record = await client.get(approval_id)
        thread_id = _thread_of(record.raw)
        if thread_id is None and record.origin_id:
            thread_id = _thread_of((await client.get(record.origin_id)).raw)
        if thread_id is None:
            raise ValueError(f"approval {approval_id} was not filed by signoff_interrupt")
        run_config = _run_config(config, thread_id, gate)
        runner = await _Runner.open(graph, run_config)
        waiting = runner.waiting_on({record.id, record.origin_id} - {None})
        if waiting is None:
            return ResumeResult("not_waiting", record.id, record.state, thread_id)
        interrupt_id, asked, failed_before = waiting
        if failed_before:
            # The node failed after it received its decision, which the checkpoint keeps:
            # run it again as it is (a released claim is claimed again by the node itself).
            output = await runner.invoke(None)
            if runner.still_waiting(await runner.refresh(), interrupt_id):
                return await resume_thread(
                    graph, approval_id, gate=gate, config=config, lease=lease
                )
            return ResumeResult("resumed", record.id, record.state, thread_id, output)
        claim: Claim | None = None
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
                try:
                    _check_claim(claim, asked.get("tool"))
                except CallMismatch as exc:
                    record = await _refuse(client, claim, str(exc))
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


def _thread_of(raw: Mapping[str, Any]) -> str | None:
    resume = raw.get("resume")
    if isinstance(resume, Mapping) and isinstance(resume.get("langgraph"), Mapping):
        thread_id = resume["langgraph"].get("thread_id")
        return None if thread_id is None else str(thread_id)
    return None


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


def _check_claim(claim: Claim, asked_tool: Any) -> None:
    """The call about to run must hash to what the human approved, and be the call this
    thread asked for."""
    approval = claim.approval
    name, arguments = claim.tool.get("name"), claim.tool.get("arguments")
    claimed = approval_hash(
        approval.kind, approval.capability, approval.presentation, name, arguments
    )
    if claimed != approval.hash:
        raise CallMismatch(
            f"the claimed call of approval {approval.id} does not hash to the approved hash"
        )
    if asked_tool is not None and canonical_json(claim.tool) != canonical_json(asked_tool):
        raise CallMismatch(
            f"approval {approval.id} holds a different call than the thread asked for"
        )


async def _refuse(client: SignoffClient, claim: Claim, why: str) -> ApprovalRecord:
    """Nothing runs: hand the claim back and withdraw the grant, saying why."""
    log.error("not running approval %s: %s", claim.approval.id, why)
    await client.release(claim.approval.id, claim.claim_token)
    try:
        return await client.cancel(claim.approval.id, why[:4000])
    except NotPending:
        return await client.get(claim.approval.id)


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
        }
    else:
        answer |= {"approved": False, "state": record.state}
    return {KEY: answer}


async def _after_run(gate: SignoffGate, claim: Claim, *, failed: bool) -> None:
    """After the graph returned or raised: send an outcome the node could not send; release a
    claim whose call never started when the graph failed (so the grant is not left executing
    until its lease lapses and a human is asked about a call that never ran)."""
    with _PROGRESS_LOCK:
        progress = _PROGRESS.get(claim.claim_token) or _Progress()
    if progress.unsent is not None:
        outcome, result = progress.unsent
        if await _send_outcome(gate, claim.approval.id, claim.claim_token, outcome, result):
            progress.unsent, progress.finished = None, True
    if not progress.started:
        if failed or not progress.delivered:
            async with gate.client() as client:
                try:
                    await client.release(claim.approval.id, claim.claim_token)
                except (NotPending, LeaseExhausted, ClaimMismatch) as exc:
                    log.warning("could not release approval %s: %s", claim.approval.id, exc)
        else:
            log.warning(
                "the node received approval %s but neither ran nor reported it; if it ran the "
                "call, report it with decision.complete()/fail(), else signoff will ask a human "
                "when the claim's lease lapses",
                claim.approval.id,
            )
    if progress.finished or not progress.started:
        with _PROGRESS_LOCK:
            _PROGRESS.pop(claim.claim_token, None)


class _Runner:
    """The graph on one thread, through its async API, or its sync API in a worker thread when
    the checkpointer has no async side (SqliteSaver)."""

    def __init__(self, graph: Any, config: dict[str, Any], sync: bool, snapshot: Any) -> None:
        self.graph, self.config, self.sync, self.snapshot = graph, config, sync, snapshot

    @classmethod
    async def open(cls, graph: Any, config: dict[str, Any]) -> _Runner:
        try:
            snapshot = await graph.aget_state(config)
            sync = False
        except NotImplementedError:
            snapshot = await asyncio.to_thread(graph.get_state, config)
            sync = True
        return cls(graph, config, sync, snapshot)

    async def refresh(self) -> Any:
        if self.sync:
            self.snapshot = await asyncio.to_thread(self.graph.get_state, self.config)
        else:
            self.snapshot = await self.graph.aget_state(self.config)
        return self.snapshot

    async def invoke(self, command: Any) -> Any:
        if self.sync:
            return await asyncio.to_thread(self.graph.invoke, command, self.config)
        return await self.graph.ainvoke(command, self.config)

    def waiting_on(self, approval_ids: set[str]) -> tuple[str, dict[str, Any], bool] | None:
        """(interrupt id, what it asked, whether its task failed) of the pending signoff
        interrupt for one of `approval_ids`, or None."""
        errors = {}
        for task in getattr(self.snapshot, "tasks", ()) or ():
            for pending in task.interrupts:
                errors[pending.id] = task.error is not None
        for pending in getattr(self.snapshot, "interrupts", ()) or ():
            asked = pending.value.get(KEY) if isinstance(pending.value, Mapping) else None
            if isinstance(asked, Mapping) and asked.get("approval_id") in approval_ids:
                return pending.id, dict(asked), errors.get(pending.id, False)
        return None

    @staticmethod
    def still_waiting(snapshot: Any, interrupt_id: str) -> bool:
        pending = getattr(snapshot, "interrupts", ()) or ()
        tasks = getattr(snapshot, "tasks", ()) or ()
        failed = any(
            t.error is not None for t in tasks for i in t.interrupts if i.id == interrupt_id
        )
        return any(i.id == interrupt_id for i in pending) and not failed


# --- Running coroutines from sync nodes ----------------------------------------------------------


def _run_sync(factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to completion from sync code. LangGraph runs sync nodes in worker
    threads without an event loop, where asyncio.run works; if this thread already runs a
    loop (a sync node called from async code), run it on a thread of its own instead."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(factory())
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(factory())
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=target, name="signoff-sync")
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
