"""The gated calls of a resumed run: what each is (`PausedCall`), watching the approved ones
run (`ClaimHooks`, `watch_failures`), settling their claims once the run returns or raises,
and what is reported of each (`GatedCall`)."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import inspect
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agents import RunConfig, RunHooks
from agents.items import ToolApprovalItem
from agents.run_config import ToolErrorFormatterArgs

from signoff_client.client import ApprovalRecord, SignoffClient
from signoff_client.errors import NotCanonical
from signoff_client.hashing import canonical_json
from signoff_client.lifecycle import RESULT_LIMIT, ClaimedCall, Outcome
from signoff_client.openai_agents.edits import Edit

__all__ = [
    "ClaimHooks",
    "GatedCall",
    "PausedCall",
    "after_failed_run",
    "after_run",
    "idempotency_key",
    "idempotency_keys",
    "release_unstarted",
    "watch_failures",
]

log = logging.getLogger("signoff_client.openai_agents")

# `complete` takes a result of up to 16 KiB canonical JSON; keep a margin for the wrapper.
_OUTPUT_LIMIT = RESULT_LIMIT - 256

# call id -> the claim's idempotency key, while a resumed run executes its approved calls.
idempotency_keys: contextvars.ContextVar[Mapping[str, str | None] | None] = contextvars.ContextVar(
    "signoff_openai_agents_idempotency_keys", default=None
)


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
    # Approved as edited: `tool` is the revision that ran, `asked` the call the model made.
    edited: bool = False
    asked: dict[str, Any] | None = None
    # Answered instead of run (decision "answered"): the person's words, which the model
    # read as the tool's result (`message`).
    answer: str | None = None


@dataclass(eq=False)
class PausedCall:
    """One gated call the paused run stopped at, while it is resumed: its interruption, its
    approval, the claim this process holds on it (None if it was not approved, or was handed
    back), the rejection text the model reads otherwise, and what the tool did."""

    item: ToolApprovalItem
    record: ApprovalRecord
    name: str
    arguments: dict[str, Any]
    is_function: bool = True
    claim: ClaimedCall | None = None
    rejection: str | None = None
    failed: bool = False  # the tool raised; the SDK's handler made its error text for the model
    output: Any = None
    edit: Edit | None = None  # approved as edited: the revision the tool runs instead

    @property
    def call_id(self) -> str:
        return str(self.item.call_id)

    @property
    def started(self) -> bool:
        return self.claim is not None and self.claim.started

    @property
    def finished(self) -> bool:
        """The tool returned (its outcome may not be recorded yet)."""
        return self.claim is not None and self.claim.outcome is not None

    def outcome(self) -> tuple[Outcome, Any]:
        """The outcome and result to record for the tool's output."""
        if self.failed:
            return "failed", {"error": "the tool raised", **_output_json(self.output)}
        return "succeeded", _output_json(self.output)

    async def returned(self, client: SignoffClient, output: Any) -> None:
        """The tool returned `output`: record it at once, before the model is called again.
        A failure to reach signoff is logged and retried once the run returns; the lease
        lapsing is the last resort (outcome_unknown)."""
        assert self.claim is not None
        if self.edit is not None and self.edit.ran:
            output = self.edit.output  # the tool's own, without the note for the model
        self.output = output
        await self.claim.record(client, *self.outcome())

    def report(self) -> GatedCall:
        execution: Literal["not_started", "started", "finished"] = (
            "finished" if self.finished else "started" if self.started else "not_started"
        )
        outcome: Literal["succeeded", "failed"] | None = None
        if self.finished:
            outcome = "failed" if self.failed else "succeeded"
        asked = {"name": self.name, "arguments": self.arguments}
        ran = asked if self.edit is None else {"name": self.name, "arguments": self.edit.arguments}
        return GatedCall(
            approval_id=self.record.id,
            call_id=self.call_id,
            tool=ran,
            decision="approved" if self.claim is not None else self.record.state,
            execution=execution,
            outcome=outcome,
            output=self.output,
            message=self.rejection,
            edited=self.edit is not None,
            asked=asked if self.edit is not None else None,
            answer=self.record.answer_text if self.record.answered else None,
        )


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
    if size <= _OUTPUT_LIMIT:
        return {"output": doc}
    text = doc if isinstance(doc, str) else json.dumps(doc, ensure_ascii=False)
    cut = _OUTPUT_LIMIT // 2
    while len(canonical_json(text[:cut])) > _OUTPUT_LIMIT - 64:
        cut //= 2
    return {"output_truncated": text[:cut], "output_chars": len(text)}


