"""Reading a server's database behind its back (sqlite3 on the file, or asyncpg), as the
acceptance tests check what `signoff serve` processes wrote."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from contextlib import closing
from datetime import UTC, datetime
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url

from tests.support.databases import asyncpg_dsn


def query(db_url: str, sql: str) -> list[dict[str, Any]]:
    """Read the database behind the servers' backs (sqlite3 on the file, or asyncpg)."""
    if db_url.startswith("sqlite"):
        path = make_url(db_url).database
        assert path
        with closing(sqlite3.connect(path, timeout=10)) as conn:
            conn.row_factory = sqlite3.Row
            return [dict(row) for row in conn.execute(sql)]

    async def fetch() -> list[dict[str, Any]]:
        conn = await asyncpg.connect(asyncpg_dsn(db_url))
        try:
            return [dict(row) for row in await conn.fetch(sql)]
        finally:
            await conn.close()

    return asyncio.run(fetch())


def _utc(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):  # SQLite: naive UTC text
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def webhook_jobs(db_url: str) -> list[dict[str, Any]]:
    """The outbox's webhook jobs, oldest first, their payload decoded, `delivery_id` lifted
    out and `locked_until` in UTC on both databases."""
    rows = query(
        db_url,
        "SELECT id, state, attempts, locked_by, locked_until, payload FROM outbox "
        "WHERE kind = 'webhook' ORDER BY id",
    )
    for row in rows:
        payload = row["payload"]
        row["payload"] = json.loads(payload) if isinstance(payload, str) else payload
        row["delivery_id"] = row["payload"]["delivery_id"]
        row["locked_until"] = _utc(row["locked_until"])
    return rows
