"""The gateway's own `ask_human` tool (off unless the policy's `[gateway] ask_human` turns it
on): the model asks a person a question, with a few options or for a reply in words, and
gets the answer back as the tool's result.

It is a signoff question (kind "question"), routed by the policy's `ask_human` capability
like any approval. Its run id is derived from the question, as a gated call's is from the
call, so asking the same question again (from any session, after a restart) finds the same
request: the model asks, is told a person has not answered yet, and asks again later.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import mcp_types as types

from signoff_client.errors import NotCanonical
from signoff_client.mcp.definition import run_id_for
from signoff_client.mcp.results import approval_meta, error

if TYPE_CHECKING:
    from signoff_client.client import ApprovalRecord
    from signoff_client.mcp.gateway import Gateway

__all__ = ["ASK_HUMAN", "ask_human", "ask_human_tool"]

ASK_HUMAN = "ask_human"
# The server's bounds on a question (bot/intake.py): 2-5 options of 1-80 characters.
_MAX_OPTIONS, _MAX_OPTION, _MAX_TITLE = 5, 80, 300


def ask_human_tool() -> types.Tool:
    """The tool as the gateway lists it beside the upstream's."""
    return types.Tool(
        name=ASK_HUMAN,
        title="Ask a person",
        description=(
            "Ask a person a question and get their answer (through signoff). Give `options` "
            "(2-5 short choices) for them to pick one, or leave them out for a reply in "
            "words. The first call usually says the question is waiting: nobody has "
            "answered yet. Tell the user, and later call again with exactly the same "
            "arguments to read the answer; asking again files no second question."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "question": {"type": "string", "minLength": 1, "maxLength": _MAX_TITLE},
                "options": {
                    "type": "array",
                    "items": {"type": "string", "minLength": 1, "maxLength": _MAX_OPTION},
                    "minItems": 2,
                    "maxItems": _MAX_OPTIONS,
                },
                "context": {"type": "string", "description": "why you ask (shown to them)"},
            },
            "required": ["question"],
            "additionalProperties": False,
        },
    )


def _problem(arguments: dict[str, Any]) -> str | None:
    question, options = arguments.get("question"), arguments.get("options")
    extra = sorted(set(arguments) - {"question", "options", "context"})
    if extra:
        return f"unknown argument(s) {extra}: give `question`, and optionally `options`"
    if not isinstance(question, str) or not question.strip() or len(question) > _MAX_TITLE:
        return f"`question` must be a non-empty string of at most {_MAX_TITLE} characters"
    if options is not None and (
        not isinstance(options, list)
        or not 2 <= len(options) <= _MAX_OPTIONS
        or not all(isinstance(o, str) and 1 <= len(o) <= _MAX_OPTION for o in options)
        or len(set(options)) < len(options)
    ):
        return (
            f"`options` must be 2-{_MAX_OPTIONS} different strings of 1-{_MAX_OPTION} "
            "characters, or left out for a reply in words"
        )
    context = arguments.get("context")
    if context is not None and not isinstance(context, str):
        return "`context` must be a string"
    return None


async def ask_human(gateway: Gateway, arguments: dict[str, Any]) -> types.CallToolResult:
    """Ask (or find) the question and answer from its state; never raises for signoff."""
    problem = _problem(arguments)
    if problem is not None:
        return error(f"Not asked: {problem}.")
    assert gateway.policy.ask_human is not None
    try:
        run_id = run_id_for(gateway.policy.server, ASK_HUMAN, arguments, gateway.run_scope)
    except NotCanonical as exc:
        return error(f"Not asked: the arguments are not plain JSON ({exc}).")
    body: dict[str, Any] = {}
    if gateway.policy.requested_by:
        body["requested_by"] = gateway.policy.requested_by
    if gateway.policy.approvers:
        body["approvers"] = list(gateway.policy.approvers)
    if gateway.policy.approval_ttl:
        body["approval_ttl"] = gateway.policy.approval_ttl
    if arguments.get("context"):
        body["reason"] = str(arguments["context"])[:4000]
    record = await gateway.signoff.ask(
        arguments["question"],
        arguments.get("options"),
        capability=gateway.policy.ask_human,
        run_id=run_id,
        **body,
    )
    if record.state == "pending" and gateway.wait > 0:
        record = await gateway.signoff.wait(record.id, gateway.wait, first=0.25, most=2.0)
    return _answer(record)


def _answer(record: ApprovalRecord) -> types.CallToolResult:
    meta = approval_meta(record)
    if record.answered:
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=record.answer_text or "")],
            is_error=False,
            structured_content={"answer": record.answer_text, "answered_by": record.decided_by},
            _meta={"signoff/approval": meta},
        )
    if record.state == "pending":
        return error(
            "Waiting for a person's answer: nobody has answered yet.\n"
            f"Question: {record.id} (capability {record.capability}), asked of "
            f"{record.assignee}, open until {record.expires_at or 'no deadline'}.\n"
            "Tell the user you are waiting; later call ask_human again with exactly the same "
            "arguments to read the answer (no second question is filed).",
            meta=meta,
        )
    note = record.raw.get("decision_note")
    return error(
        f"No answer: the question was {record.state}"
        + (f" ({note})" if note else "")
        + ". Asking again with the same arguments will not reopen it; change the wording "
        "to ask anew.",
        meta=meta,
    )
