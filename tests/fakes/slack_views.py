"""What the fake Slack checks of a view (tests/fakes/slack.py), as Slack refuses it: a
modal's title, buttons, blocks, private_metadata and inputs past Slack's documented limits
(https://api.slack.com/reference/surfaces/views, .../block-kit/blocks#input,
.../block-kit/block-elements#input), and what a view_submission's response may say
(https://api.slack.com/surfaces/modals#updating_response): `errors` only for input blocks
the view has, `update` with a view that passes the same checks."""

from __future__ import annotations

from typing import Any

_TEXT_LIMITS = {"title": 24, "submit": 24, "close": 24}


def _text(node: Any) -> str:
    return node.get("text", "") if isinstance(node, dict) else ""


def problems(view: dict[str, Any]) -> list[str]:
    """Why Slack would refuse `view` (views.open, views.update, response_action update)."""
    found: list[str] = []
    if view.get("type") == "modal":
        for name, limit in _TEXT_LIMITS.items():
            node = view.get(name)
            if name == "title" and not node:
                found.append("a modal needs a title [json-pointer:/view/title]")
            if node is not None and (node.get("type") != "plain_text" or len(_text(node)) > limit):
                found.append(f"must be plain_text of at most {limit} characters [/view/{name}]")
        if len(str(view.get("private_metadata", ""))) > 3000:
            found.append("private_metadata is longer than 3000 characters")
    blocks = view.get("blocks") or []
    if len(blocks) > 100:
        found.append("no more than 100 items allowed [json-pointer:/view/blocks]")
    ids = [b.get("block_id") for b in blocks if b.get("block_id")]
    if len(ids) != len(set(ids)):
        found.append("block_id values must be unique")
    inputs = [b for b in blocks if b.get("type") == "input"]
    if inputs and view.get("type") == "modal" and not view.get("submit"):
        found.append("a modal with inputs needs a submit button")
    for block in blocks:
        if len(str(block.get("block_id", ""))) > 255:
            found.append("block_id is longer than 255 characters")
        if block.get("type") == "input":
            found += _input(block)
        for element in block.get("elements") or []:
            if element.get("type") == "button" and len(_text(element.get("text"))) > 75:
                found.append("a button's text is longer than 75 characters")
        if block.get("type") == "section" and len(_text(block.get("text"))) > 3000:
            found.append("a section's text is longer than 3000 characters")
    return found


def _input(block: dict[str, Any]) -> list[str]:
    found = []
    if len(_text(block.get("label"))) > 2000:
        found.append("an input's label is longer than 2000 characters")
    element = block.get("element") or {}
    if element.get("type") == "plain_text_input":
        limit = element.get("max_length", 3000)
        if limit > 3000:
            found.append("a plain_text_input's max_length is at most 3000")
        initial = element.get("initial_value")
        if initial is not None and (not initial or len(initial) > limit):
            found.append("an initial_value must be 1 to max_length characters")
    elif element.get("type") == "multi_static_select":
        options = element.get("options") or []
        if not 1 <= len(options) <= 100:
            found.append("a multi_static_select has 1 to 100 options")
        for option in options:
            if len(_text(option.get("text"))) > 75 or len(str(option.get("value"))) > 150:
                found.append("an option's text (75) or value (150) is too long")
    return found


def submitted_state(view: dict[str, Any], filled: dict[str, Any]) -> dict[str, Any]:
    """The `state.values` Slack submits for `view`: every input block, holding its initial
    value unless `filled` gives the block's new one (a str for a text input, None for one
    emptied, a list of option values for a multi-select)."""
    values: dict[str, Any] = {}
    for block in view.get("blocks") or []:
        if block.get("type") != "input":
            continue
        element = block["element"]
        block_id, action_id = block["block_id"], element["action_id"]
        if element["type"] == "multi_static_select":
            chosen = filled.get(block_id, [])
            options = [o for o in element["options"] if o["value"] in chosen]
            state = {"type": "multi_static_select", "selected_options": options}
        else:
            text = filled.get(block_id, element.get("initial_value"))
            state = {"type": "plain_text_input", "value": text or None}
        values[block_id] = {action_id: state}
    return values


def response_problems(view: dict[str, Any], answer: dict[str, Any]) -> list[str]:
    """Why Slack would not show a view_submission's response to `view`."""
    action = answer.get("response_action")
    if action == "errors":
        inputs = {b.get("block_id") for b in view.get("blocks") or [] if b.get("type") == "input"}
        errors = answer.get("errors") or {}
        return [
            f"errors for {key!r}, which is no input block" for key in errors if key not in inputs
        ]
    if action in ("update", "push"):
        return problems(answer.get("view") or {})
    return []
