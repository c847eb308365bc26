"""What Telegram shows and reads back: the card as HTML with an inline keyboard, the compact
callback data its buttons carry, and the grammar of a reply to a card.

Every string the agent chose (title, summary, fields, arguments, reason, requester, notes) goes
through `html.escape` before it is put into the HTML, so `<b>`, `<a href=...>` or `&amp;` in
them reach the human as the characters they are. Telegram allows 4,096 characters of text
after parsing; fields and arguments that do not fit are counted and the card says where to
read them all.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import timedelta
from html import escape as _html_escape
from typing import Literal

from bot.canonical import short_hash
from bot.card import Card
from bot.card_sections import OPEN_IN_BROWSER, Kind, Section, more, vote_item
from bot.model import State
from bot.visible import visible


def escape(text: str) -> str:
    """Text for the card's HTML: markup characters escaped (quotes need none outside
    attributes, and Telegram knows only a few named entities), and the characters bot.visible
    shows as escapes so shown (Telegram drops some bidi overrides itself, not the isolates
    or the zero-width characters)."""
    return _html_escape(visible(text), quote=False)


# Telegram's own limit is 4,096; the margin covers the line saying what did not fit.
_TEXT_BUDGET = 3900
_PROSE = 700  # summary, the agent's reason, a decision note: each at most this much
_LINE = 300  # one field or argument line
# A quorum's votes shown on the card; past these, a line says how many more and where all are.
_VOTES = 3

_ICONS = {
    "approved": "✅",
    "rejected": "⛔",
    "cancelled": "✖️",
    "superseded": "🔄",
    "expired": "⌛",
    "executing": "⚙️",
    "failed": "⚠️",
    "unknown": "❔",
    "answered": "💬",
}
EDIT_IN_BROWSER = "Edit in browser"

Action = Literal["approve", "reject", "answer", "allow"]
# A press is the button itself, or, on a route with `confirm = true`, the second keyboard that
# Approve brings up: "Confirm approve" (which decides) or "Cancel" (which puts Approve back).
Step = Literal["press", "confirm", "cancel"]

# callback_data is at most 64 bytes: a version tag, the action, the approval id as 32 hex
# digits and the 12 hex digits of the short hash the card shows (51 bytes; 52 for an option,
# named by its place: a question's option may be longer than the whole button's data). The
# full hash is not in the button: it is read from card_messages for the message the button
# is on, and the shown hash covers a question's options, so the place names one option.
# "Allow the same…" (channels/telegram/grants.py) is `g`, then the choices made so far: how
# the arguments bind (e, m, a), `r` for this run only, and the lifetime in seconds (at most
# 10 digits: 62 bytes). The lifetime is the value itself, not its place among the offered
# ones, so a press never grants longer than its button said.
_CALLBACK_VERSION = "s1"
_CODES: dict[str, tuple[Action, Step]] = {
    "a": ("approve", "press"),
    "r": ("reject", "press"),
    "c": ("approve", "confirm"),
    "n": ("approve", "cancel"),
    "w": ("answer", "press"),  # answer in words: asks for a reply
}
_CALLBACK = re.compile(
    rf"{_CALLBACK_VERSION}:([arcnw]|o[0-4]|g(?:[ema](?:r?[1-9][0-9]{{0,9}})?)?)"
    r":([0-9a-f]{32}):([0-9a-f]{12})"
)
_GRANT = re.compile(r"g([ema])?(r)?([0-9]+)?")
# How a grant binds the call's arguments: each equal to its value here, each number at most
# its value here (the others equal), or not at all.
Bind = Literal["equal", "at_most", "any"]
_BINDS: dict[str, Bind] = {"e": "equal", "m": "at_most", "a": "any"}
_CODE_OF_BIND = {bind: code for code, bind in _BINDS.items()}
ALLOW_LABEL = "Allow the same…"
ANSWER_LABEL = "Answer instead"  # a tool call's: words for the agent, and the call never runs
OPTION_LABEL = 64  # characters of an option shown on its button


def _data(code: str, approval_id: str, short: str) -> str:
    return f"{_CALLBACK_VERSION}:{code}:{uuid.UUID(approval_id).hex}:{short}"


def callback_data(action: Literal["approve", "reject", "answer"], card: Card) -> str:
    code = {"approve": "a", "reject": "r", "answer": "w"}[action]
    return _data(code, card.approval_id, card.hash[:12])


def option_data(index: int, card: Card) -> str:
    return _data(f"o{index}", card.approval_id, card.hash[:12])


def allow_data(
    approval_id: str,
    short: str,
    bind: Bind | None = None,
    lifetime: timedelta | None = None,
    *,
    this_run: bool = False,
) -> str:
    """A button of "Allow the same…": the first press (nothing chosen), the arguments' bind
    chosen, or both and the lifetime (the press that approves)."""
    code = "g"
    if bind is not None:
        code += _CODE_OF_BIND[bind]
        if lifetime is not None:
            code += ("r" if this_run else "") + str(int(lifetime.total_seconds()))
    return _data(code, approval_id, short)


@dataclass(frozen=True, slots=True)
class Pressed:
    """What a button says it is: an action on an approval, showing a hash starting so; for
    a question's option, its place among the options."""

    action: Action
    approval_id: str
    short_hash: str
    step: Step = "press"
    option: int | None = None
    # "Allow the same…": the choices its buttons carry so far.
    bind: Bind | None = None
    lifetime: timedelta | None = None
    this_run: bool = False


