"""One agent deployment (tests/support/agent_deployment.py) per test module and database,
emptied before each test that uses it.

Starting `signoff serve` costs a new interpreter importing the server (1.5-2 s of CPU); the
MCP gateway's modules start one per test although what they test is the gateway. A module
marked `shared_deployment` gets one server per database for all its tests instead, on a
database of its own (not the test process's PostgreSQL database, whose reset ends every
connection to it), with every table emptied before each test: each test still sees an empty
service, as with a deployment of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path

import asyncpg
from sqlalchemy.engine import make_url

from store.engine import normalize_url
from store.schema import metadata
from tests.support.agent_deployment import Deployment, deploy
from tests.support.cli import sqlite_url
from tests.support.databases import admin, asyncpg_dsn, migrate

# Children first, so no foreign key objects; alembic_version is not in the metadata.
_EMPTY = [f"DELETE FROM {table.name}" for table in reversed(metadata.sorted_tables)]


async def _empty_postgresql(url: str) -> None:
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        sequences = await conn.fetch(
            "SELECT sequencename FROM pg_sequences WHERE schemaname = 'public'"
        )
        statements = [*_EMPTY, *(f"ALTER SEQUENCE {r[0]} RESTART" for r in sequences)]
        async with conn.transaction():
            await conn.execute("; ".join(statements))
    finally:
        await conn.close()


def _empty_sqlite(path: Path) -> None:
    conn = sqlite3.connect(path, timeout=30, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        for statement in _EMPTY:
            conn.execute(statement)
        with contextlib.suppress(sqlite3.OperationalError):  # no AUTOINCREMENT table
            conn.execute("DELETE FROM sqlite_sequence")
        conn.execute("COMMIT")
    finally:
        conn.close()


class SharedDeployments:
    """The module's deployments, one per database kind, started on first use."""

    def __init__(self, tmp: Path, sqlite_template: Path, pg_admin_url: Callable[[], str]) -> None:
        self._tmp = tmp
        self._sqlite_template = sqlite_template
        self._pg_admin_url = pg_admin_url
        self._running: dict[str, tuple[Deployment, Callable[[], None]]] = {}
        self._stops: list[Callable[[], None]] = []

    def get(self, kind: str) -> Deployment:
        """The module's deployment on `kind` ("sqlite" or "postgresql"), emptied."""
        if kind not in self._running:
            self._running[kind] = self._start(kind)
        deployment, empty = self._running[kind]
        assert deployment.server.proc is not None and deployment.server.proc.poll() is None, (
            f"the module's signoff serve died:\n{deployment.server.log[-6000:]}"
        )
        empty()
        return deployment

    def _start(self, kind: str) -> tuple[Deployment, Callable[[], None]]:
        tmp = self._tmp / kind
        tmp.mkdir()
        empty: Callable[[], None]
        if kind == "sqlite":
            path = tmp / "signoff.db"
            shutil.copy(self._sqlite_template, path)
            url = sqlite_url(path)
            empty = lambda: _empty_sqlite(path)  # noqa: E731
        else:
            admin_url = self._pg_admin_url()
            name = f"signoff_m_{uuid.uuid4().hex[:12]}"
            asyncio.run(admin(admin_url, f"CREATE DATABASE {name}"))
            drop = f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"
            self._stops.append(lambda: asyncio.run(admin(admin_url, drop)))
            url = normalize_url(
                make_url(normalize_url(admin_url)).set(database=name).render_as_string(False)
            )
            asyncio.run(migrate(url))
            empty = lambda: asyncio.run(_empty_postgresql(url))  # noqa: E731
        running = deploy(tmp, url)
        deployment = next(running)
        self._stops.insert(0, lambda: next(running, None))  # the server first, then its database
        return deployment, empty

    def close(self) -> None:
        for stop in self._stops:
            stop()
