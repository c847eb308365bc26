"""What the CLI prints: the plain-text card, its one-line rows, and JSON.

Agent-chosen text never drives the terminal nor hides or reorders what is shown: every value
goes through `bot/visible.py`, shared by every surface.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from bot import visible
from bot.clock import utc_iso

if TYPE_CHECKING:
    from bot.card import Card
    from store.records import Approval, Delegation, OutboxJob


def safe(text: Any) -> str:
    """One line of agent-chosen text: it must not drive the terminal (ANSI escapes, carriage
    returns) nor reorder or hide what is shown (bot/visible.py, shared by every surface)."""
    return visible.one_line(text)


def _block(text: str) -> str:
    """Multi-line agent text, continuation lines indented so none can pose as a card line."""
    return "\n    ".join(safe(line) for line in text.splitlines() or [""])


def emit_json(document: Any) -> None:
    text = json.dumps(document, indent=2, ensure_ascii=False, default=str)
    # These can only occur inside strings here, where a \uXXXX escape is the same JSON value
    # and inert in a terminal.
    print(visible.in_json(text))


def render_card(card: Card) -> str:
    """The plain-text card: what a human reviews before deciding from the terminal."""
    lines = [f"{safe(card.title)}", "=" * min(len(card.title), 72)]
    if card.summary:
        lines += [_block(card.summary), ""]
    lines.append(f"capability  {card.capability}    tool  {safe(card.tool_name)}")
    for label, value in card.fields:
        lines.append(f"  {safe(label)}: {safe(value)}")
    if card.arguments:
        lines.append("arguments")
        lines += [f"  {safe(key)} = {safe(value)}" for key, value in card.arguments]
    if card.reason:
        lines.append(f"reason (from the agent, unverified): {_block(card.reason)}")
    lines.append(f"requested by  {safe(card.requested_by or 'unknown')}")
    lines.append(f"assigned to   {card.assignee}")
    if card.assigned_note:
        lines.append(f"              ({safe(card.assigned_note)})")
    lines.append(f"state         {card.state}")
    if card.progress:
        lines.append(f"votes         {card.progress}")
    if card.expires_in is not None:
        lines.append(f"expires       in {card.expires_in} ({card.expires_at:%Y-%m-%d %H:%M} UTC)")
    elif card.overdue:
        lines.append(
            f"expired       at {card.expires_at:%Y-%m-%d %H:%M} UTC "
            "(recorded as expired on the next decision attempt)"
        )
    if card.decided_by:
        decided = f"{card.decided_by} at {card.decided_at:%Y-%m-%d %H:%M} UTC"
        if card.decision_note:
            decided += f": {_block(card.decision_note)}"
        lines.append(f"decided by    {decided}")
    lines.append(f"id            {card.approval_id}")
    lines.append(f"hash          sha256:{card.hash}")
    return "\n".join(lines)


APPROVALS_HEADER = f"{'id':<36}  {'state':<15} {'capability':<24} {'assignee':<16} expires (UTC)"


def approval_row(approval: Approval) -> str:
    """One line of `approvals list`, under APPROVALS_HEADER."""
    title = (
        approval.presentation.get("title", "") if isinstance(approval.presentation, dict) else ""
    )
    return (
        f"{approval.id}  {approval.state:<15} {approval.capability:<24} "
        f"{approval.assignee:<16} {approval.expires_at:%Y-%m-%d %H:%M}  {safe(title)[:40]}"
    )


def delegation_record(delegation: Delegation) -> dict[str, Any]:
    """A delegation as `--json` prints it."""
    return {
        "id": delegation.id,
        "principal": delegation.principal,
        "delegate": delegation.delegate,
        "scope": delegation.scope,
        "starts_at": utc_iso(delegation.starts_at),
        "ends_at": utc_iso(delegation.ends_at) if delegation.ends_at else None,
        "note": delegation.note,
        "created_by": delegation.created_by,
        "revoked_at": utc_iso(delegation.revoked_at) if delegation.revoked_at else None,
        "revoked_by": delegation.revoked_by,
    }


def job_record(job: OutboxJob) -> dict[str, Any]:
    """An outbox job as `outbox list --json` prints it."""
    return {
        "id": job.id,
        "kind": job.kind,
        "approval_id": job.approval_id,
        "state": job.state,
        "attempts": job.attempts,
        "run_after": utc_iso(job.run_after),
        "locked_by": job.locked_by,
        "last_error": job.last_error,
        "delivery_id": job.payload.get("delivery_id"),
    }
