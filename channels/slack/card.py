"""The approval card as Slack Block Kit.

Everything the agent chose (title, summary, field labels and values, tool name, arguments,
reason, requester, notes) goes into `plain_text` objects, which Slack never parses: no
`<!channel>`, `<@U…>` mention, `<https://…|link>` or `*bold*` in them becomes markup. Where
text must be `mrkdwn` (our own labels with a name in them, the notification fallback), it is
escaped for Slack (`&`, `<`, `>`). Both show invisible and reordering characters (bidi
controls, zero-width spaces) as escapes (bot/visible.py), like every surface. Limits: header
150 characters, plain_text 2,000, at most ten fields per section.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from bot.card import Card
from bot.card_sections import OPEN_IN_BROWSER, Kind, Line, Section, more
from bot.model import State
from bot.visible import visible

APPROVE = "signoff_approve"
REJECT = "signoff_reject"
DELEGATE = "signoff_delegate"
# Approve as edited (a modal editor, then a confirmation: channels.slack.edit), answer in
# words, and a question's options: one action id each (`signoff_option_0` ...), as Slack
# wants an action id once per block; the value is the card's, as on every button.
EDIT = "signoff_edit"
ANSWER = "signoff_answer"
OPTION = "signoff_option_"
OPTION_ACTION = re.compile(r"signoff_option_([0-9])")
# "Approve, and allow the same for …" (a modal: channels.slack.grants), where the route gives
# standing grants; and the App Home's Revoke of a grant (its value is the grant's id).
ALLOW = "signoff_allow"
REVOKE_GRANT = "signoff_grant_revoke"
REJECT_MODAL = "signoff_reject_modal"
DELEGATE_MODAL = "signoff_delegate_modal"
REASON_BLOCK = "reason"
REASON_INPUT = "reason"
DELEGATE_BLOCK = "delegate_to"
DELEGATE_INPUT = "delegate_to"
NOTE_BLOCK = "note"
NOTE_INPUT = "note"
_MAX_FIELDS = 30  # three sections of ten; with the rest, far below Slack's 50 blocks


def escape(text: str) -> str:
    """Slack's mrkdwn escaping: the three characters that start markup; and the characters
    bot.visible shows as escapes."""
    return visible(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _plain(text: str, limit: int = 2000) -> dict[str, Any]:
    text = visible(text)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return {"type": "plain_text", "text": text or " ", "emoji": False}


def _mrkdwn(text: str) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": text}


def button_value(card: Card) -> str:
    """What a button carries: the approval id and the full hash the card shows."""
    return f"{card.approval_id}:{card.hash}"


_VALUE = re.compile(r"([0-9a-f-]{36}):([0-9a-f]{64})")


def parse_button_value(value: str) -> tuple[str, str] | None:
    """(approval id, full hash) from a button value; None for anything signoff did not make."""
    match = _VALUE.fullmatch(value)
    return (match.group(1), match.group(2)) if match else None


def _approve_button(card: Card) -> dict[str, Any]:
    """Approve; on a route with `confirm = true`, Slack first asks in a dialog naming the
    request and its hash, and only "Approve" there sends the click."""
    button: dict[str, Any] = {
        "type": "button",
        "action_id": APPROVE,
        "style": "primary",
        "text": _plain("Approve"),
        "value": button_value(card),
    }
    if card.confirm:
        title = card.title if len(card.title) <= 200 else card.title[:199] + "…"
        button["confirm"] = {
            "title": _plain("Approve this request?", 100),
            "text": _plain(f"Approve “{title}” (hash {card.short_hash})?", 300),
            "confirm": _plain("Approve", 30),
            "deny": _plain("Cancel", 30),
            "style": "primary",
        }
    return button


def fallback_text(card: Card) -> str:
    """The notification text (mrkdwn-parsed by Slack, hence escaped)."""
    what = "requested" if card.state == State.PENDING else card.state.replace("_", " ")
    if card.question:
        what = "asked" if card.state == State.PENDING else what
        return escape(f"Question {what}: {card.title}"[:300])
    return escape(f"Approval {what}: {card.title}"[:300])


Blocks = list[dict[str, Any]]


def blocks(card: Card, url: str | None = None) -> Blocks:
    """The card's sections (bot/card_sections.py) as blocks; `url`, the approval's page on
    the web surface (when it is configured), becomes an "Open in browser" link below the hash,
    on every state of the card. The buttons, while it can be decided, come last, where a
    decided card shows its outcome."""
    result: Blocks = []
    for section in card.sections:
        result += _SECTION[section.kind](card, section)
        if section.kind == Kind.HASH and url is not None:
            # A link, not a URL button: Slack sends a button's click to the app, which would
            # have to answer it; a link in mrkdwn just opens.
            link = f"<{escape(url)}|{OPEN_IN_BROWSER}>"
            result.append({"type": "context", "elements": [_mrkdwn(link)]})
    if card.state == State.PENDING and not card.overdue:
        elements = decision_elements(card, delegate=True)
        result.append({"type": "actions", "block_id": "signoff_decision", "elements": elements})
    return result


def _button(card: Card, action_id: str, label: str, style: str | None = None) -> dict[str, Any]:
    button: dict[str, Any] = {
        "type": "button",
        "action_id": action_id,
        "text": _plain(label, 75),
        "value": button_value(card),
    }
    if style is not None:
        button["style"] = style
    return button


def decision_elements(card: Card, *, delegate: bool) -> Blocks:
    """The buttons of a card that can be decided (also the App Home's, without Delegate…).
    A tool call: Approve, Allow the same… (where its route gives standing grants), Edit…
    (where its route allows edits), Reject, Answer… (words for the agent instead of running
    the call). A question: one button per option, or Answer…
    for words; then Reject. Every button carries the approval id and the full hash shown."""
    if card.question:
        elements = [_button(card, f"{OPTION}{i}", option) for i, option in enumerate(card.options)]
        if not card.options:
            elements.append(_button(card, ANSWER, "Answer…", "primary"))
        elements.append(_button(card, REJECT, "Reject", "danger"))
    else:
        elements = [_approve_button(card)]
        if card.grantable:
            elements.append(_button(card, ALLOW, "Allow the same…"))
        if card.editable:
            elements.append(_button(card, EDIT, "Edit…"))
        elements += [_button(card, REJECT, "Reject", "danger"), _button(card, ANSWER, "Answer…")]
    if delegate:
        elements.append(_button(card, DELEGATE, "Delegate…"))
    return elements


def _title(card: Card, section: Section) -> Blocks:
    # The state shows as the buttons while pending, and as the outcome after.
    return [{"type": "header", "text": _plain(section.text, 150)}]


def _prose(card: Card, section: Section) -> Blocks:
    return [{"type": "section", "text": _plain(section.text)}]


def _what(card: Card, section: Section) -> Blocks:
    return [{"type": "section", "fields": [_plain(item.line) for item in section.items]}]


def _fields(card: Card, section: Section) -> Blocks:
    """Ten to a section; Slack allows 50 blocks a message, so the first thirty, and how many
    more there are."""
    fields = [_plain(item.line) for item in section.items[:_MAX_FIELDS]]
    out: Blocks = [
        {"type": "section", "fields": fields[start : start + 10]}
        for start in range(0, len(fields), 10)
    ]
    if len(section.items) > _MAX_FIELDS:
        hidden = len(section.items) - _MAX_FIELDS
        words, command = more(hidden, "field", card.approval_id)
        out.append({"type": "context", "elements": [_plain(f"{words} `{command}`")]})
    return out


def _arguments(card: Card, section: Section, budget: int = 1900) -> Blocks:
    """Every argument that fits in one section; if some do not, say how many are left out and
    where to read them all."""
    text = section.heading
    for shown, item in enumerate(section.items):
        line = f"\n{item.line}"
        if len(text) + len(line) > budget:
            words, command = more(len(section.items) - shown, "argument", card.approval_id)
            text += f"\n{words} `{command}`"
            break
        text += line
    return [{"type": "section", "text": _plain(text)}]


def _reason(card: Card, section: Section) -> Blocks:
    return [{"type": "section", "text": _plain(f"{section.heading}: {section.text}")}]


# Slack takes at most 10 elements in a context block; a large quorum's votes take more.
_CONTEXT_ELEMENTS = 10


def _people(card: Card, section: Section) -> Blocks:
    elements = [_plain(item.line) for item in section.items]
    return [
        {"type": "context", "elements": elements[i : i + _CONTEXT_ELEMENTS]}
        for i in range(0, len(elements), _CONTEXT_ELEMENTS)
    ]


def _hash(card: Card, section: Section) -> Blocks:
    return [{"type": "context", "elements": [_mrkdwn(f"`{section.text}`")]}]


def _outcome(card: Card, section: Section) -> Blocks:
    out: Blocks = [{"type": "section", "text": _mrkdwn("\n".join(_mrkdwn_lines(section.lines)))}]
    if section.items:
        out.append({"type": "context", "elements": [_plain(item.line) for item in section.items]})
    return out


_SECTION: dict[Kind, Callable[[Card, Section], Blocks]] = {
    Kind.TITLE: _title,
    Kind.SUMMARY: _prose,
    Kind.WHAT: _what,
    Kind.FIELDS: _fields,
    Kind.ARGUMENTS: _arguments,
    Kind.CHANGES: _arguments,
    Kind.REASON: _reason,
    Kind.PEOPLE: _people,
    Kind.HASH: _hash,
    Kind.OUTCOME: _outcome,
}

_ICONS = {
    "approved": ":white_check_mark:",
    "rejected": ":no_entry:",
    "cancelled": ":heavy_multiplication_x:",
    "superseded": ":arrows_counterclockwise:",
    "expired": ":hourglass:",
    "executing": ":gear:",
    "failed": ":warning:",
    "unknown": ":grey_question:",
    "answered": ":speech_balloon:",
}


def _mrkdwn_lines(lines: Iterable[Line]) -> list[str]:
    """The outcome in mrkdwn, escaped: names come from the config, but nothing reaches mrkdwn
    unescaped."""
    return [
        f"{_ICONS[line.icon]} "
        + (f"*{escape(line.headline)}*" if line.headline else "")
        + escape(line.rest)
        for line in lines
    ]


def metadata(approval_id: str, shown_hash: str, channel_id: str, **more: Any) -> str:
    """What a modal's submission must know about the card it came from (Slack returns
    private_metadata untouched with the submission); `more`: what that modal needs too."""
    return json.dumps({"id": approval_id, "hash": shown_hash, "channel": channel_id, **more})


def read_metadata(view: dict[str, Any]) -> dict[str, Any] | None:
    """What a submitted modal carried about its card (`metadata`); None if not ours."""
    try:
        meta = json.loads(view["private_metadata"])
    except (KeyError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def reject_modal(approval_id: str, shown_hash: str, channel_id: str) -> dict[str, Any]:
    """The modal asking for an optional reason."""
    return {
        "type": "modal",
        "callback_id": REJECT_MODAL,
        "private_metadata": metadata(approval_id, shown_hash, channel_id),
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


def delegate_modal(approval_id: str, shown_hash: str, channel_id: str) -> dict[str, Any]:
    """The modal asking whom to hand the request to (a Slack user, mapped to a principal on
    submission) and for an optional note."""
    return {
        "type": "modal",
        "callback_id": DELEGATE_MODAL,
        "private_metadata": metadata(approval_id, shown_hash, channel_id),
        "title": _plain("Delegate request"),
        "submit": _plain("Hand over"),
        "close": _plain("Cancel"),
        "blocks": [
            {
                "type": "input",
                "block_id": DELEGATE_BLOCK,
                "label": _plain("Hand this request to"),
                "element": {"type": "users_select", "action_id": DELEGATE_INPUT},
            },
            {
                "type": "input",
                "block_id": NOTE_BLOCK,
                "optional": True,
                "label": _plain("Note (kept in the audit trail)"),
                "element": {
                    "type": "plain_text_input",
                    "action_id": NOTE_INPUT,
                    "multiline": True,
                    "max_length": 2000,
                },
            },
        ],
    }
