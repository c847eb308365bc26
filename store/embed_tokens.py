"""The statements on `embed_tokens`: the short-lived tokens a partner's page frames one
request's approval with (`/embed/<token>`), by the SHA-256 of their token
(bot/embed_tokens.py).

The table is declared here, beside its statements, on the schema's one `metadata` (so the
migrations' check and the tests' resets see it), as store/email_links.py does. A family of
`Tx` (store/repository.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Column, ForeignKey, Index, String, Table, delete, select, update

from store.schema import UTCDateTime, metadata
from store.statements import Statements

# One token: it shows one request to one principal, framed by one origin, and decides it
# once (approve or reject, against the hash the page showed) before it expires.
embed_tokens = Table(
    "embed_tokens",
    metadata,
    Column("token_hash", String(64), primary_key=True),
    Column("approval_id", String(36), ForeignKey("approvals.id"), nullable=False),
    Column("principal", String(128), nullable=False),
    Column("parent_origin", String(300), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
    Column("used_at", UTCDateTime, nullable=True),
    Index("ix_embed_tokens_expires", "expires_at"),
)


class EmbedTokenStatements(Statements):
    """Embed tokens: record, use once (or give back), read, prune."""

    async def insert_embed_token(self, row: Mapping[str, Any]) -> None:
        await self.conn.execute(embed_tokens.insert(), dict(row))

    async def use_embed_token(self, token_hash: str, now: datetime) -> Mapping[str, Any] | None:
        """Mark a token used, once and before it expires (a conditional update, so two
        replicas taking the same token at once cannot both succeed); its row, or None."""
        stmt = (
            update(embed_tokens)
            .where(
                embed_tokens.c.token_hash == token_hash,
                embed_tokens.c.used_at.is_(None),
                embed_tokens.c.expires_at > now,
            )
            .values(used_at=now)
            .returning(*embed_tokens.c)
        )
        return await self._one(stmt, {})

    async def give_back_embed_token(self, token_hash: str) -> None:
        """Make a used token usable again: the decision it was taken for was refused or
        failed, so nothing was decided with it."""
        await self.conn.execute(
            update(embed_tokens).where(embed_tokens.c.token_hash == token_hash).values(used_at=None)
        )

    async def embed_token(self, token_hash: str) -> Mapping[str, Any] | None:
        """The token's row, to show its page or say why it is refused."""
        return await self._one(
            select(embed_tokens).where(embed_tokens.c.token_hash == token_hash), {}
        )

    async def prune_embed_tokens(self, expired_before: datetime) -> int:
        result = await self.conn.execute(
            delete(embed_tokens).where(embed_tokens.c.expires_at < expired_before)
        )
        return int(result.rowcount or 0)
