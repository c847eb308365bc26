"""Rows as frozen dataclasses: what the repository returns and everything above it reads."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, ClassVar, Self

from sqlalchemy.engine import RowMapping

# The columns each record reads from its row, found once per class: `dataclasses.fields`
# on every row cost a Home refresh counting hundreds of rows a tenth of its time.
_COLUMNS: dict[type, tuple[str, ...]] = {}


class _FromRow:
    # Fields read from other tables than the row's (an approval's votes): from_row leaves
    # them at their defaults, and the store fills them in.
    _ATTACHED: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def from_row(cls, row: RowMapping) -> Self:
        names = _COLUMNS.get(cls)
        if names is None:
            names = _COLUMNS[cls] = tuple(
                f.name
                for f in fields(cls)  # type: ignore[arg-type]
                if f.name not in cls._ATTACHED
            )
        return cls(**{name: row[name] for name in names})  # type: ignore[call-arg]


@dataclass(frozen=True, slots=True)
class Approval(_FromRow):
    id: str
    tenant: str
    run_id: str
    step: Any
    kind: str
    capability: str
    tool_name: str
    tool_args: Any
    presentation: Any
    reason: str | None
    hash: str
    requested_by: str | None
    assignee: str
    approvers: list[str]
    required_approvals: int
    allow_self_approval: bool
    state: str
    preconditions: Any
    resume: Any
    callback_url: str | None
    created_at: datetime
    expires_at: datetime
    escalate_at: datetime | None
    escalation_level: int
    assigned_note: str | None
    grant_ttl_s: int | None
    decided_by: str | None
    decided_at: datetime | None
    decision_note: str | None
    grant_expires_at: datetime | None
    claim_token: str | None
    claimed_at: datetime | None
    lease_until: datetime | None
    executed_at: datetime | None
    outcome: Any
    origin_id: str | None
    version: int
    audit_seq: int
    audit_head: str
    claim_key: str | None = None
    step_key: str | None = None
    superseded_by: str | None = None
    follow_up_id: str | None = None
    question: Any = None
    answer: Any = None
    input_schema: Any = None
    original_args: Any = None
    original_hash: str | None = None
    grant_id: str | None = None
    # The votes cast towards a quorum (N-of-M), oldest first, from `votes`: every approval
    # the store returns carries them (store/votes.py attach_votes); () with one approver.
    votes: tuple[Vote, ...] = ()

    _ATTACHED: ClassVar[frozenset[str]] = frozenset({"votes"})


@dataclass(frozen=True, slots=True)
class Candidate(_FromRow):
    """What the eligibility rule reads of a pending approval, and where it sorts: a person's
    inbox is judged on these, without reading each request's call, presentation and resume."""

    id: str
    expires_at: datetime
    capability: str
    requested_by: str | None
    assignee: str
    approvers: list[str]
    allow_self_approval: bool


@dataclass(frozen=True, slots=True)
class HomeChange(_FromRow):
    """What a Slack Home refresh reads of a changed request: whom it concerns (its
    approvers, assignee and requester) and what its Home entry shows of its state, without
    its call, presentation or votes (their count only)."""

    id: str
    state: str
    hash: str
    requested_by: str | None
    assignee: str
    assigned_note: str | None
    approvers: list[str]
    decided_at: datetime | None
    votes: int


@dataclass(frozen=True, slots=True)
class Event(_FromRow):
    id: int
    approval_id: str
    seq: int
    type: str
    actor: str | None
    at: datetime
    data: dict[str, Any]
    prev_hash: str
    hash: str


@dataclass(frozen=True, slots=True)
class ChainHead:
    """What an approval row says about its own audit trail, and the stored call its hash
    covers, for verification."""

    audit_seq: int
    audit_head: str
    state: str
    decided_by: str | None
    hash: str
    kind: str
    capability: str
    presentation: Any
    tool_name: str
    args: Any
    question: Any = None
    # Approved as edited: the call as first requested (its arguments, and their hash).
    original_args: Any = None
    original_hash: str | None = None


@dataclass(frozen=True, slots=True)
class Vote(_FromRow):
    approval_id: str
    principal: str
    decision: str
    as_delegate_of: str | None
    note: str | None
    at: datetime
    # The surface it was cast on ("web", "slack", "telegram", "cli"); None if not recorded.
    via: str | None = None


@dataclass(frozen=True, slots=True)
class CardMessage(_FromRow):
    id: int
    approval_id: str
    channel: str
    address: str
    message_id: str
    shown_hash: str
    rendered_state: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class Delegation(_FromRow):
    """`principal` hands their authority to `delegate` from starts_at until ends_at (open
    ended if None) for capabilities matching `scope`, unless revoked."""

    id: str
    principal: str
    delegate: str
    scope: str
    starts_at: datetime
    ends_at: datetime | None
    note: str | None
    created_by: str
    created_at: datetime
    revoked_at: datetime | None
    revoked_by: str | None

    def active_at(self, now: datetime) -> bool:
        return (
            self.starts_at <= now
            and (self.ends_at is None or now < self.ends_at)
            and (self.revoked_at is None or now < self.revoked_at)
        )

    def ended_by(self, now: datetime) -> bool:
        """Over for good: past its end, or revoked."""
        return (self.ends_at is not None and self.ends_at <= now) or (
            self.revoked_at is not None and self.revoked_at <= now
        )


@dataclass(frozen=True, slots=True)
class ReplyPrompt(_FromRow):
    channel: str
    address: str
    message_id: str
    card_message_id: int
    asked: str
    action: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class OutboxJob(_FromRow):
    id: int
    kind: str
    approval_id: str | None
    payload: dict[str, Any]
    dedupe_key: str | None
    state: str
    attempts: int
    run_after: datetime
    locked_by: str | None
    locked_until: datetime | None
    last_error: str | None
    created_at: datetime
    done_at: datetime | None
    # Never stored: the approval as it was when a job leased at birth (store/commits.py) was
    # queued, so that its runner need not read it back; dropped if the same transaction
    # moves the approval later (Statements._forget_subject). A transition after the commit
    # has a newer version: whoever uses it must check (bot/outbox/cards.py does).
    subject: Approval | None = field(default=None, compare=False, repr=False)

    _ATTACHED: ClassVar[frozenset[str]] = frozenset({"subject"})


@dataclass(frozen=True, slots=True)
class RefusalCount(_FromRow):
    """Every refused attempt of one actor on one request (the trail records the first few)."""

    approval_id: str
    actor: str
    refused: int
    last_at: datetime
    last_action: str
    last_code: str


@dataclass(frozen=True, slots=True)
class StandingGrant(_FromRow):
    """A person's "approve, and allow the same for ...": later requests of this tenant,
    capability and tool (of `run_id` only, if set) whose arguments meet `conditions` are
    approved by it until `expires_at`, at most `max_uses` times, unless it is revoked."""

    id: str
    tenant: str
    capability: str
    tool_name: str
    run_id: str | None
    conditions: Any
    granted_by: str
    as_delegate_of: str | None
    approval_id: str
    created_at: datetime
    expires_at: datetime
    max_uses: int | None
    uses: int
    revoked_at: datetime | None
    revoked_by: str | None

    def live_at(self, now: datetime) -> bool:
        return (
            self.revoked_at is None
            and now < self.expires_at
            and (self.max_uses is None or self.uses < self.max_uses)
        )
