"""`Decision`: what a node receives about the call it asked for, and how it runs the approved
call once through the shared lifecycle (signoff_client.lifecycle)."""

from __future__ import annotations

import inspect
import json
import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from signoff_client.client import Claim, SignoffClient
from signoff_client.errors import NotCanonical, NotPending
from signoff_client.hashing import canonical_json
from signoff_client.langgraph.errors import CallMismatch, ClaimLost, GatedCallFailed, NotApproved
from signoff_client.langgraph.runner import run_sync
from signoff_client.lifecycle import (
    RESULT_LIMIT,
    ClaimedCall,
    Outcome,
    claim_mismatch,
    hold,
    recorded_outcome,
)
from signoff_client.telling import replaced_message

if TYPE_CHECKING:
    from signoff_client.client import ApprovalRecord
    from signoff_client.langgraph.gate import SignoffGate

__all__ = ["Decision"]

log = logging.getLogger("signoff_client.langgraph")

T = TypeVar("T")


# --- Claimed calls in this process ---------------------------------------------------------


@dataclass(eq=False)
class NodeCall(ClaimedCall):
    """A claimed call, and whether a node received its decision."""

    delivered: bool = False


# Keyed by claim token. A node and the resume helper that resumed it run in one process, so
# the helper learns here whether the call started; a re-run of the node in this process learns
# that it must not start it again even if signoff has not heard the outcome.
_CALLS: dict[str, NodeCall] = {}
_CALLS_LOCK = threading.Lock()


def node_call(approval_id: str, claim_token: str) -> NodeCall:
    """The claimed call this process knows under `claim_token` (a new one if none)."""
    with _CALLS_LOCK:
        return _CALLS.setdefault(claim_token, NodeCall(approval_id, claim_token))


def known_call(claim_token: str) -> NodeCall | None:
    with _CALLS_LOCK:
        return _CALLS.get(claim_token)


def forget_call(claim_token: str) -> None:
    with _CALLS_LOCK:
        _CALLS.pop(claim_token, None)


