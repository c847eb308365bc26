"""The decision links of mailed cards: one per action, per recipient, per revision.

A link carries 256 random bits; only their SHA-256 is stored (store/email_links.py), with
what the link may do: one action (approve or reject) on the revision the mail showed (its
hash), as the principal it was mailed to, until the request's deadline. Using it is a
conditional update, so it works once whichever replica it reaches; a decision the database
failed under gives it back. Whether the decision itself is allowed (entitlement,
delegation, quorum, self-approval, a changed request) is the Operator's to judge, as for
every surface.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from bot.clock import Clock
from store.repository import Store

LINK_PATH = "/email/links/"
Action = Literal["approve", "reject"]
ACTIONS: tuple[Action, ...] = ("approve", "reject")
# Used and expired links are kept this long past their deadline, to say why they are refused.
KEEP = timedelta(days=7)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


@dataclass(frozen=True, slots=True)
class Link:
    """What a link may do, as stored."""

    approval_id: str
    principal: str
    action: Action
    shown_hash: str
    expires_at: datetime
    used_at: datetime | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Link:
        return cls(
            row["approval_id"],
            row["principal"],
            row["action"],
            row["shown_hash"],
            row["expires_at"],
            row["used_at"],
        )


class DecisionLinks:
    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock

    async def make(
        self, approval_id: str, principal: str, shown_hash: str, expires_at: datetime
    ) -> dict[Action, str]:
        """A new token per action for `principal` on this revision (put each after
        LINK_PATH)."""
        now = self.clock.now()
        tokens = {action: secrets.token_urlsafe(32) for action in ACTIONS}
        rows = [
            {
                "token_hash": digest(token),
                "approval_id": approval_id,
                "principal": principal,
                "action": action,
                "shown_hash": shown_hash,
                "created_at": now,
                "expires_at": expires_at,
                "used_at": None,
            }
            for action, token in tokens.items()
        ]
        async with self.store.write(background=True) as tx:
            await tx.prune_email_links(now - KEEP)
            await tx.insert_email_links(rows)
        return tokens

    async def peek(self, token: str) -> Link | None:
        """The link, without using it; None for one never issued (or long pruned)."""
        async with self.store.read() as tx:
            row = await tx.email_link(digest(token))
        return Link.from_row(row) if row is not None else None

    async def use(self, token: str) -> Link | None:
        """The link, now used; None if it is unknown, used already, or past its deadline."""
        async with self.store.write() as tx:
            row = await tx.use_email_link(digest(token), self.clock.now())
        return Link.from_row(row) if row is not None else None

    async def give_back(self, token: str) -> None:
        async with self.store.write() as tx:
            await tx.give_back_email_link(digest(token))
