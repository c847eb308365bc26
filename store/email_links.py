"""The statements on `email_links`: the single-use decision links of the email surface, by
the SHA-256 of their token (bot/email_links.py).

The table is declared here, beside its statements, on the schema's one `metadata` (so the
migrations' check and the tests' resets see it). A family of `Tx` (store/repository.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Column, ForeignKey, Index, String, Table, delete, select, update

from store.schema import UTCDateTime, metadata
from store.statements import Statements

# One link of one mailed card: it may take one action (approve or reject) on one revision
# (the hash the mail showed) of one request, as the one principal it was mailed to, once.
email_links = Table(
    "email_links",
    metadata,
    Column("token_hash", String(64), primary_key=True),
    Column("approval_id", String(36), ForeignKey("approvals.id"), nullable=False),
    Column("principal", String(128), nullable=False),
    Column("action", String(16), nullable=False),
    Column("shown_hash", String(64), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
    Column("used_at", UTCDateTime, nullable=True),
    Index("ix_email_links_expires", "expires_at"),
)


class EmailLinkStatements(Statements):
    """Decision links: record, use once (or give back), read, prune."""

    async def insert_email_links(self, rows: list[dict[str, Any]]) -> None:
        await self.conn.execute(email_links.insert(), rows)

    async def use_email_link(self, token_hash: str, now: datetime) -> Mapping[str, Any] | None:
        """Mark a link used, once and before it expires (a conditional update, so two
        replicas taking the same link at once cannot both succeed); its row, or None."""
        stmt = (
            update(email_links)
            .where(
                email_links.c.token_hash == token_hash,
                email_links.c.used_at.is_(None),
                email_links.c.expires_at > now,
            )
            .values(used_at=now)
            .returning(*email_links.c)
        )
        return await self._one(stmt, {})

    async def give_back_email_link(self, token_hash: str) -> None:
        """Make a used link usable again: the decision it was taken for never ran (the
        database failed under it), so it has not been spent."""
        await self.conn.execute(
            update(email_links).where(email_links.c.token_hash == token_hash).values(used_at=None)
        )

    async def email_link(self, token_hash: str) -> Mapping[str, Any] | None:
        """The link's row, to show its page or say why it is refused."""
        return await self._one(
            select(email_links).where(email_links.c.token_hash == token_hash), {}
        )

    async def prune_email_links(self, expired_before: datetime) -> int:
        result = await self.conn.execute(
            delete(email_links).where(email_links.c.expires_at < expired_before)
        )
        return int(result.rowcount or 0)
