"""Turn 1: each interruption of a run that stopped for approvals becomes one signoff request,
carrying the call as signoff hashes it and where the paused run's state is; and, on resume,
reading back what was filed (`filed_meta`, `filed_together`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agents.items import ToolApprovalItem

from signoff_client.client import ApprovalRecord, SignoffClient
from signoff_client.lifecycle import resume_meta
from signoff_client.openai_agents.edits import input_schema_of
from signoff_client.openai_agents.run_state import StateStore, save_state

__all__ = [
    "FORMAT",
    "MARKER",
    "Capability",
    "Presentation",
    "call_of",
    "default_presentation",
    "file_interruptions",
    "filed_meta",
    "filed_together",
]

# The key under `resume` that marks an approval as filed by this adapter.
MARKER = "openai_agents"
FORMAT = 1
_RESERVED = frozenset(
    {"run_id", "capability", "tool", "presentation", "resume", "kind", "step", "input_schema"}
)

Capability = str | Mapping[str, str] | Callable[[ToolApprovalItem], str]
Presentation = Callable[[ToolApprovalItem, dict[str, Any]], Mapping[str, Any]]


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


def filed_meta(record: ApprovalRecord) -> Mapping[str, Any] | None:
    """What this adapter filed in the approval's `resume` field, or None if it did not file
    it (or filed it in a format this version does not read)."""
    meta = resume_meta(record.raw, MARKER)
    if meta is None or meta.get("format") != FORMAT:
        return None
    return meta


async def filed_together(
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
                other = filed_meta(record)
                if (
                    other is not None
                    and other.get("state_sha256") == meta.get("state_sha256")
                    and str(other.get("call_id")) in call_ids
                ):
                    found.setdefault(str(other["call_id"]), record)
            if cursor is None or len(found) == len(call_ids):
                break
    return found, [c for c in call_ids if c not in found]


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
    saved = await save_state(result, state_store, context_serializer)
    call_ids = [str(item.call_id) for item in interruptions]
    if None in (item.call_id for item in interruptions) or len(set(call_ids)) != len(call_ids):
        raise ValueError("every interruption needs its own call id to be filed")

    records = []
    for item, call_id in zip(interruptions, call_ids, strict=True):
        name, arguments = call_of(item)
        shown = dict((presentation or default_presentation)(item, arguments))
        meta = {"format": FORMAT, "call_id": call_id, "call_ids": call_ids, **saved}
        body: dict[str, Any] = {
            "run_id": run_id,
            "capability": _capability_for(capability, item, name),
            "tool": {"name": name, "arguments": arguments},
            "presentation": shown,
            "resume": {MARKER: meta},
            **request_fields,
        }
        schema = input_schema_of(item)
        if schema is not None:  # what signoff checks an approver's edit against
            body["input_schema"] = schema
        why = reason(item, arguments) if callable(reason) else reason
        if why is not None:
            body["reason"] = why
        if requested_by is not None:
            body["requested_by"] = requested_by
        record = await client.request(**body)
        filed = filed_meta(record)
        if filed is None or (filed.get("call_id"), filed.get("state_sha256")) != (
            call_id,
            saved["state_sha256"],
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
