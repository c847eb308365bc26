"""The card's layout: which sections a card has, in what order, and every word of them.

Every surface (the CLI, Slack, Telegram, the web page) shows a card as these sections, in
this order; each decides only markup (escaping, code spans, its size limits) and adds its own
controls (buttons, forms, a link to the web page):

    title      the title; the state in words as its one item
    summary    the agent's summary (prose)
    what       Capability and Tool: what runs if it is approved (a question: Capability and
               what answers it, its options or words)
    fields     the agent's own fields, when it sent any
    arguments  "Arguments": every argument, key = value
    changes    approved as edited: "Edited by the approver" (the agent asked for its short
               hash) and every key changed, added or removed, key: before → after
    reason     "Reason (from the agent, unverified)": the agent's reason, when it gave one
    people     who asked, who decides, a quorum's progress and every vote cast towards it
               (who, when, on which surface: before and after the outcome), the deadline
    hash       the short hash the human approves; the id and the full hash as items
    outcome    once it is not pending: what happened, then the decision note

The outcome comes last because it takes the place of the decision controls (Slack's buttons,
the web page's forms). Telegram keeps the hash as the message's last line, as its buttons
and its adoption of a posted card rely on (channels/telegram/card.py).

An item carries its label, its value and the separator between them ("Capability:
payments.refund", "Requested by Sam Requester (sam)"), so a surface that writes it on one
line says it in the same words as every other; a surface with columns (the CLI, the web
page's lists) shows label and value apart. Agent text in a card is already shown through
bot/visible.py (bot/card.py); each surface still escapes it for its markup.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING

from bot.canonical import short_hash
from bot.model import State

if TYPE_CHECKING:
    from bot.card_fields import CardFields, CardVote


# The link a chat card shows to the approval's page, when the web surface is configured.
OPEN_IN_BROWSER = "Open in browser"


class Kind(StrEnum):
    TITLE = "title"
    SUMMARY = "summary"
    WHAT = "what"
    FIELDS = "fields"
    ARGUMENTS = "arguments"
    CHANGES = "changes"
    REASON = "reason"
    PEOPLE = "people"
    HASH = "hash"
    OUTCOME = "outcome"


@dataclass(frozen=True, slots=True)
class Item:
    label: str
    value: str
    sep: str = ": "  # " " where the label reads on into the value ("Requested by Sam")
    code: bool = False  # a name or a digest: monospace where the surface has it
    when: datetime | None = None  # the moment the value names, for machine-readable markup

    @property
    def line(self) -> str:
        return f"{self.label}{self.sep}{self.value}"


@dataclass(frozen=True, slots=True)
class Line:
    """One line of the outcome."""

    icon: str  # a key the surface maps to its own emoji: "approved", "rejected", ...
    headline: str  # shown bold; may be empty
    rest: str = ""


@dataclass(frozen=True, slots=True)
class Section:
    kind: Kind
    label: str = ""  # a heading, where the section has one ("Arguments", "Reason")
    note: str = ""  # what qualifies the heading ("from the agent, unverified")
    text: str = ""  # the prose of title, summary and reason; the short hash
    items: tuple[Item, ...] = ()
    lines: tuple[Line, ...] = ()  # the outcome's

    @property
    def heading(self) -> str:
        """The label with its qualifier, on one line: "Reason (from the agent, unverified)"."""
        return f"{self.label} ({self.note})" if self.note else self.label


def sections(card: CardFields) -> tuple[Section, ...]:
    """The card as its sections, in the order every surface shows them; a section with
    nothing to show is left out."""
    result = [Section(Kind.TITLE, text=card.title, items=(Item("State", state_words(card.state)),))]
    if card.summary:
        result.append(Section(Kind.SUMMARY, text=card.summary))
    result.append(Section(Kind.WHAT, items=_what(card)))
    if card.fields:
        result.append(Section(Kind.FIELDS, items=tuple(Item(k, v) for k, v in card.fields)))
    if card.arguments:
        arguments = tuple(Item(k, v, " = ", code=True) for k, v in card.arguments)
        result.append(Section(Kind.ARGUMENTS, label="Arguments", items=arguments))
    if card.changes:
        changes = tuple(Item(k, v, code=True) for k, v in card.changes)
        note = f"the agent asked for {short_hash(card.original_hash or '')}"
        result.append(
            Section(Kind.CHANGES, label="Edited by the approver", note=note, items=changes)
        )
    if card.reason:
        result.append(
            Section(
                Kind.REASON, label="Reason", note="from the agent, unverified", text=card.reason
            )
        )
    result.append(Section(Kind.PEOPLE, items=_people(card)))
    hashes = (
        Item("Id", card.approval_id, code=True),
        Item("Hash", f"sha256:{card.hash}", code=True),
    )
    result.append(Section(Kind.HASH, label="Hash", text=card.short_hash, items=hashes))
    if card.state != State.PENDING:
        if card.answer is not None:
            note: tuple[Item, ...] = (Item("Answer", card.answer),)
        else:
            note = (Item("Note", card.decision_note),) if card.decision_note else ()
        result.append(Section(Kind.OUTCOME, items=note, lines=tuple(outcome_lines(card))))
    return tuple(result)


def _what(card: CardFields) -> tuple[Item, ...]:
    capability = Item("Capability", card.capability, code=True)
    if not card.question:
        return capability, Item("Tool", card.tool_name, code=True)
    if card.options:
        return capability, Item("Question", "choose one: " + " · ".join(card.options))
    return capability, Item("Question", "answer in words")


def state_words(state: str) -> str:
    """ "outcome unknown" for outcome_unknown."""
    return state.replace("_", " ")


def _people(card: CardFields) -> tuple[Item, ...]:
    assigned = card.assignee
    if card.assigned_note:
        assigned += f" ({card.assigned_note})"
    people = [
        Item("Requested by", card.requested_by or "unknown", " "),
        Item("Assigned to", assigned, " "),
    ]
    if card.progress:
        people.append(progress(card))
    people += [vote_item(vote) for vote in card.votes]
    day = f"{card.expires_at:%Y-%m-%d %H:%M} UTC"
    if card.expires_in is not None:
        people.append(Item("Expires", f"in {card.expires_in} ({day})", " ", when=card.expires_at))
    elif card.overdue:
        people.append(
            Item(
                "Time ran out", f"at {day}; it can no longer be decided", " ", when=card.expires_at
            )
        )
    else:
        people.append(Item("Deadline", day, when=card.expires_at))
    return tuple(people)


def progress(card: CardFields) -> Item:
    """ "Approvals: 1 of 2 (Alice Ng)" while a quorum is being gathered."""
    return Item("Approvals", card.progress or "")


def vote_item(vote: CardVote) -> Item:
    """ "Approved by Alice Ng (alice) at 2026-12-01 10:00 UTC on the web": one vote of a
    quorum, who, when and where, so the record shows every person it took, not only the last."""
    label = "Approved by" if vote.decision == "approve" else "Rejected by"
    where = vote.where
    return Item(label, f"{vote.name}{at(vote.at)}{' ' + where if where else ''}", " ")


def votes_line(card: CardFields) -> str:
    """Every vote on one line, for a list with room for one ("Approved by Alice Ng (alice) at
    ... on the web; Approved by ..."); empty without votes."""
    return "; ".join(vote_item(vote).line for vote in card.votes)


def more(hidden: int, noun: str, approval_id: str) -> tuple[str, str]:
    """What a surface with little room says of what it left out, and the command that shows
    everything, so nobody approves arguments believing they saw them all:
    ("… and 3 more arguments; every one is in", "signoff approvals show ID")."""
    words = f"… and {hidden} more {noun}{'s' if hidden > 1 else ''}; every one is in"
    return words, f"signoff approvals show {approval_id}"


# -- the outcome a decided card shows ------------------------------------------------------


def at(when: datetime | None) -> str:
    return f" at {when:%Y-%m-%d %H:%M} UTC" if when else ""


def outcome_lines(card: CardFields) -> list[Line]:
    """What happened to the request, for a decided card: the human decision first, then what
    the agent or the clock did after it, each naming who and when where the row records it."""
    who = f" by {card.decided_by}" if card.decided_by else ""
    if card.by_grant and card.decided_by:
        who = f" by a standing grant of {card.decided_by}"
    state = State(card.state)
    if state == State.ANSWERED:
        instead = "" if card.question else " instead of running"
        return [Line("answered", f"Answered{instead}", f"{who}{at(card.decided_at)}")]
    if state == State.REJECTED:
        return [Line("rejected", "Rejected", f"{who}{at(card.decided_at)}")]
    if state == State.CANCELLED and not card.approved:
        return [Line("cancelled", "Cancelled", f"{who or ' by the agent'}{at(card.decided_at)}")]
    if state == State.SUPERSEDED and not card.approved:
        # Why is the note: the agent's reason, a newer request of the step, a policy change.
        return [Line("superseded", "Superseded", " before it was decided")]
    if state == State.EXPIRED and not card.approved:
        return [Line("expired", "Expired", f" unanswered{at(card.expires_at)}")]
    result = [Line("approved", "Approved", f"{who}{at(card.decided_at)}")]
    later = {
        State.EXECUTING: Line("executing", "", f"Execution started{at(card.claimed_at)}"),
        State.EXECUTED: Line("approved", "Executed", at(card.executed_at)),
        State.FAILED: Line("failed", "Execution failed", at(card.executed_at)),
        State.OUTCOME_UNKNOWN: Line(
            "unknown",
            "Outcome unknown",
            f": execution started{at(card.claimed_at)} and never reported back; a new request "
            "asks whether to run it again",
        ),
        State.EXPIRED: Line("expired", "Expired", ": approved but never claimed in time"),
        State.CANCELLED: Line("cancelled", "Withdrawn", " by the agent before it ran"),
        State.SUPERSEDED: Line("superseded", "Superseded", " before it ran"),
    }
    if state in later:
        result.append(later[state])
    return result