def parse_callback(data: str | None) -> Pressed | None:
    """The button's meaning; None for anything signoff did not make."""
    match = _CALLBACK.fullmatch(data or "")
    if match is None:
        return None
    code, id_hex, short = match.groups()
    approval_id = str(uuid.UUID(hex=id_hex))
    if code.startswith("o"):
        return Pressed("answer", approval_id, short, option=int(code[1:]))
    if code.startswith("g"):
        bind, run, seconds = _GRANT.fullmatch(code).groups()  # type: ignore[union-attr]
        return Pressed(
            "allow",
            approval_id,
            short,
            bind=_BINDS[bind] if bind else None,
            lifetime=timedelta(seconds=int(seconds)) if seconds else None,
            this_run=run is not None,
        )
    action, step = _CODES[code]
    return Pressed(action, approval_id, short, step)


def keyboard(card: Card) -> list[list[tuple[str, str]]] | None:
    """(label, callback_data) rows while the card can be decided; None once it cannot. A
    tool call: Approve and Reject, then "Answer instead" (asks for a reply) and, where the
    route gives standing grants, "Allow the same…" (channels/telegram/grants.py). A question:
    a row per option, or "Answer" (asks for a reply), then Reject; never Approve."""
    if card.state != State.PENDING or card.overdue:
        return None
    reject = ("Reject", callback_data("reject", card))
    if card.question:
        if card.options:
            rows = [
                [(_clip(o, OPTION_LABEL), option_data(i, card))] for i, o in enumerate(card.options)
            ]
            return [*rows, [reject]]
        return [[("Answer", callback_data("answer", card)), reject]]
    second = [(ANSWER_LABEL, callback_data("answer", card))]
    if card.grantable:
        second.append((ALLOW_LABEL, allow_data(card.approval_id, card.hash[:12])))
    return [[("Approve", callback_data("approve", card)), reject], second]


def confirm_keyboard(pressed: Pressed) -> list[list[tuple[str, str]]]:
    """What Approve turns the card's buttons into on a route with `confirm = true`: the same
    approval and hash, and only "Confirm approve" decides."""
    return [
        [
            ("Confirm approve", _data("c", pressed.approval_id, pressed.short_hash)),
            ("Cancel", cancel_data(pressed)),
        ]
    ]


def cancel_data(pressed: Pressed) -> str:
    """Cancel on a keyboard that replaced the card's buttons: puts them back, decides nothing."""
    return _data("n", pressed.approval_id, pressed.short_hash)


def confirm_prompt(shown_hash: str) -> str:
    """The callback answer to Approve on a route that asks for confirmation."""
    return f"Press Confirm approve to approve {short_hash(shown_hash)}, or Cancel."


