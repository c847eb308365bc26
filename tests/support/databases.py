"""Database URLs as the tests' own drivers take them, the statements the fixtures run outside
signoff (creating, dropping and migrating test databases), and the marks that run a test on
one database only."""

from __future__ import annotations

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from store.engine import create_engine, normalize_url
from store.migrate import upgrade

# The `db_url` fixture (tests/conftest.py) runs a test on SQLite and on PostgreSQL; these marks
# run it on one. SQLITE_ONLY: what no database can change (a refusal made before any query) runs
# once, and what only SQLite does (its file, its inline writes); POSTGRES_ONLY: what only
# PostgreSQL does (lengths, the pool, other processes on one database).
SQLITE_ONLY = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
POSTGRES_ONLY = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


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
