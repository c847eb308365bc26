"""Database failures a human can act on become signoff's own errors, never a driver traceback."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from bot.errors import InvalidRequest, SchemaOutOfDate, StoreUnavailable
from store.migrate import ensure_current, upgrade
from store.repository import Store
from tests.support.databases import POSTGRES_ONLY
from tests.support.samples import approval_record


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("postgresql+asyncpg://postgres@127.0.0.1:1/signoff", "database unavailable"),
        # A SQLite file that cannot be opened names its path and why.
        ("sqlite+aiosqlite:///{tmp}/no/such/dir/signoff.db", "/no/such/dir does not exist"),
    ],
    ids=["postgres-refused", "sqlite-unopenable"],
)
async def test_unreachable_database_is_store_unavailable(
    url: str, says: str, tmp_path: Path
) -> None:
    store = Store.from_url(url.format(tmp=tmp_path))
    try:
        with pytest.raises(StoreUnavailable, match=says):
            await ensure_current(store.engine)
        with pytest.raises(StoreUnavailable):
            await upgrade(store.engine)
        with pytest.raises(StoreUnavailable):
            async with store.write() as tx:
                await tx.get_approval("x")
    finally:
        await store.close()


async def test_missing_postgres_database_is_store_unavailable(pg_admin_url: str) -> None:
    url = make_url(pg_admin_url).set(drivername="postgresql+asyncpg", database="signoff_absent")
    store = Store.from_url(url.render_as_string(hide_password=False))
    try:
        with pytest.raises(StoreUnavailable, match="does not exist"):
            await ensure_current(store.engine)
    finally:
        await store.close()


async def test_schema_mismatch_says_to_upgrade(store: Store) -> None:
    """A missing table is reported as what it is, on both databases (SQLite calls it an
    OperationalError, like a lost connection)."""
    async with store.engine.begin() as conn:
        await conn.exec_driver_sql("DROP TABLE votes")
    with pytest.raises(SchemaOutOfDate, match="signoff db upgrade"):
        async with store.read() as tx:
            await tx.votes_for("x")


@POSTGRES_ONLY  # SQLite ignores lengths
async def test_a_value_postgresql_refuses_is_invalid_input_not_an_outage(store: Store) -> None:
    too_long = dataclasses.asdict(approval_record(tenant="t" * 200))  # the column holds 128
    del too_long["votes"]  # read from `votes`, not a column
    with pytest.raises(InvalidRequest, match="refused a value"):
        async with store.write() as tx:
            await tx.insert_approval(too_long)
