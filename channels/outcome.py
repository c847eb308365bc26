"""What happened to a request, as lines every chat surface renders in its own markup.

Slack and Telegram show the same outcome on a decided card; only the icon and the bold
markup differ, so the wording lives here once. Each line names who and when where the row
records it: the human decision first, then what the agent or the clock did after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from bot.model import Card, State


@dataclass(frozen=True, slots=True)
class Line:
    icon: str  # a key the surface maps to its own emoji: "approved", "rejected", ...
    headline: str  # shown bold; may be empty
    rest: str = ""


def at(when: datetime | None) -> str:
    return f" at {when:%Y-%m-%d %H:%M} UTC" if when else ""


def lines(card: Card) -> list[Line]:
    who = f" by {card.decided_by}" if card.decided_by else ""
    state = State(card.state)
    if state == State.REJECTED:
        return [Line("rejected", "Rejected", f"{who}{at(card.decided_at)}")]
    if state == State.CANCELLED and not card.approved:
        return [Line("cancelled", "Cancelled", f"{who or ' by the agent'}{at(card.decided_at)}")]
    if state == State.SUPERSEDED and not card.approved:
        return [Line("superseded", "Superseded", " by the agent: its preconditions no longer hold")]
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
        State.SUPERSEDED: Line("superseded", "Superseded", " by the agent before it ran"),
    }
    if state in later:
        result.append(later[state])
    return result