class ClaimHooks(RunHooks[Any]):
    """Watches the approved calls run: marks them started, and completes each in signoff as
    soon as its tool returns (before the model is called again). Forwards every callback to
    the caller's hooks."""

    def __init__(
        self, client: SignoffClient, calls: Mapping[str, PausedCall], inner: RunHooks[Any] | None
    ) -> None:
        self.client = client
        self.calls = calls
        self.inner = inner

    def _claimed(self, context: Any) -> PausedCall | None:
        call = self.calls.get(getattr(context, "tool_call_id", None) or "")
        return call if call is not None and call.claim is not None else None

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        if self.inner is not None:  # first: if the caller's hook raises, the tool never starts
            await self.inner.on_tool_start(context, agent, tool)
        call = self._claimed(context)
        if call is not None:
            assert call.claim is not None
            call.claim.started = True

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: object) -> None:
        call = self._claimed(context)
        if call is not None:
            await call.returned(self.client, result)
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


def watch_failures(run_config: RunConfig | None, calls: Mapping[str, PausedCall]) -> RunConfig:
    """Learn which approved calls raised: the SDK's default failure handler turns the
    exception into text for the model and asks `tool_error_formatter` for that text."""
    config = run_config or RunConfig()
    inner = config.tool_error_formatter

    async def formatter(args: ToolErrorFormatterArgs[Any]) -> str | None:
        call = calls.get(args.call_id)
        if args.kind == "tool_exception" and call is not None and call.claim is not None:
            call.failed = True
        if inner is None:
            return None
        message = inner(args)
        if inspect.isawaitable(message):
            message = await message
        return message

    return dataclasses.replace(config, tool_error_formatter=formatter)


async def release_unstarted(client: SignoffClient, calls: Sequence[PausedCall]) -> None:
    """Hand back claims whose tool never started: approved again, nothing ran."""
    for call in calls:
        if call.claim is not None and not call.started:
            await call.claim.release(client)
            call.claim = None


async def after_failed_run(client: SignoffClient, calls: Sequence[PausedCall]) -> None:
    """The resumed run raised. Finished calls are completed. If nothing started, the claims
    are released: the stored state is still the truth, and the `released` webhook lets a
    later resume retry. If something did start, the state no longer is (it would run that
    call again), so the calls that never started are completed as not run. A call that
    started without finishing is left to its lease: it may have taken effect, so signoff
    raises an interrupted_side_effect approval and a human decides whether to run it again."""
    for call in calls:
        if call.claim is not None and call.finished:
            await call.claim.resend(client)
    if not any(call.started or call.finished for call in calls if call.claim is not None):
        await release_unstarted(client, calls)
        return
    for call in calls:
        if call.claim is None or call.claim.recorded or call.started:
            continue
        if call.is_function:
            await call.claim.record_not_run(
                client, "the resumed run failed before running the tool"
            )
        # A hosted or shell tool may have started without a hook telling us: leave the
        # claim to lapse, and signoff asks a human whether to run it again.


async def after_run(client: SignoffClient, calls: Sequence[PausedCall], result: Any) -> None:
    """The resumed run returned: record every claimed call's outcome, including the tools no
    hook reports (their output items say they ran) and the calls the run went on without."""
    outputs: dict[str, Any] = {}
    for item in getattr(result, "new_items", []) or []:
        if getattr(item, "type", None) == "tool_call_output_item":
            raw = item.raw_item
            call_id = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
            outputs[str(call_id)] = item.output
    for call in calls:
        if call.claim is None or call.claim.recorded:
            continue
        if not call.finished and call.call_id in outputs and not call.is_function:
            # No hook for this kind of tool: its output item says it ran.
            await call.returned(client, outputs[call.call_id])
            continue
        if call.finished:
            await call.claim.resend(client)
            continue
        # The run went on without running the approved tool (a tool input guardrail
        # refused it, say). Record that as the outcome, so the grant is spent and a later
        # webhook does not continue the run a second time.
        await call.claim.record_not_run(client, "the resumed run went on without running the tool")
    for call in calls:
        if call.claim is not None and call.finished:
            await call.claim.resend(client)  # the retry of a completion the hook could not send


def idempotency_key(context: Any) -> str | None:
    """For a gated function tool (declared with a `ctx: RunContextWrapper` first parameter):
    the idempotency key of the claim it runs under, to pass to the effect's API (Stripe's
    Idempotency-Key) so a re-run after an unknown outcome cannot apply twice. None outside a
    resume."""
    call_id = getattr(context, "tool_call_id", None)
    keys = idempotency_keys.get()
    return keys.get(call_id) if keys and call_id else None
