"""Single-use sign-in links to the web surface.

A link is made for one principal by someone who already proved who they are: an operator at
the CLI (`signoff web login --as NAME`), or the person themselves in Slack or Telegram, where
the chat identity proves it. The link carries 256 random bits; only their SHA-256 is stored,
and using it is a conditional update, so a link opens one session, once, before it expires,
whichever replica it reaches.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from bot.clock import Clock
from bot.errors import SignInRefused, UnknownPrincipal
from bot.routing import Directory
from store.repository import Store

LOGIN_PATH = "/web/login/"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


class SignInLinks:
    def __init__(self, store: Store, directory: Directory, clock: Clock, ttl: timedelta) -> None:
        self.store = store
        self.directory = directory
        self.clock = clock
        self.ttl = ttl

    async def make(self, principal: str) -> str:
        """A new sign-in token for `principal` (put it after LOGIN_PATH)."""
        if principal not in self.directory.principals:
            raise UnknownPrincipal(f"no principal {principal!r} in the configuration")
        token = secrets.token_urlsafe(32)
        now = self.clock.now()
        async with self.store.write() as tx:
            await tx.prune_web_logins(now - timedelta(days=1))
            await tx.insert_web_login(_digest(token), principal, now, now + self.ttl)
        return token

    def url(self, public_url: str, token: str) -> str:
        return public_url.rstrip("/") + LOGIN_PATH + token

    async def use(self, token: str) -> str:
        """The principal a link was made for, marking it used; SignInRefused saying why not."""
        now = self.clock.now()
        digest = _digest(token)
        async with self.store.write() as tx:
            principal = await tx.use_web_login(digest, now)
            row = None if principal else await tx.web_login(digest)
        if principal is not None:
            if principal not in self.directory.principals:
                raise SignInRefused(f"{principal!r} is no longer a principal of this signoff")
            return principal
        raise _refusal(row)

    async def refusal(self, token: str) -> SignInRefused | None:
        """Why using this link now would be refused, without using it; None if it would
        open a session (until someone uses it first)."""
        async with self.store.read() as tx:
            row = await tx.web_login(_digest(token))
        if row is not None and row["used_at"] is None and row["expires_at"] > self.clock.now():
            return None
        return _refusal(row)


def _refusal(row: Mapping[str, Any] | None) -> SignInRefused:
    """The refusal of a link that did not open a session: `gone` when it was a real link
    that is now used up or expired (the web answers 410 Gone), not for one never issued."""
    if row is None:
        return SignInRefused("This sign-in link is not valid. Ask for a new one.")
    if row["used_at"] is not None:
        return SignInRefused(
            "This sign-in link was already used. Each link opens one session; ask for a new one.",
            gone=True,
        )
    return SignInRefused("This sign-in link has expired. Ask for a new one.", gone=True)
