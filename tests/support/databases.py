"""Database URLs as the tests' own drivers take them, and the statements the fixtures run
outside signoff (creating, dropping and migrating test databases)."""

from __future__ import annotations

import asyncpg
from sqlalchemy.engine import make_url

from store.engine import create_engine, normalize_url
from store.migrate import upgrade


def asyncpg_dsn(url: str) -> str:
    """A signoff PostgreSQL URL (any driver spelling) as asyncpg.connect takes it."""
    return make_url(normalize_url(url)).set(drivername="postgresql").render_as_string(False)


async def admin(url: str, *statements: str) -> None:
    """Run `statements` on the PostgreSQL database at `url`, outside any transaction (CREATE
    and DROP DATABASE)."""
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


async def migrate(url: str) -> None:
    """Bring the database at `url` to the newest schema."""
    engine = create_engine(url)
    try:
        await upgrade(engine)
    finally:
        await engine.dispose()
