"""What every surface (Slack, Telegram, web) provides to the core.

A channel does three things: verify an inbound request and establish who sent it, turn it
into an Operator call, and render cards back. Posting and updating cards happen from the
outbox runner, which calls the methods below and records each MessageRef in `card_messages`
together with the hash the card showed. A channel never writes SQL and never decides.

Each channel is built by its surface's factory (bot.surfaces) and runs through one
lifecycle, the same for all (bot.bootstrap): `add_routes` when the server is assembled,
`start` before the outbox runs, `stop` after it; a channel with nothing to do there does
nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from aiohttp import web

from bot.card import Card
from bot.target import Target


@dataclass(frozen=True, slots=True)
class MessageRef:
    """Where one rendering of a card lives: enough to edit it in place later."""

    channel: str  # "slack", "telegram", "web"
    address: str  # Slack channel id, Telegram chat id, ...
    message_id: str  # Slack ts, Telegram message id, ...


@runtime_checkable
class Channel(Protocol):
    """One surface. `name` is the prefix of the route notify targets it serves
    (`slack` for "slack:C0FINANCE" and "slack:dm")."""

    name: str

    def add_routes(self, app: web.Application) -> None:
        """Add what the channel serves (its webhook, its pages) to the server's application;
        a process without an HTTP server (`signoff worker`) never calls it."""
        ...

    async def start(self) -> None:
        """Open what the channel holds for its lifetime (sessions, a polling loop); called
        before the outbox can post through it."""
        ...

    async def stop(self) -> None:
        """Close what `start` opened; called after the outbox stopped, last started first."""
        ...

    async def post_card(self, card: Card, target: Target) -> MessageRef:
        """Post a card to one target: a channel ("slack:C0FINANCE") or one principal's direct
        messages ("slack:@alice"; the outbox expands a route's "slack:dm" into these).
        Raising means "try again later": the outbox retries (RetryLater to say when)."""
        ...

    async def update_card(self, ref: MessageRef, card: Card) -> None:
        """Re-render a posted card for the approval's current state (buttons gone once it is
        decided). Must be idempotent: the same state rendered twice is harmless."""
        ...

    async def send_notice(self, target: Target, text: str) -> None:
        """Send plain text (written by signoff, never markup) to one principal's direct
        messages ("slack:@alice")."""
        ...

    async def send_reply(self, ref: MessageRef, text: str) -> None:
        """Send plain text (written by signoff, never markup) as a reply to a posted card:
        in its Slack thread, as a Telegram reply (a reminder before the request expires)."""
        ...
