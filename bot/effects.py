"""What a change causes outside the database, stated as data: the effects a transition, a
create or a delegation hands to the outbox in its own transaction.

Decision modules (bot.transitions, bot.intake, bot.expiry, bot.escalation, bot.operator, ...)
say *which* effects a change causes ("post cards for these targets", "announce this
transition") and hand them over with `cause`; the outbox (bot.outbox.jobs) owns turning them
into jobs: their kinds, payloads and dedupe keys, and which rows they read to do it. So no
decision module imports the outbox, and the outbox imports nothing above it.

The outbox installs itself here (`install`) when bot.outbox is imported, which every process
that changes approvals does (bot.bootstrap, the CLI). `cause` runs the outbox at once, in the
caller's transaction, so a crash can delay an effect, never lose it; causing an effect with no
outbox installed fails loudly rather than dropping it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from bot.routing import Directory
from bot.target import Target
from store.records import Approval, Delegation, Event

if TYPE_CHECKING:
    from store.repository import Tx


@dataclass(frozen=True, slots=True)
class PostCards:
    """A new request's cards, one per message: each channel target, and each approver with an
    account on the surface of a `...:dm` target (`targets`: the route's notify list)."""

    approval: Approval
    targets: tuple[Target, ...]


@dataclass(frozen=True, slots=True)
class PersonalCards:
    """A card to `who` (a principal, or each member of a group) in their direct messages, on
    each chat surface the request's route notifies: a new assignee, a delegate."""

    approval: Approval
    who: str


@dataclass(frozen=True, slots=True)
class Announce:
    """A transition the world hears of: the webhook (if its state warrants one) and an update
    of every card showing the approval."""

    approval: Approval
    event: Event


@dataclass(frozen=True, slots=True)
class CardUpdate:
    """One posted card, re-rendered for the approval as it is now."""

    approval: Approval
    card_message_id: int


@dataclass(frozen=True, slots=True)
class Notice:
    """Plain text to one principal on each chat surface they have an account on; `key` makes
    causing the same notice twice a no-op."""

    principal: str
    text: str
    key: str


@dataclass(frozen=True, slots=True)
class DelegationEdges:
    """A new delegation's start, and its end if it has one, each due at its time."""

    delegation: Delegation


@dataclass(frozen=True, slots=True)
class DelegationRevoked:
    """A delegation revoked before its end: both people are told now."""

    delegation_id: str


@dataclass(frozen=True, slots=True)
class Reminders:
    """A reminder before the approval expires: under each of its cards, and to each assignee
    whose card is not in their own direct messages."""

    approval: Approval


Effect = (
    PostCards
    | PersonalCards
    | Announce
    | CardUpdate
    | Notice
    | DelegationEdges
    | DelegationRevoked
    | Reminders
)

# The outbox: queues the jobs `effects` cause in `tx`, in order, each as it would alone.
Outbox = Callable[["Tx", Directory | None, Sequence[Effect], datetime], Awaitable[None]]

_outbox: Outbox | None = None


def install(outbox: Outbox) -> None:
    """Make `outbox` the one that turns effects into jobs (bot.outbox does, on import)."""
    global _outbox
    _outbox = outbox


async def cause(
    tx: Tx, *effects: Effect, now: datetime, directory: Directory | None = None
) -> None:
    """Queue what `effects` cause in `tx`, the caller's transaction, due `now`. `directory`
    routes them (who has an account where, which route notifies where); the effects that
    address no one by route (a card update, a delegation's edges) need none."""
    if _outbox is None:
        raise RuntimeError("no outbox installed: import bot.outbox before changing approvals")
    await _outbox(tx, directory, effects, now)