def html(card: Card, url: str | None = None) -> str:
    """The card's sections (bot/card_sections.py) as Telegram HTML (parse_mode="HTML"), the
    short hash always the last line: a press on a card whose text does not end in it is not
    adopted as that request's card (channels/telegram/channel.py). The outcome thus comes before it,
    and `url`, the approval's page on the web surface (when it is configured), becomes an
    "Open in browser" link between them (and, where the route allows edits, "Edit in
    browser": the page's editor).

    Every free text has an allowance, so the whole stays inside Telegram's 4,096 characters
    (counted in UTF-16 units, as Telegram counts): an agent writing a 4,000-character summary
    must not keep its card from ever being sent, nor a long note keep it from being updated.
    Whatever is cut says so ("…"); `signoff approvals show` prints everything. The fields and
    arguments have what the rest leaves."""
    head: list[str] = []
    details: list[Section] = []
    tail: list[str] = []
    hash_line = ""
    for section in card.sections:
        kind = section.kind
        if kind == Kind.TITLE:  # the state shows as the buttons, then as the outcome
            head.append(f"<b>{escape(_clip(section.text, 256))}</b>")
        elif kind == Kind.SUMMARY:
            head.append(escape(_clip(section.text, _PROSE)))
        elif kind == Kind.WHAT:
            head.append("")
            head += [
                f"{escape(item.label)}{item.sep}<code>{escape(_clip(item.value, 256))}</code>"
                for item in section.items
            ]
        elif kind in (Kind.FIELDS, Kind.ARGUMENTS, Kind.CHANGES):
            details.append(section)
        elif kind == Kind.REASON:
            tail += ["", f"{escape(section.heading)}: <i>{escape(_clip(section.text, _PROSE))}</i>"]
        elif kind == Kind.PEOPLE:
            tail.append("")
            tail += _people(card, section)
        elif kind == Kind.HASH:
            hash_line = f"<code>{escape(section.text)}</code>"
        elif kind == Kind.OUTCOME:
            tail.append("")
            for line in section.lines:
                bold = f"<b>{escape(line.headline)}</b>" if line.headline else ""
                tail.append(f"{_ICONS[line.icon]} {bold}{escape(line.rest)}")
            tail += [
                escape(f"{item.label}{item.sep}{_clip(item.value, _PROSE)}")
                for item in section.items
            ]
    if url is not None:
        # A text link, not a URL button: Telegram refuses a whole message whose button URL
        # it dislikes (a host without a dot), but only drops a text link it dislikes.
        links = f'<a href="{_html_escape(url, quote=True)}">{OPEN_IN_BROWSER}</a>'
        if card.editable and card.state == State.PENDING and not card.overdue:
            # Approve as edited is the web page's: its editor, then the review of the edit.
            edit = _html_escape(f"{url}/edit", quote=True)
            links += f' · <a href="{edit}">{EDIT_IN_BROWSER}</a>'
        tail += ["", links]
    tail += ["", hash_line]

    budget = _TEXT_BUDGET - sum(_shown(line) + 1 for line in head + tail)
    return "\n".join(head + _details(card, details, budget) + tail)


def _details(card: Card, sections: list[Section], budget: int) -> list[str]:
    """Fields, then arguments, as many as fit in `budget` characters of shown text; if some
    do not, say how many and where every one can be read, so nobody approves arguments
    believing they saw them all."""
    lines: list[str] = []
    for section in sections:
        if section.kind == Kind.FIELDS:
            for shown, item in enumerate(section.items):
                line = escape(_clip(item.line, _LINE))
                if _shown(line) + 1 > budget:
                    return [*lines, _more(card, len(section.items) - shown, "field")]
                budget -= _shown(line) + 1
                lines.append(line)
            continue
        arguments: list[str] = []
        budget -= len(section.heading) + 3
        for shown, item in enumerate(section.items):
            line = escape(_clip(item.line, _LINE))
            if _shown(line) + 1 > budget:
                block = [f"<pre>{chr(10).join(arguments)}</pre>"] if arguments else []
                hidden = _more(card, len(section.items) - shown, "argument")
                return [*lines, "", f"{escape(section.heading)}:", *block, hidden]
            budget -= _shown(line) + 1
            arguments.append(line)
        lines += ["", f"{escape(section.heading)}:", f"<pre>{chr(10).join(arguments)}</pre>"]
    return lines


