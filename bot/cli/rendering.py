"""What the CLI prints: the plain-text card, its one-line rows, and JSON.

Agent-chosen text never drives the terminal nor hides or reorders what is shown: every value
goes through `bot/visible.py`, shared by every surface.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from bot import visible
from bot.card_sections import Item, Kind
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
    """The plain-text card: what a human reviews before deciding from the terminal. The
    sections are bot/card_sections.py's; items stand in two columns, and every line of agent
    text is one terminal line (continuations indented, so none can pose as a card line)."""
    lines: list[str] = []
    for section in card.sections:
        kind = section.kind
        if kind == Kind.TITLE:
            lines += [safe(section.text), "=" * min(len(section.text), 72)]
            lines += [_column(item) for item in section.items] + [""]
        elif kind == Kind.SUMMARY:
            lines += [_block(section.text), ""]
        elif kind == Kind.FIELDS:
            lines += [f"  {safe(item.line)}" for item in section.items]
        elif kind in (Kind.ARGUMENTS, Kind.CHANGES):
            lines.append(section.heading)
            lines += [f"  {safe(item.line)}" for item in section.items]
        elif kind == Kind.REASON:
            lines.append(f"{section.heading}: {_block(section.text)}")
        elif kind == Kind.OUTCOME:
            lines += [safe(line.headline + line.rest) for line in section.lines]
            lines += [f"{item.label}{item.sep}{_block(item.value)}" for item in section.items]
        else:  # what, people, hash: the facts a terminal shows in columns
            lines += [_column(item) for item in section.items]
    return "\n".join(lines)


def _column(item: Item) -> str:
    return f"{item.label:<13} {safe(item.value)}"


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
