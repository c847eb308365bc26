"""The statements on `web_logins`: single-use sign-in links to the web surface, by the
SHA-256 of their token (bot/signin.py).

A family of `Tx` (store/repository.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select, update

from store.schema import web_logins
from store.statements import Statements


class WebLoginStatements(Statements):
    """Sign-in links: record, use once, read, prune."""

    async def insert_web_login(
        self, token_hash: str, principal: str, now: datetime, expires_at: datetime
    ) -> None:
        await self.conn.execute(
            web_logins.insert().values(
                token_hash=token_hash, principal=principal, created_at=now, expires_at=expires_at
            )
        )

    async def use_web_login(self, token_hash: str, now: datetime) -> str | None:
        """Mark a sign-in link used, once and before it expires (a conditional update, so two
        replicas opening the same link at once cannot both succeed); its principal, or None."""
        stmt = (
            update(web_logins)
            .where(
                web_logins.c.token_hash == token_hash,
                web_logins.c.used_at.is_(None),
                web_logins.c.expires_at > now,
            )
            .values(used_at=now)
            .returning(web_logins.c.principal)
        )
        row = await self._one(stmt, {})
        return str(row["principal"]) if row else None

    async def web_login(self, token_hash: str) -> Mapping[str, Any] | None:
        """The link's row (principal, expires_at, used_at), to say why it was refused."""
        return await self._one(select(web_logins).where(web_logins.c.token_hash == token_hash), {})

    async def prune_web_logins(self, expired_before: datetime) -> int:
        result = await self.conn.execute(
            delete(web_logins).where(web_logins.c.expires_at < expired_before)
        )
        return int(result.rowcount or 0)
