"""What a card shows, as data: the fields of a Card and its votes.

Apart from bot/card.py so that the layout (bot/card_sections.py) can read them without
importing the Card, which lays itself out through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from bot.canonical import short_hash


@dataclass(frozen=True, slots=True)
class CardVote:
    """One vote towards a quorum as a card shows it."""

    name: str  # "Alice Ng (alice)", or "Dan Lee (dan) for Alice Ng (alice)" standing in
    decision: str  # "approve" or "reject"
    at: datetime
    via: str | None  # the surface: "web", "slack", "telegram", "cli"; None if not recorded
    # Where, as it reads after the time ("in Slack", "from the CLI"; "" if not recorded):
    # the surface's own words, which the directory carries (Directory.surface_words).
    where: str = ""


@dataclass(frozen=True, slots=True)
class CardFields:
    """What a human is shown, before any surface renders it (bot.card.Card adds its layout).
    Every string in it that came from the agent (title, fields, arguments, reason) or a
    person (a decision note) has its invisible and reordering characters shown as escapes
    already (bot/visible.py), so no surface can forget to; it is still untrusted, and each
    surface escapes its markup."""

    approval_id: str
    title: str
    summary: str | None
    capability: str
    tool_name: str
    fields: tuple[tuple[str, str], ...]
    arguments: tuple[tuple[str, str], ...]
    reason: str | None
    requested_by: str | None
    assignee: str
    state: str
    expires_at: datetime
    expires_in: str | None  # while pending and not yet past expires_at
    overdue: bool  # pending, but past expires_at: the next attempt or the sweeper expires it
    decided_by: str | None
    decided_at: datetime | None
    decision_note: str | None
    hash: str
    # Whether it was ever approved (a grant was set), and when execution started and ended:
    # later states (cancelled, expired, executed...) say so beside who approved it.
    approved: bool = False
    claimed_at: datetime | None = None
    executed_at: datetime | None = None
    # How the assignee got the request ("escalated to Carol Diaz after 24h without a
    # decision"), and, with N-of-M, who has approved so far of how many needed.
    assigned_note: str | None = None
    approvals_so_far: tuple[str, ...] = ()
    required_approvals: int = 1
    # Every vote cast towards the quorum, before and after the outcome (who, when, where).
    votes: tuple[CardVote, ...] = ()
    # The route asks for a confirmation before Approve decides (`confirm = true`).
    confirm: bool = False
    # A question (kind "question"): no call, its options (none: answered in words), and once
    # answered, the answer.
    question: bool = False
    options: tuple[str, ...] = ()
    answer: str | None = None
    # Approved as edited: the agent's call's hash, and each key the approver changed as
    # (key, what it was and became), shown beside the arguments approved.
    original_hash: str | None = None
    changes: tuple[tuple[str, str], ...] = ()
    # Approved at once by a standing grant (its id) of `decided_by`.
    by_grant: str | None = None
    # A pending tool call whose route lets approvers edit it (`edits` other than "none"):
    # chat surfaces offer their editor, or a link to the web page's.
    editable: bool = False
    # A pending tool call whose route lets this approval give a standing grant ("Approve,
    # and allow the same for …"; bot/grant_views.offer says what it offers).
    grantable: bool = False

    @property
    def progress(self) -> str | None:
        """ "1 of 2 (Alice Ng)" while a quorum is being gathered (shown as "Approvals: ...")."""
        if self.required_approvals < 2 or self.state != "pending":
            return None
        names = ", ".join(self.approvals_so_far) or "none yet"
        return f"{len(self.approvals_so_far)} of {self.required_approvals} ({names})"

    @property
    def short_hash(self) -> str:
        return short_hash(self.hash)
