"""Migrations on empty databases of both kinds, and the refusal to run on an old schema."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import inspect

from bot.errors import SchemaOutOfDate
from store.engine import create_engine
from store.migrate import ensure_current, head_revision, upgrade
from store.schema import ALL_TABLES


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}"
    return request.getfixturevalue("pg_empty_url")


async def test_upgrade_creates_schema_and_second_run_is_a_no_op(empty_url: str) -> None:
    engine = create_engine(empty_url)
    try:
        with pytest.raises(SchemaOutOfDate, match="signoff db upgrade"):
            await ensure_current(engine)
        assert await upgrade(engine) == (None, head_revision())
        async with engine.connect() as conn:
            tables = await conn.run_sync(lambda c: set(inspect(c).get_table_names()))
            indexes = await conn.run_sync(
                lambda c: {i["name"] for i in inspect(c).get_indexes("approvals")}
            )
        assert {t.name for t in ALL_TABLES} <= tables
        assert "ix_approvals_pending_expiry" in indexes
        await ensure_current(engine)
        assert await upgrade(engine) == (head_revision(), head_revision())
    finally:
        await engine.dispose()


async def test_concurrent_upgrades_take_turns(empty_url: str) -> None:
    """Replicas starting together may all run `db upgrade`: one migrates, the others find
    nothing to do, none fails."""
    engines = [create_engine(empty_url) for _ in range(4)]
    try:
        # Without the lock the racers can block each other for good: fail, don't hang.
        results = await asyncio.wait_for(
            asyncio.gather(*(upgrade(engine) for engine in engines)), timeout=60
        )
        assert sorted(results, key=str) == sorted(
            [(None, head_revision())] + [(head_revision(), head_revision())] * 3, key=str
        )
        await ensure_current(engines[0])
    finally:
        for engine in engines:
            await engine.dispose()


async def test_brand_new_sqlite_file_opened_by_many_at_once(tmp_path: Path) -> None:
    """The first connections to a new file race to switch it to WAL; SQLite answers the losers
    "database is locked" at once (a deadlock, so no busy wait). Each round is a new file."""
    for round_ in range(20):
        url = f"sqlite+aiosqlite:///{tmp_path / f'new-{round_}.db'}"
        engines = [create_engine(url) for _ in range(6)]
        try:
            results = await asyncio.wait_for(
                asyncio.gather(*(upgrade(engine) for engine in engines)), timeout=60
            )
            assert sum(before is None for before, _ in results) == 1
        finally:
            for engine in engines:
                await engine.dispose()
