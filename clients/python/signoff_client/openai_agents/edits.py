"""Calls approved as edited, in a resumed run: the SDK runs the call the model produced (it
refuses a call id whose arguments change), so the approver's revision is handed to the tool
here, at its invocation, and the model is told in the tool's output that its call was
replaced and how.

`run_edited` wraps a FunctionTool's `on_invoke_tool` once: outside a resume that has edits
(a context variable), the wrapper calls the tool exactly as before. Also where a gated
tool's argument schema is found, to send with the request as its `input_schema`."""

from __future__ import annotations

import contextvars
import inspect
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agents import FunctionTool
from agents.items import ToolApprovalItem

__all__ = ["Edit", "edits_in_run", "input_schema_of", "run_edited"]

_WRAPPED = "__signoff_edits__"


@dataclass(eq=False)
class Edit:
    """The revision to run for one call id, the note for the model, and what the tool
    itself returned (recorded with signoff without the note)."""

    arguments: dict[str, Any]
    note: str
    ran: bool = False
    output: Any = None


# call id -> its Edit, while a resumed run executes calls approved as edited.
edits_in_run: contextvars.ContextVar[Mapping[str, Edit] | None] = contextvars.ContextVar(
    "signoff_openai_agents_edits", default=None
)


def _function_tool(item: ToolApprovalItem) -> FunctionTool | None:
    agent = getattr(item, "agent", None)
    for tool in getattr(agent, "tools", None) or ():
        if isinstance(tool, FunctionTool) and tool.name in (item.tool_name, item.name):
            return tool
    return None


def input_schema_of(item: ToolApprovalItem) -> dict[str, Any] | None:
    """The gated function tool's JSON Schema of its arguments (`params_json_schema`), which
    signoff checks an approver's edit against; None for other tools."""
    tool = _function_tool(item)
    schema = getattr(tool, "params_json_schema", None)
    return dict(schema) if isinstance(schema, Mapping) else None


def run_edited(item: ToolApprovalItem) -> bool:
    """Make the interruption's function tool run a revision when one is set for its call
    id; False if it is not a function tool of the agent (its call cannot be edited here)."""
    tool = _function_tool(item)
    if tool is None:
        return False
    if getattr(tool.on_invoke_tool, _WRAPPED, False):
        return True
    original = tool.on_invoke_tool

    async def invoke(ctx: Any, arguments: str) -> Any:
        edits = edits_in_run.get() or {}
        edit = edits.get(str(getattr(ctx, "tool_call_id", "")))
        if edit is None:
            result = original(ctx, arguments)
            return await result if inspect.isawaitable(result) else result
        result = original(ctx, json.dumps(edit.arguments, ensure_ascii=False))
        output = await result if inspect.isawaitable(result) else result
        edit.ran, edit.output = True, output
        return f"{edit.note}\n\nTool output: {output}"

    setattr(invoke, _WRAPPED, True)
    tool.on_invoke_tool = invoke
    return True
