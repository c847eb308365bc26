"""Reminders before expiry: a route's `remind_before` nudges a pending request's assignees
once, that long before the request expires.

The moment is fixed when the request is made (`remind_at`, the route's `remind_before`
ahead of `expires_at`; none when the request's own TTL is shorter than that). The sweeper
runs it as one of its clocks on the injected clock: for each due row, locked, it records
`reminded_at` with a conditional update (so two sweepers never remind twice) and queues
`reminder` jobs in the same transaction: a reply under each posted card of the request (its
Slack thread, a Telegram reply) and a direct message to each assignee (the assignee if a
principal, else each member of the assignee group) on every chat surface the route notifies
that they have an account on. No second card, no state change, no audit event: a reminder
changes nothing about the request.
"""

from __future__ import annotations

from datetime import datetime

from bot import effects, expiry
from bot.durations import format_duration
from bot.model import State
from bot.routing import Directory
from bot.visible import visible
from store.records import Approval
from store.repository import Tx


async def remind_if_due(tx: Tx, directory: Directory, row: Approval, now: datetime) -> bool:
    """The sweeper's reminder clock: mark `row` (locked) reminded and queue its reminders if
    the reminder is due and nobody sent it yet; False when nothing is to be done."""
    if row.state != State.PENDING or expiry.expiry_due(row, now) is not None:
        return False  # decided meanwhile, or expiring instead
    if not await tx.mark_reminded(row.id, now):
        return False
    await effects.cause(tx, effects.Reminders(row), now=now, directory=directory)
    return True


def title_of(approval: Approval) -> str:
    """The request's title as a reminder quotes it, invisible characters shown (bot.visible)."""
    presentation = approval.presentation if isinstance(approval.presentation, dict) else {}
    return visible(presentation.get("title") or approval.capability)


def deadline_text(approval: Approval, now: datetime) -> str:
    """ "expires at 2026-12-01 10:00 UTC (in 3 h 59 m)" """
    left = approval.expires_at - now
    within = f" (in {format_duration(left)})" if left.total_seconds() > 0 else ""
    return f"expires at {approval.expires_at:%Y-%m-%d %H:%M} UTC{within}"


def thread_text(directory: Directory, approval: Approval, now: datetime) -> str:
    """The reply under a card: who is asked, and the deadline."""
    return (
        f"Reminder: this request still waits for a decision by "
        f"{directory.name_of(approval.assignee)}; it {deadline_text(approval, now)}."
    )


def direct_text(approval: Approval, now: datetime) -> str:
    """The direct message to one assignee."""
    return (
        f'Reminder: "{title_of(approval)}" ({approval.capability}) waits for your decision; '
        f"it {deadline_text(approval, now)}. Decide on its card."
    )
