"""The approval card as Slack Block Kit.

Everything the agent chose (title, summary, field labels and values, tool name, arguments,
reason, requester, notes) goes into `plain_text` objects, which Slack never parses: no
`<!channel>`, `<@U…>` mention, `<https://…|link>` or `*bold*` in them becomes markup. Where
text must be `mrkdwn` (our own labels with a name in them, the notification fallback), it is
escaped for Slack (`&`, `<`, `>`). Limits: header 150 characters, plain_text 2,000, at most
ten fields per section.
"""

from __future__ import annotations

import json
from typing import Any

from bot.model import Card, State

APPROVE = "signoff_approve"
REJECT = "signoff_reject"
REJECT_MODAL = "signoff_reject_modal"
REASON_BLOCK = "reason"
REASON_INPUT = "reason"
_MAX_FIELDS = 30  # three sections of ten; with the rest, far below Slack's 50 blocks

_OUTCOME = {
    State.APPROVED: ":white_check_mark: *Approved*",
    State.REJECTED: ":no_entry: *Rejected*",
    State.EXPIRED: ":hourglass: *Expired*",
    State.CANCELLED: ":heavy_multiplication_x: *Cancelled*",
    State.SUPERSEDED: ":arrows_counterclockwise: *Superseded*",
    State.EXECUTING: ":gear: *Approved, executing*",
    State.EXECUTED: ":white_check_mark: *Approved and executed*",
    State.FAILED: ":warning: *Approved; execution failed*",
    State.OUTCOME_UNKNOWN: ":grey_question: *Approved; execution outcome unknown*",
}


def escape(text: str) -> str:
    """Slack's mrkdwn escaping: the three characters that start markup."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _plain(text: str, limit: int = 2000) -> dict[str, Any]:
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return {"type": "plain_text", "text": text or " ", "emoji": False}


def _mrkdwn(text: str) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": text}


def button_value(card: Card) -> str:
    """What a button carries: the approval id and the full hash the card shows."""
    return f"{card.approval_id}:{card.hash}"


def parse_button_value(value: str) -> tuple[str, str] | None:
    approval_id, sep, shown_hash = value.partition(":")
    if not sep or not approval_id or len(shown_hash) != 64:
        return None
    return approval_id, shown_hash


def fallback_text(card: Card) -> str:
    """The notification text (mrkdwn-parsed by Slack, hence escaped)."""
    return escape(f"Approval requested: {card.title}"[:300])


def blocks(card: Card) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = [
        {"type": "header", "text": _plain(card.title, 150)},
        {
            "type": "section",
            "fields": [
                _plain(f"Capability: {card.capability}"),
                _plain(f"Tool: {card.tool_name}"),
            ],
        },
    ]
    if card.summary:
        result.append({"type": "section", "text": _plain(card.summary)})
    # Slack allows 50 blocks a message: show the first fields, say how many more there are.
    fields = [_plain(f"{label}: {value}") for label, value in card.fields[:_MAX_FIELDS]]
    for start in range(0, len(fields), 10):
        result.append({"type": "section", "fields": fields[start : start + 10]})
    if len(card.fields) > _MAX_FIELDS:
        hidden = len(card.fields) - _MAX_FIELDS
        result.append({"type": "context", "elements": [_plain(f"… and {hidden} more fields")]})
    if card.arguments:
        lines = "\n".join(f"{key} = {value}" for key, value in card.arguments)
        result.append({"type": "section", "text": _plain(f"Arguments\n{lines}")})
    if card.reason:
        result.append(
            {
                "type": "section",
                "text": _plain(f"Reason (from the agent, unverified): {card.reason}"),
            }
        )
    people = [
        _plain(f"Requested by {card.requested_by or 'unknown'}"),
        _plain(f"Assigned to {card.assignee}"),
    ]
    if card.expires_in is not None:
        people.append(
            _plain(f"Expires in {card.expires_in} ({card.expires_at:%Y-%m-%d %H:%M} UTC)")
        )
    result.append({"type": "context", "elements": people})
    result.append({"type": "context", "elements": [_mrkdwn(f"`{card.short_hash}`")]})
    if card.state == State.PENDING and not card.overdue:
        result.append(
            {
                "type": "actions",
                "block_id": "signoff_decision",
                "elements": [
                    {
                        "type": "button",
                        "action_id": APPROVE,
                        "style": "primary",
                        "text": _plain("Approve"),
                        "value": button_value(card),
                    },
                    {
                        "type": "button",
                        "action_id": REJECT,
                        "style": "danger",
                        "text": _plain("Reject"),
                        "value": button_value(card),
                    },
                ],
            }
        )
    elif card.state != State.PENDING:
        result += _outcome(card)
    return result


def _outcome(card: Card) -> list[dict[str, Any]]:
    line = _OUTCOME.get(State(card.state), f"*{card.state}*")
    if card.decided_by:
        line += f" by {escape(card.decided_by)}"
    if card.decided_at:
        line += f" at {card.decided_at:%Y-%m-%d %H:%M} UTC"
    out: list[dict[str, Any]] = [{"type": "section", "text": _mrkdwn(line)}]
    if card.decision_note:
        out.append({"type": "context", "elements": [_plain(f"Note: {card.decision_note}")]})
    return out


def reject_modal(approval_id: str, shown_hash: str, channel_id: str) -> dict[str, Any]:
    """The modal asking for an optional reason; the decision's inputs travel in
    private_metadata (Slack returns it untouched with the submission)."""
    meta = json.dumps({"id": approval_id, "hash": shown_hash, "channel": channel_id})
    return {
        "type": "modal",
        "callback_id": REJECT_MODAL,
        "private_metadata": meta,
        "title": _plain("Reject request"),
        "submit": _plain("Reject"),
        "close": _plain("Cancel"),
        "blocks": [
            {
                "type": "input",
                "block_id": REASON_BLOCK,
                "optional": True,
                "label": _plain("Reason (shown on the card and sent to the agent)"),
                "element": {
                    "type": "plain_text_input",
                    "action_id": REASON_INPUT,
                    "multiline": True,
                    "max_length": 2000,
                },
            }
        ],
    }
