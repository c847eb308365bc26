"""Approve as edited in Slack: the editor modal, reading it back, and the confirmation.

Edit… on a card opens a modal with one input per argument the route lets approvers change,
each keeping its JSON type as the web page's editor does (channels.web.edits: a string is
text, a number, a boolean, an object, an array or null is JSON that must read back as the
same type); the keys the route locks are shown, not editable. Its submission is judged by
bot.edits (route, input_schema, something changed) and answered in the modal: field errors
where a field is wrong, else the confirmation, which shows every changed, added and removed
key (key: before → after) and the edited call's short hash. Only that view's submit decides
(Operator.approve_edited), with the full hash of the call shown and of the revision, carried
in its private_metadata with the keys changed (the rest of the call is the one shown, which
the shown hash pins).

Slack's limits: 100 blocks a view, 3,000 characters of private_metadata and of one input. A
call with more arguments than fit, or a longer value, is edited on the web page or with
`signoff approvals approve --set`; the modal says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from bot.canonical import short_hash
from bot.edits import Revision
from bot.routing import Route
from bot.visible import visible
from channels.web.edits import field_text, field_type
from store.records import Approval

EDIT_MODAL = "signoff_edit_modal"
CONFIRM_MODAL = "signoff_edit_confirm_modal"
VALUE = "value"  # every input's action id
REMOVE_BLOCK, NEW_KEY_BLOCK, NEW_VALUE_BLOCK = "remove", "new_key", "new_value"
NOTE_BLOCK = "note"
MAX_INPUT = 3000  # a plain_text_input's longest value
MAX_METADATA = 3000  # private_metadata
MAX_ARGUMENTS = 40  # with the notes around them, well inside a view's 100 blocks
_TYPE_WORDS = {
    "string": "text",
    "number": "a number",
    "boolean": "true or false",
    "json": "JSON",
}
ELSEWHERE = "edit it on the web page or with `signoff approvals approve --set KEY=VALUE`"


def _plain(text: str, limit: int = 2000) -> dict[str, Any]:
    text = visible(text)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return {"type": "plain_text", "text": text or " ", "emoji": False}


def block_id(index: int) -> str:
    """An argument's input: by its place among the sorted keys (a key is the agent's text,
    and a block id has limits of its own); the shown hash pins the keys."""
    return f"arg_{index}"


def keys_of(row: Approval) -> list[str]:
    return sorted(row.tool_args or {})


def _editable(route: Route, key: str, value: Any) -> bool:
    return route.edit_refusal([key]) is None and len(field_text(value)) <= MAX_INPUT


def _adds(route: Route, row: Approval) -> bool:
    return route.edits == "any" or bool(set(route.edits) - set(row.tool_args or {}))


def too_big(row: Approval) -> str | None:
    """Why this call cannot be edited in a Slack modal (None: it can)."""
    if len(row.tool_args or {}) > MAX_ARGUMENTS:
        return f"This call has more arguments than a Slack modal holds; {ELSEWHERE}."
    return None


def edit_modal(row: Approval, route: Route, metadata: str) -> dict[str, Any]:
    """The editor: an input per editable argument, a picker of arguments to remove, and a key
    and value to add where the route allows adding one."""
    blocks: list[dict[str, Any]] = [
        {
            "type": "section",
            "text": _plain(
                f"The tool ({row.tool_name}) and the capability stay as they are. Next you "
                "see every change and the edited call's hash, and approve that."
            ),
        }
    ]
    removable = []
    for index, key in enumerate(keys_of(row)):
        value = (row.tool_args or {})[key]
        kind = field_type(value)
        if not _editable(route, key, value):
            why = (
                "too long to edit in Slack"
                if route.edit_refusal([key]) is None
                else "the route does not let approvers change it"
            )
            line = f"{key} = {field_text(value)}"
            blocks.append({"type": "context", "elements": [_plain(f"{line[:1500]} ({why})", 2000)]})
            continue
        text = field_text(value)
        element: dict[str, Any] = {
            "type": "plain_text_input",
            "action_id": VALUE,
            "max_length": MAX_INPUT,
            "multiline": kind == "json" or "\n" in text or len(text) > 80,
        }
        if text:
            element["initial_value"] = text
        blocks.append(
            {
                "type": "input",
                "block_id": block_id(index),
                "optional": True,
                "label": _plain(key, 2000),
                "hint": _plain(_TYPE_WORDS[kind]),
                "element": element,
            }
        )
        removable.append({"text": _plain(key, 75), "value": str(index)})
    if removable:
        blocks.append(
            {
                "type": "input",
                "block_id": REMOVE_BLOCK,
                "optional": True,
                "label": _plain("Remove these arguments"),
                "element": {
                    "type": "multi_static_select",
                    "action_id": VALUE,
                    "options": removable,
                },
            }
        )
    if _adds(route, row):
        for block, label, hint in (
            (NEW_KEY_BLOCK, "Add an argument: its key", "Optional."),
            (NEW_VALUE_BLOCK, "Its value", 'JSON where it is JSON: 120 is a number, "120" text.'),
        ):
            blocks.append(
                {
                    "type": "input",
                    "block_id": block,
                    "optional": True,
                    "label": _plain(label),
                    "hint": _plain(hint),
                    "element": {
                        "type": "plain_text_input",
                        "action_id": VALUE,
                        "max_length": MAX_INPUT,
                    },
                }
            )
    return {
        "type": "modal",
        "callback_id": EDIT_MODAL,
        "private_metadata": metadata,
        "title": _plain("Edit, then approve", 24),
        "submit": _plain("Review the edit", 24),
        "close": _plain("Cancel", 24),
        "blocks": blocks,
    }


def has_inputs(view: dict[str, Any]) -> bool:
    return any(block.get("type") == "input" for block in view["blocks"])


@dataclass(frozen=True, slots=True)
class Read:
    """The editor read back: the arguments, or what is wrong, by block."""

    arguments: dict[str, Any]
    errors: dict[str, str]


def read_edit(row: Approval, route: Route, values: dict[str, Any]) -> Read:
    """The arguments the editor posted (a locked key, and one too long for an input, keep
    their values); each field's mistake against its block."""
    original = row.tool_args or {}
    keys = keys_of(row)
    removed = {
        keys[int(o["value"])]
        for o in _value(values, REMOVE_BLOCK, "selected_options") or []
        if str(o.get("value", "")).isdigit() and int(o["value"]) < len(keys)
    }
    arguments: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for index, key in enumerate(keys):
        value = original[key]
        if not _editable(route, key, value):
            arguments[key] = value
            continue
        if key in removed:
            continue
        if block_id(index) not in values:  # not posted: Slack posts every input it showed
            arguments[key] = value
            continue
        text = _value(values, block_id(index), "value") or ""  # null: the field was emptied
        try:
            arguments[key] = read_field(field_type(value), text)
        except ValueError as error:
            errors[block_id(index)] = str(error)
    new_key = (_value(values, NEW_KEY_BLOCK, "value") or "").strip()
    if new_key:
        if new_key in original:
            errors[NEW_KEY_BLOCK] = f"{new_key} is already an argument: change it in its own field"
        else:
            text = _value(values, NEW_VALUE_BLOCK, "value") or ""
            try:
                arguments[new_key] = json.loads(text)
            except ValueError:
                arguments[new_key] = text
    return Read(arguments, errors)


