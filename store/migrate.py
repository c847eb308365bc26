"""Schema migrations (Alembic) run from inside signoff, on an engine signoff built.

Alembic is imported only by the functions that use it: loading it costs about 100 ms, and
every CLI command checks the schema before it starts, which a database at the newest
revision passes without Alembic (`ensure_current`).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from store.engine import BEGIN_MODE, translated_errors
from store.errors import SchemaOutOfDate

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from sqlalchemy.engine import Connection

MIGRATIONS = Path(__file__).parent / "migrations"
# Any fixed number: the key of the PostgreSQL advisory lock that serialises migrations.
_MIGRATION_LOCK = 0x5160FF


def alembic_config(url: str | None = None) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if url:
        cfg.set_main_option("sqlalchemy.url", url)
    return cfg


@functools.cache
def _scripts() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

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
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(connection).get_current_revision()


async def current_revision(engine: AsyncEngine) -> str | None:
    async with translated_errors(), engine.connect() as conn:
        return await conn.run_sync(_current)


async def upgrade(engine: AsyncEngine) -> tuple[str | None, str]:
    """Bring the schema to head; returns (revision before, revision after). Idempotent, and
    safe to run from several processes at once (replicas starting together): they take turns,
    and all but the first find nothing to do."""
    from alembic import command

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


# `revision = "0009"` and `down_revision = "0008"` (or None), with or without a type hint.
_REVISION_LINE = re.compile(r"""^(revision|down_revision)\b[^=\n]*=\s*(None|"\w+")\s*$""", re.M)


@functools.cache
def shipped_head() -> str | None:
    """The newest revision, read from the migration files' `revision` and `down_revision`
    lines without loading Alembic; None unless every file states both plainly and they form
    one line of history (then only Alembic's own reading is used)."""
    parents: dict[str, str | None] = {}
    for path in (MIGRATIONS / "versions").glob("[!_]*.py"):
        lines = dict(match.groups() for match in _REVISION_LINE.finditer(path.read_text("utf-8")))
        if set(lines) != {"revision", "down_revision"} or lines["revision"] == "None":
            return None
        parent = lines["down_revision"]
        parents[lines["revision"].strip('"')] = None if parent == "None" else parent.strip('"')
    heads = set(parents) - set(parents.values())
    return heads.pop() if len(heads) == 1 else None


async def _recorded_revisions(engine: AsyncEngine) -> list[str] | None:
    """The rows of Alembic's version table, read with one plain query; None without it."""
    try:
        async with translated_errors(), engine.connect() as conn:
            result = await conn.execute(text("SELECT version_num FROM alembic_version"))
            return [row[0] for row in result]
    except SchemaOutOfDate:  # no version table: an empty database, or not signoff's
        return None


async def ready_to_use(engine: AsyncEngine) -> tuple[str | None, str] | None:
    """What a process does before it uses the database. The embedded default (SQLite) is
    brought to head in place, as `signoff db upgrade` would, so a new file just works; a
    shared PostgreSQL database is upgraded deliberately, and one behind is refused
    (`ensure_current`). Returns (revision before, revision after) when it upgraded."""
    try:
        await ensure_current(engine)
    except SchemaOutOfDate:
        if engine.dialect.name != "sqlite":
            raise
        before, after = await upgrade(engine)
        return (before, after) if before != after else None
    return None


async def ensure_current(engine: AsyncEngine) -> None:
    """Refuse to work on a schema that is missing or behind this version of signoff."""
    # The usual case, settled without loading Alembic; anything else gets Alembic's reading.
    shipped = shipped_head()
    if shipped is not None and await _recorded_revisions(engine) == [shipped]:
        return
    current = await current_revision(engine)
    head = head_revision()
    if current is not None and current not in known_revisions():
        # A newer release already upgraded the database (a rolling deploy): its migrations
        # only add, so this version keeps working until it is replaced.
        return
    if current != head:
        found = "an empty database" if current is None else f"schema revision {current}"
        raise SchemaOutOfDate(f"found {found}, this signoff needs {head}; run `signoff db upgrade`")
