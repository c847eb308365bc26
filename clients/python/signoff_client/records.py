"""The records the API returns, typed: an approval (`ApprovalRecord`, with its quorum's votes)
and a claim of an approved call (`Claim`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ApprovalRecord", "ApprovalVote", "Claim"]


@dataclass(frozen=True, slots=True)
class ApprovalVote:
    """One vote towards an N-of-M quorum: who, deciding what ("approve" or "reject"), when,
    on which surface ("web", "slack", "telegram", "cli"; None if not recorded), and for whom
    a delegate stood in."""

    principal: str
    decision: str
    at: str
    via: str | None = None
    as_delegate_of: str | None = None
    note: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ApprovalVote:
        return cls(
            principal=data["principal"],
            decision=data["decision"],
            at=data["at"],
            via=data.get("via"),
            as_delegate_of=data.get("as_delegate_of"),
            note=data.get("note"),
        )


@dataclass(frozen=True, slots=True)
class ApprovalRecord:
    """An approval as the API returns it. `execution` tells a resumed agent whether the call
    never ran (not_started), ran with an unknown outcome (started), or finished.

    `kind` is "tool_call" (or "interrupted_side_effect"), or "question": then `tool` is None
    and `question` holds the options offered (`{}` for a reply in words). A request ends
    `answered` when a person replied instead of deciding: `answer` is `{"text": ...}` or
    `{"option": ...}`, and nothing ran. `edited`: an approver changed the arguments before
    approving; `tool` and `hash` are that revision, `original_arguments` and
    `original_hash` what the agent asked for."""

    id: str
    state: str
    execution: str
    hash: str
    kind: str
    capability: str
    tool: dict[str, Any] | None
    assignee: str
    decided_by: str | None
    decided_at: str | None
    expires_at: str | None
    origin_id: str | None
    presentation: Any
    raw: dict[str, Any]
    # The interrupted_side_effect approval raised when this one's lease lapsed, the newer
    # request of the same step that replaced it, and the current claim's lease.
    follow_up_id: str | None = None
    superseded_by: str | None = None
    lease_until: str | None = None
    # Every vote counted towards a quorum, oldest first (empty where one decision decides,
    # and from a server older than the field).
    votes: tuple[ApprovalVote, ...] = ()
    # Questions, answers and edits (None, None, False... from a server older than them).
    question: dict[str, Any] | None = None
    answer: dict[str, Any] | None = None
    edited: bool = False
    original_hash: str | None = None
    original_arguments: dict[str, Any] | None = None

    @property
    def answered(self) -> bool:
        return self.state == "answered"

    @property
    def answer_text(self) -> str | None:
        """The person's answer in words, or the option they chose; None until answered."""
        if not self.answer:
            return None
        value = self.answer.get("text", self.answer.get("option"))
        return None if value is None else str(value)

    @property
    def options(self) -> list[str]:
        """A question's options (empty for one answered in words, and for a tool call)."""
        return list((self.question or {}).get("options") or [])

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ApprovalRecord:
        return cls(
            id=data["id"],
            state=data["state"],
            execution=data["execution"],
            hash=data["hash"],
            kind=data["kind"],
            capability=data["capability"],
            tool=data.get("tool"),
            assignee=data["assignee"],
            decided_by=data.get("decided_by"),
            decided_at=data.get("decided_at"),
            expires_at=data.get("expires_at"),
            origin_id=data.get("origin_id"),
            presentation=data.get("presentation"),
            raw=dict(data),
            follow_up_id=data.get("follow_up_id"),
            superseded_by=data.get("superseded_by"),
            lease_until=data.get("lease_until"),
            votes=tuple(ApprovalVote.from_json(v) for v in data.get("votes") or ()),
            question=data.get("question"),
            answer=data.get("answer"),
            edited=bool(data.get("edited")),
            original_hash=data.get("original_hash"),
            original_arguments=data.get("original_arguments"),
        )


@dataclass(frozen=True, slots=True)
class Claim:
    """The approved call, held by this caller until `lease_until`: execute `tool` exactly,
    passing `idempotency_key` to the effect's API, then `complete()` with `claim_token`.

    When `edited`, `tool` is the approver's revision of the call (what was approved, and so
    what must run), `original_hash` the hash of the call the agent asked for, and
    `original_arguments` its arguments."""

    approval: ApprovalRecord
    claim_token: str
    lease_until: str
    idempotency_key: str
    tool: dict[str, Any]
    step: Any
    resume: Any
    preconditions: Any
    edited: bool = False
    original_hash: str | None = None

    @property
    def original_arguments(self) -> dict[str, Any] | None:
        return self.approval.original_arguments if self.edited else None