# --- The decision a node receives ---------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """What the human decided about the call a node asked for.

    `approved` is True when the call was approved and claimed for this thread: execute
    `tool` (the stored call, which hashes to what the human approved, not the node's local
    arguments) with `run(fn)`/`arun(fn)`, which also record the outcome. Otherwise `state`
    says why not (rejected, expired, cancelled, superseded, answered) and `note` carries the
    decider's note or the reason; the call never ran.

    `edited`: an approver changed the arguments before approving; `tool` is their revision
    (what `run` runs), `original_arguments` what the node asked for, and `message` tells the
    model its call was replaced and how: put it in the tool's result. `answered`: a person
    replied instead (`answer`), the call does not run, and `message` is the tool result to
    give the model in its place."""

    approved: bool
    state: str
    approval_id: str
    hash: str
    tool: dict[str, Any] | None = None
    idempotency_key: str | None = None
    decided_by: str | None = None
    note: str | None = None
    origin_id: str | None = None
    edited: bool = False
    original_hash: str | None = None
    original_arguments: dict[str, Any] | None = None
    answer: str | None = None
    _claim_token: str | None = field(default=None, repr=False, compare=False)
    _gate: SignoffGate | None = field(default=None, repr=False, compare=False)

    @property
    def answered(self) -> bool:
        return self.state == "answered"

    @property
    def message(self) -> str | None:
        """What the model should read about this decision besides the tool's own output:
        for an edited call, that its call was replaced (and how); for an answered one, the
        person's answer and that the tool did not run; else None."""
        if self.answered:
            name = (self.tool or {}).get("name") or "the tool"
            return (
                f"[signoff] The tool {name} did NOT run: {self.decided_by or 'a person'} "
                f"answered instead of approving the call. Their answer: {self.answer or ''}"
            )
        if self.edited and self.tool is not None:
            return replaced_message(
                str(self.tool.get("name")),
                self.original_arguments,
                self.tool.get("arguments"),
                self.decided_by,
            )
        return None

    def tool_result(self, output: Any = None) -> str:
        """The text to give the model as the tool's result: `output` (the tool's, when it
        ran) with `message` before it, or the message alone for an answered call."""
        if self.answered:
            return self.message or ""
        text = output if isinstance(output, str) else json.dumps(output, default=str)
        return f"{self.message}\n\nTool output: {text}" if self.message else text

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
        replay = run_sync(self._begin)
        if replay is not None:
            return _replayed(replay)
        try:
            result = fn(arguments)
        except Exception as exc:
            error = _error_json(exc)
            run_sync(lambda: self._finish("failed", error))
            raise
        recorded = _result_json(result)
        run_sync(lambda: self._finish("succeeded", recorded))
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
        self._ran_outside()
        run_sync(lambda: self._finish("succeeded", _result_json(result)))

    def fail(self, error: BaseException | str) -> None:
        """Record that you executed the call yourself and it failed."""
        self._ran_outside()
        run_sync(lambda: self._finish("failed", _error_json(error)))

    async def acomplete(self, result: Any = None) -> None:
        self._ran_outside()
        await self._finish("succeeded", _result_json(result))

    async def afail(self, error: BaseException | str) -> None:
        self._ran_outside()
        await self._finish("failed", _error_json(error))

    def _ran_outside(self) -> None:
        """The node ran the call itself: from now on it is started, never handed back."""
        self._approved_tool()
        node_call(self.approval_id, self._token()).started = True

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
        call = node_call(self.approval_id, token)
        if call.started:
            if call.unsent is not None:
                return call.unsent
            if call.recorded:
                async with self._client() as client:
                    return recorded_outcome(await client.get(self.approval_id))
            raise ClaimLost(
                f"the call of approval {self.approval_id} already started in this process "
                "and its outcome is unknown: it is not started again"
            )
        async with self._client() as client:
            held = await hold(client, self.approval_id, token)
            if held.status == "ran":
                assert held.record is not None
                return recorded_outcome(held.record)
            if held.status == "lost":
                raise ClaimLost(f"{held.why}; the call does not run")
            if held.status == "released":
                # An attempt that failed before the call started handed the grant back:
                # claim it again. One caller wins, as on the first claim.
                token = (await self._claim_again(client)).claim_token
                object.__setattr__(self, "_claim_token", token)
        call = node_call(self.approval_id, token)
        call.delivered = call.started = True
        return None

    async def _claim_again(self, client: SignoffClient) -> Claim:
        try:
            claim = await client.claim(self.approval_id)
        except NotPending as lost:
            raise ClaimLost(
                f"approval {self.approval_id} is {lost.state}; the call does not run"
            ) from lost
        asked = self.tool
        if self.edited and self.tool is not None:
            asked = {"name": self.tool.get("name"), "arguments": self.original_arguments}
        why = claim_mismatch(claim, asked)
        if why is not None:
            await refuse(client, claim, why)
            raise CallMismatch(why)
        return claim

    async def _finish(self, outcome: Outcome, result: Any) -> None:
        call = node_call(self.approval_id, self._token())
        async with self._client() as client:
            await call.record(client, outcome, result)


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
    if size > RESULT_LIMIT - 64:
        return {"truncated": True, "repr": repr(value)[:2000]}
    return value


def _error_json(error: BaseException | str) -> dict[str, str]:
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return {"error": text[:4000]}


# --- Refusing a claim ------------------------------------------------------------------------


async def refuse(client: SignoffClient, claim: Claim, why: str) -> ApprovalRecord:
    """Nothing runs: hand the claim back and withdraw the grant, saying why."""
    log.error("not running approval %s: %s", claim.approval.id, why)
    await client.release(claim.approval.id, claim.claim_token)
    try:
        return await client.cancel(claim.approval.id, why[:4000])
    except NotPending:
        return await client.get(claim.approval.id)
