"""The approval as the rest of signoff sees it: states, what they mean, and the Card.

The record itself is `store.records.Approval` (a frozen row); this module gives it meaning.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from bot.canonical import approval_hash, short_hash
from bot.clock import utc_iso
from bot.durations import format_duration
from store.records import Approval

__all__ = ["Approval", "Card", "Execution", "Kind", "State", "execution_of", "public_record"]


class Kind(StrEnum):
    TOOL_CALL = "tool_call"
    # Raised by signoff itself when an execution lease lapses: the call started, its outcome
    # is unknown, and a human decides whether to run it again.
    INTERRUPTED_SIDE_EFFECT = "interrupted_side_effect"


class State(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    EXECUTING = "executing"
    EXECUTED = "executed"
    FAILED = "failed"
    REJECTED = "rejected"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    SUPERSEDED = "superseded"
    OUTCOME_UNKNOWN = "outcome_unknown"


class Execution(StrEnum):
    """What a resumed agent may conclude about the gated call."""

    NOT_STARTED = "not_started"
    STARTED = "started"
    FINISHED = "finished"


_EXECUTION = {
    State.EXECUTING: Execution.STARTED,
    State.OUTCOME_UNKNOWN: Execution.STARTED,
    State.EXECUTED: Execution.FINISHED,
    State.FAILED: Execution.FINISHED,
}

# Human decisions (approve, reject, cancel) act on pending requests only: a cancel aimed at a
# pending request must not revoke an approval that landed first. Withdrawing an approved grant
# is the agent's own cancel through the API.
DECIDABLE = frozenset({State.PENDING})


def execution_of(state: str) -> Execution:
    return _EXECUTION.get(State(state), Execution.NOT_STARTED)


def recompute_hash(approval: Approval) -> str:
    """The hash the stored fields produce now; differs from approval.hash only if the row was
    altered outside signoff."""
    return approval_hash(
        approval.kind,
        approval.capability,
        approval.presentation,
        approval.tool_name,
        approval.tool_args,
    )


def _iso(value: datetime | None) -> str | None:
    return utc_iso(value) if value else None


def public_record(approval: Approval) -> dict[str, Any]:
    """The JSON form shared by the CLI's --json and the HTTP API."""
    return {
        "id": approval.id,
        "tenant": approval.tenant,
        "run_id": approval.run_id,
        "kind": approval.kind,
        "capability": approval.capability,
        "tool": {"name": approval.tool_name, "arguments": approval.tool_args},
        "presentation": approval.presentation,
        "reason": approval.reason,
        "hash": approval.hash,
        "state": approval.state,
        "execution": execution_of(approval.state).value,
        "requested_by": approval.requested_by,
        "assignee": approval.assignee,
        "approvers": approval.approvers,
        "required_approvals": approval.required_approvals,
        "created_at": _iso(approval.created_at),
        "expires_at": _iso(approval.expires_at),
        "decided_by": approval.decided_by,
        "decided_at": _iso(approval.decided_at),
        "decision_note": approval.decision_note,
        "grant_expires_at": _iso(approval.grant_expires_at),
        "claimed_at": _iso(approval.claimed_at),
        "lease_until": _iso(approval.lease_until),
        "executed_at": _iso(approval.executed_at),
        "outcome": approval.outcome,
        "origin_id": approval.origin_id,
        "step": approval.step,
        "preconditions": approval.preconditions,
        "resume": approval.resume,
        "version": approval.version,
    }


@dataclass(frozen=True, slots=True)
class Card:
    """What a human is shown, before any surface renders it. Every string in it that came
    from the agent (title, fields, arguments, reason) is untrusted and escaped by the surface."""

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

    @property
    def progress(self) -> str | None:
        """ "1 of 2 approvals: Alice Ng" while a quorum is being gathered."""
        if self.required_approvals < 2 or self.state != "pending":
            return None
        names = ", ".join(self.approvals_so_far) or "none yet"
        return f"{len(self.approvals_so_far)} of {self.required_approvals} approvals: {names}"

    @property
    def short_hash(self) -> str:
        return short_hash(self.hash)

    @classmethod
    def from_approval(
        cls,
        approval: Approval,
        now: datetime,
        describe: Any = str,
        max_value: int | None = 200,
        votes: tuple[str, ...] = (),
    ) -> Card:
        """`describe` turns a principal or group key into display text (Directory.describe).
        `max_value` cuts long values for surfaces with little room (None: show everything).
        `votes` are the principals who approved so far (N-of-M)."""
        presentation = approval.presentation if isinstance(approval.presentation, dict) else {}
        fields = tuple(
            (str(f.get("label", "")), _truncate(f.get("value"), max_value))
            for f in presentation.get("fields") or []
            if isinstance(f, dict)
        )
        arguments = tuple(
            (str(key), _truncate(value, max_value))
            for key, value in (approval.tool_args or {}).items()
        )
        pending = approval.state == State.PENDING
        overdue = pending and now >= approval.expires_at
        return cls(
            approval_id=approval.id,
            title=str(presentation.get("title") or approval.capability),
            summary=presentation.get("summary"),
            capability=approval.capability,
            tool_name=approval.tool_name,
            fields=fields,
            arguments=arguments,
            reason=approval.reason,
            requested_by=describe(approval.requested_by) if approval.requested_by else None,
            assignee=describe(approval.assignee),
            state=approval.state,
            expires_at=approval.expires_at,
            expires_in=format_duration(approval.expires_at - now)
            if pending and not overdue
            else None,
            overdue=overdue,
            decided_by=describe(approval.decided_by) if approval.decided_by else None,
            decided_at=approval.decided_at,
            decision_note=approval.decision_note,
            hash=approval.hash,
            approved=approval.grant_expires_at is not None,
            claimed_at=approval.claimed_at,
            executed_at=approval.executed_at,
            assigned_note=approval.assigned_note,
            approvals_so_far=tuple(describe(v).split(" (")[0] for v in votes),
            required_approvals=approval.required_approvals,
        )


def _truncate(value: Any, limit: int | None) -> str:
    """Long values are cut with their full size shown, so a human knows there is more."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if limit is None or len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} chars)"
