"""Schema migrations (Alembic) run from inside signoff, on an engine signoff built."""

from __future__ import annotations

import functools
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.errors import SchemaOutOfDate
from store.engine import BEGIN_MODE, translated_errors

MIGRATIONS = Path(__file__).parent / "migrations"
# Any fixed number: the key of the PostgreSQL advisory lock that serialises migrations.
_MIGRATION_LOCK = 0x5160FF


def alembic_config(url: str | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if url:
        cfg.set_main_option("sqlalchemy.url", url)
    return cfg


@functools.cache
def _scripts() -> ScriptDirectory:
    # The migrations ship with the code: read them once per process, not on every /readyz.
    return ScriptDirectory.from_config(alembic_config())


def head_revision() -> str:
    head = _scripts().get_current_head()
    assert head is not None
    return head


@functools.cache
def known_revisions() -> frozenset[str]:
    """Every revision this version of signoff ships."""
    return frozenset(script.revision for script in _scripts().walk_revisions())


def _current(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


async def current_revision(engine: AsyncEngine) -> str | None:
    async with translated_errors(), engine.connect() as conn:
        return await conn.run_sync(_current)


async def upgrade(engine: AsyncEngine) -> tuple[str | None, str]:
    """Bring the schema to head; returns (revision before, revision after). Idempotent, and
    safe to run from several processes at once (replicas starting together): they take turns,
    and all but the first find nothing to do."""

    def _upgrade(connection: Connection) -> str | None:
        if connection.dialect.name == "postgresql":
            connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK})")
        before = _current(connection)
        cfg = alembic_config()
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, "head")
        return before

    # On SQLite, BEGIN IMMEDIATE takes the file's write lock before reading the revision.
    writer = engine.execution_options(**{BEGIN_MODE: "IMMEDIATE"})
    async with translated_errors(), writer.begin() as conn:
        before = await conn.run_sync(_upgrade)
    return before, head_revision()


async def ensure_current(engine: AsyncEngine) -> None:
    """Refuse to work on a schema that is missing or behind this version of signoff."""
    current = await current_revision(engine)
    head = head_revision()
    if current is not None and current not in known_revisions():
        # A newer release already upgraded the database (a rolling deploy): its migrations
        # only add, so this version keeps working until it is replaced.
        return
    if current != head:
        found = "an empty database" if current is None else f"schema revision {current}"
        raise SchemaOutOfDate(f"found {found}, this signoff needs {head}; run `signoff db upgrade`")