def read_field(kind: str, text: str) -> Any:
    """A field's text as the JSON type it showed; ValueError in words otherwise."""
    if kind == "string":
        return text
    if kind == "boolean":
        if text.strip() not in ("true", "false"):
            raise ValueError("Expected true or false (this argument is a boolean).")
        return text.strip() == "true"
    try:
        value = json.loads(text)
    except ValueError:
        if kind == "number":
            raise ValueError("Expected a number (this argument is a number).") from None
        raise ValueError("Expected JSON (this argument is an object, an array or null).") from None
    if kind == "number" and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise ValueError("Expected a number (this argument is a number).")
    return value


def error_block(row: Approval, view: dict[str, Any], field: str | None) -> str:
    """The input a refusal is shown under: the argument it names, else the first input."""
    inputs = [b["block_id"] for b in view["blocks"] if b.get("type") == "input"]
    keys = keys_of(row)
    if field is not None:
        for index, key in enumerate(keys):
            if (field == key or field.startswith(f"{key}.")) and block_id(index) in inputs:
                return block_id(index)
        if NEW_KEY_BLOCK in inputs and field not in keys:
            return NEW_KEY_BLOCK
    return inputs[0]


def delta(row: Approval, revision: Revision) -> dict[str, Any]:
    """The keys the revision sets and removes: the rest is the call shown."""
    after = revision.arguments
    return {
        "set": {c.key: after[c.key] for c in revision.changes if c.key in after},
        "unset": [c.key for c in revision.changes if c.key not in after],
    }


def applied(arguments: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """The call shown with a confirmation's changes: what the person confirmed."""
    result = dict(arguments)
    for key in changes.get("unset") or []:
        result.pop(str(key), None)
    result.update(changes.get("set") or {})
    return result


def confirm_view(row: Approval, revision: Revision, metadata: str) -> dict[str, Any]:
    """What the person approves: every change against the call shown, the edited hash."""
    title = visible((row.presentation or {}).get("title") or row.capability)
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": _plain(f"Approve as edited: {title}", 3000)},
        {
            "type": "context",
            "elements": [_plain(f"Your changes (the agent asked for {short_hash(row.hash)}):")],
        },
    ]
    for change in revision.changes:
        kept = change.record()
        before = field_text(kept["before"]) if "before" in kept else ""
        after = field_text(kept["after"]) if "after" in kept else ""
        words = {
            "changed": f"{before} → {after}",
            "added": f"added: {after}",
            "removed": f"removed (was {before})",
        }[change.kind]
        blocks.append({"type": "section", "text": _plain(f"{change.key}: {words}", 3000)})
    blocks.append(
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": f"Edited hash: `{short_hash(revision.hash)}`"},
        }
    )
    blocks.append(
        {
            "type": "input",
            "block_id": NOTE_BLOCK,
            "optional": True,
            "label": _plain("Note (kept in the audit trail and sent to the agent)"),
            "element": {
                "type": "plain_text_input",
                "action_id": VALUE,
                "multiline": True,
                "max_length": 2000,
            },
        }
    )
    return {
        "type": "modal",
        "callback_id": CONFIRM_MODAL,
        "private_metadata": metadata,
        "title": _plain("Approve as edited", 24),
        "submit": _plain("Approve as edited", 24),
        "close": _plain("Cancel", 24),
        "blocks": blocks,
    }


def _value(values: dict[str, Any], block: str, key: str) -> Any:
    return (values.get(block) or {}).get(VALUE, {}).get(key)
