"""What every human decision shares: who decides (`Actor`), what a decision is (a
`Transition`), the sentence each surface shows for it (`decision_text`), and the checks made
before a row is touched (open, decidable, intact).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from bot import expiry
from bot.audit import row_hash
from bot.errors import ApprovalCorrupt, NotPending
from bot.model import DECIDABLE, State
from bot.routing import Directory
from bot.transitions import Transition
from store.records import Approval, Event

FULL_HASH = re.compile(r"[0-9a-f]{64}")

Action = Literal["approve", "reject", "cancel", "delegate"]

QUESTION_APPROVED = "a question is answered, not approved: choose or write an answer"


@dataclass(frozen=True, slots=True)
class Actor:
    """A verified identity: the surface established who this is before calling the Operator.

    `via` names the surface ("cli", "slack", "telegram", "web"). `break_glass` (CLI only)
    decides without the eligibility check and is recorded as such.
    """

    principal: str
    via: str
    break_glass: bool = False

    @property
    def label(self) -> str:
        return f"{self.via}:{self.principal}"


# A human decision is a transition like any other.
Decision = Transition

# The events a decision records; `decision_text` words each of them.
DECISION_EVENTS = frozenset(
    {"approved", "voted", "rejected", "delegated", "cancelled", State.ANSWERED.value}
)


def decision_text(approval: Approval, event: Event, directory: Directory) -> str:
    """What a decision did, in the one sentence every surface shows the person who took it:
    `approval` and `event` are the Decision's (or the row and the decision's stored event,
    for a page shown after it). Raises ValueError for an event no decision records."""
    if event.type == "voted":
        votes = len(event.data.get("votes") or [])
        needed = approval.required_approvals
        return f"Your approval is recorded: {votes} of {needed}; the request waits for the rest."
    if event.type == "delegated":
        return f"Handed to {directory.name_of(str(event.data['to']))}."
    if event.type == "approved" and approval.original_hash is not None:
        return "Approved as edited."
    if event.type in DECISION_EVENTS:
        return f"{event.type.capitalize()}."  # Approved. Rejected. Cancelled. Answered.
    raise ValueError(f"a {event.type!r} event is not a decision")


def check_open(row: Approval) -> None:
    """Only a pending request can be decided; say what it is instead."""
    if row.state == State.EXPIRED:
        raise expiry.expired_error(row)
    check_decidable(row)


def check_decidable(row: Approval) -> None:
    """Only a pending request can be decided (an expired one is refused as expired first)."""
    if row.state not in DECIDABLE:
        raise NotPending(state=row.state, decided_by=row.decided_by, decided_at=row.decided_at)


def corrupt(row: Approval) -> ApprovalCorrupt:
    return ApprovalCorrupt(
        f"approval {row.id}: stored fields no longer hash to {row.hash[:12]}; "
        "it was altered outside signoff and cannot be approved"
    )


def hash_intact(row: Approval) -> bool:
    """Whether the stored call still hashes to the row's hash (audit.content_hash: the same
    comparison claim, complete and `audit verify` make)."""
    return row_hash(row) == row.hash


__all__ = [
    "DECISION_EVENTS",
    "FULL_HASH",
    "QUESTION_APPROVED",
    "Action",
    "Actor",
    "Decision",
    "check_decidable",
    "check_open",
    "corrupt",
    "decision_text",
    "hash_intact",
]