def _people(card: Card, section: Section) -> list[str]:
    """Who asked and decides, and the first of a quorum's votes (up to fifty of them would
    not fit in a message beside the rest)."""
    votes = {vote_item(vote) for vote in card.votes}
    lines: list[str] = []
    shown = 0
    for item in section.items:
        if item in votes:
            shown += 1
            if shown > _VOTES:
                if shown == _VOTES + 1:
                    lines.append(_more(card, len(votes) - _VOTES, "vote"))
                continue
        lines.append(escape(f"{item.label}{item.sep}{_clip(item.value, 200)}"))
    return lines


def _more(card: Card, hidden: int, what: str) -> str:
    words, command = more(hidden, what, card.approval_id)
    return f"{escape(words)} <code>{escape(command)}</code>"


_TAG = re.compile(r"<[^>]*>")


def _utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _shown(html_text: str) -> int:
    """How much of Telegram's limit a line of our HTML uses: its text without tags, each
    entity one character, in UTF-16 units."""
    return _utf16(re.sub(r"&(lt|gt|amp);", "_", _TAG.sub("", html_text)))


def _clip(text: str, limit: int) -> str:
    """`text` cut to `limit` UTF-16 units, ending in "…" where it was cut."""
    if _utf16(text) <= limit:
        return text
    cut = text[:limit]
    while _utf16(cut) > limit - 1:
        cut = cut[:-1]
    return cut + "…"


# -- replies to a card -------------------------------------------------------------------------

_APPROVE_WORDS = frozenset({"approve", "approved", "yes", "ok", "okay"})
_REJECT_WORDS = frozenset({"reject", "rejected", "no"})
_REPLY = re.compile(r"\s*([^\s.,:;!]+)[.,:;!]*(?:\s+(.*))?", re.DOTALL)

HELP = (
    "Reply to the card with approve (or yes, ok) and an optional note, reject (or no) and a "
    "reason, answer and your words for the agent instead of running it, or delegate NAME to "
    "hand it to someone else."
)


@dataclass(frozen=True, slots=True)
class Reply:
    action: Literal["approve", "reject", "answer", "delegate"]
    note: str | None
    to: str | None = None  # for delegate: the principal named


def parse_reply(text: str) -> Reply | None:
    """`approve looks fine` -> approve with note "looks fine"; `no budget exhausted` ->
    reject with that reason; `answer refund only 60` -> answer with those words (the call
    does not run); `delegate carol she owns vendors` -> hand the request to
    carol with that note; None for anything else (the sender gets HELP)."""
    match = _REPLY.fullmatch(text or "")
    if match is None:
        return None
    word, rest = match.group(1).casefold(), (match.group(2) or "").strip() or None
    if word in _APPROVE_WORDS:
        return Reply("approve", rest)
    if word in _REJECT_WORDS:
        return Reply("reject", rest)
    if word == "answer" and rest:
        return Reply("answer", rest)
    if word == "delegate" and rest:
        to, *note = rest.split(None, 1)  # any whitespace after the name, as after the verb
        name = to.lstrip("@")
        if not name:
            return None
        return Reply("delegate", note[0].strip() if note else None, name)
    return None


def reason_prompt(shown_hash: str) -> str:
    """The question after Reject; the card it is about is the message it replies to."""
    return (
        f"Why reject this request (<code>{short_hash(shown_hash)}</code>)? Reply to this "
        "message with the reason, or <code>skip</code> for none."
    )


def answer_prompt(shown_hash: str, question: bool) -> str:
    """The question after Answer: the card it is about is the message it replies to."""
    what = (
        "Your answer to this question"
        if question
        else "What should the agent read instead of running this call"
    )
    return (
        f"{what} (<code>{short_hash(shown_hash)}</code>)? Reply to this message with your answer."
    )
