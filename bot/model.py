"""The approval as the rest of signoff sees it: states, what they mean, its public record.

The record itself is `store.records.Approval` (a frozen row); this module gives it meaning.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from bot.canonical import approval_hash
from bot.clock import utc_iso
from store.records import Approval, Vote

__all__ = ["Approval", "Execution", "Kind", "State", "execution_of", "public_record"]


class Kind(StrEnum):
    TOOL_CALL = "tool_call"
    # Raised by signoff itself when an execution lease lapses: the call started, its outcome
    # is unknown, and a human decides whether to run it again.
    INTERRUPTED_SIDE_EFFECT = "interrupted_side_effect"
    # A question for a person, with no call to run: answered with one of its options or in
    # words, routed, delegated, escalated, reminded and expiring like an approval.
    QUESTION = "question"


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
    # A person answered instead of deciding: the call never runs (a tool call answered in
    # words), or a question got its answer.
    ANSWERED = "answered"


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

# How long a claim holds an approved call unless the config or the agent asks otherwise, and the
# longest either may ask for.
DEFAULT_LEASE = timedelta(minutes=10)
MAX_LEASE = timedelta(hours=24)

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
        approval.question,
    )


def _iso(value: datetime | None) -> str | None:
    return utc_iso(value) if value else None


def vote_record(vote: Vote) -> dict[str, Any]:
    """One vote towards a quorum as the record shows it: who, deciding what, when, on which
    surface (None where the audit trail does not say), standing in for whom."""
    return {
        "principal": vote.principal,
        "decision": vote.decision,
        "at": utc_iso(vote.at),
        "via": vote.via,
        "as_delegate_of": vote.as_delegate_of,
        "note": vote.note,
    }


def public_record(approval: Approval) -> dict[str, Any]:
    """The JSON form shared by the CLI's --json, the HTTP API and the webhooks. `votes` lists
    every vote counted towards an N-of-M quorum, oldest first, before and after the
    outcome (the one that decided it too); it is empty where one decision decides."""
    return {
        "id": approval.id,
        "tenant": approval.tenant,
        "run_id": approval.run_id,
        "kind": approval.kind,
        "capability": approval.capability,
        "tool": (
            None
            if approval.kind == Kind.QUESTION
            else {"name": approval.tool_name, "arguments": approval.tool_args}
        ),
        "question": approval.question,
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
        "answer": approval.answer,
        # Approved as edited: `tool` and `hash` are the revision that was approved; these
        # are what the agent asked for.
        "edited": approval.original_hash is not None,
        "original_hash": approval.original_hash,
        "original_arguments": approval.original_args,
        # Approved at once by a person's standing grant (its id; `decided_by` gave it).
        "approved_by_grant": approval.grant_id,
        "votes": [vote_record(v) for v in approval.votes],
        "grant_expires_at": _iso(approval.grant_expires_at),
        "claimed_at": _iso(approval.claimed_at),
        "lease_until": _iso(approval.lease_until),
        "executed_at": _iso(approval.executed_at),
        "outcome": approval.outcome,
        "origin_id": approval.origin_id,
        "follow_up_id": approval.follow_up_id,
        "superseded_by": approval.superseded_by,
        "escalation_level": approval.escalation_level,
        "step": approval.step,
        "preconditions": approval.preconditions,
        "resume": approval.resume,
        "version": approval.version,
    }
