"""Escalation: a pending request nobody answered moves along its route's chain.

The sweeper escalates each request whose `escalate_at` has passed, one locked row at a time
like its other clocks: the request is reassigned to the next step's principal or group
(`escalated` event, a card to the new assignee, the old cards say "escalated to Carol Diaz
after 24 h"); `escalate_at` moves to the step after that, each step's `after` counting from
the previous step. The original approvers and every earlier assignee keep their authority
(the assignee being replaced joins `approvers`). When the chain is exhausted the request
waits for its TTL and then expires: escalation never decides.

The chain is the route's as configured now (matched again by tenant and capability), so a
config change applies to requests already waiting; a request whose route is gone stops
escalating.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from bot import effects, expiry, transitions
from bot.durations import format_duration
from bot.errors import NoRoute
from bot.model import State
from bot.routing import Directory, Escalation, keeping_authority
from bot.transitions import Transition
from store.records import Approval
from store.repository import Tx


async def escalate(tx: Tx, directory: Directory, row: Approval, now: datetime) -> Transition | None:
    """Move `row` (pending, locked in `tx`) one step along its chain if that step is due;
    None when nothing is due (decided meanwhile, expiring instead, or no step left)."""
    if (
        row.state != State.PENDING
        or row.escalate_at is None
        or now < row.escalate_at
        or expiry.expiry_due(row, now) is not None  # expiring wins
    ):
        return None
    chain = _chain(directory, row)
    if row.escalation_level >= len(chain):
        # The chain got shorter (config change) or the route is gone: nothing to do.
        await tx.clear_escalation(row.id)
        return None
    step = chain[row.escalation_level]
    following = row.escalation_level + 1
    waited = _waited(step.after)
    name = directory.name_of(step.to)
    values: dict[str, object] = {
        "state": State.PENDING.value,
        "assignee": step.to,
        "approvers": keeping_authority(row),
        "escalation_level": following,
        "escalate_at": now + chain[following].after if following < len(chain) else None,
        "assigned_note": f"escalated to {name} after {waited} without a decision",
    }
    result = await transitions.apply(
        tx,
        directory,
        row,
        values,
        "escalated",
        now=now,
        actor="signoff:escalation",
        data={
            "from": row.assignee,
            "to": step.to,
            "after": waited,
            "level": following,
            "last": following >= len(chain),
        },
    )
    cards = effects.PersonalCards(result.approval, step.to)
    await effects.cause(tx, cards, now=now, directory=directory)
    return result


def restarted(directory: Directory, row: Approval, now: datetime) -> datetime | None:
    """When the current escalation step fires if its wait starts again now (a hand-off gives
    the new assignee the step's full wait); None when no step is left."""
    chain = _chain(directory, row)
    return now + chain[row.escalation_level].after if row.escalation_level < len(chain) else None


def _chain(directory: Directory, row: Approval) -> tuple[Escalation, ...]:
    try:
        return directory.route_of(row).escalation
    except NoRoute:
        return ()


def _waited(after: timedelta) -> str:
    """ "24 h" rather than "1 d" for the waits people configure in hours."""
    hours, rest = divmod(int(after.total_seconds()), 3600)
    return f"{hours} h" if not rest and hours <= 72 else format_duration(after)
