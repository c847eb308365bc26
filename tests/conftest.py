"""Shared fixtures: real databases (a SQLite file per test, a PostgreSQL database per test
process emptied before each test), a FakeClock, a directory built from a test config.

PostgreSQL comes from $SIGNOFF_TEST_POSTGRES_URL (a URL to a maintenance database, e.g.
postgresql://postgres@127.0.0.1:5432/postgres), else a server answering on 127.0.0.1:5432.
Without one the PostgreSQL cases skip, saying so, except under CI=true where they fail.
Each test process (each pytest-xdist worker) migrates one PostgreSQL database and empties it
before every test that asks for one; only the tests that need an empty database create one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import fcntl
import os
import shutil
import socket
import uuid
from collections.abc import AsyncIterator, Generator, Iterator
from contextlib import ExitStack
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from bot.clock import FakeClock
from bot.config import parse_config
from bot.operator import Operator
from bot.routing import Directory
from store.engine import normalize_url
from store.repository import Store
from store.schema import metadata
from tests.support.databases import admin, asyncpg_dsn, migrate
from tests.support.samples import TEST_CONFIG

# PYTHONDONTWRITEBYTECODE is undone in tests/__init__.py, before anything here is imported.

POSTGRES_ENV = "SIGNOFF_TEST_POSTGRES_URL"
LOCAL_POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"


# -- the fast inner loop ------------------------------------------------------------------------
#
# `pytest -m "not slow"` leaves out the directories whose tests start processes, browsers or
# agent frameworks; what remains (unit, integration on both databases, the fakes) is the loop
# to run while editing. The full suite stays the gate.

SLOW_DIRECTORIES = ("acceptance", "browser", "frameworks")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    tests = Path(__file__).parent
    for item in items:
        parts = item.path.relative_to(tests).parts if item.path.is_relative_to(tests) else ()
        if parts and parts[0] in SLOW_DIRECTORIES:
            item.add_marker(pytest.mark.slow)
    # The tests that run alone go first, together, before the other workers have started
    # anything they would wait for: scattered through the run, each one waited for the
    # longest test running beside it (a whole run took 291 s this way against 306-311 s).
    items.sort(key=lambda item: item.get_closest_marker("alone") is None)


# -- tests that run alone ----------------------------------------------------------------------
#
# The suite runs in parallel (pytest-xdist). A test marked `alone` times something or loads
# the machine on purpose (kill -9 under load, the outbox's loop-lag throttle); another test
# beside it would change what it measures. It waits until the other workers' running tests
# end, and they start nothing new until it is done: a readers-writer lock over flock(2) on two
# files the workers of one run share. The turnstile keeps a waiting `alone` test from being
# starved by tests that keep starting.


def _run_lock(name: str) -> int | None:
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:  # not under xdist: nothing runs beside this test
        return None
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / f"signoff-tests-{run}"
    folder.mkdir(exist_ok=True)
    return os.open(folder / name, os.O_RDWR | os.O_CREAT, 0o600)


def _hold(stack: ExitStack, fd: int, mode: int) -> None:
    fcntl.flock(fd, mode)
    stack.callback(fcntl.flock, fd, fcntl.LOCK_UN)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    turnstile, room = _run_lock("turnstile"), _run_lock("room")
    if turnstile is None or room is None:
        yield
        return
    try:
        with ExitStack() as held:
            if item.get_closest_marker("alone"):
                _hold(held, turnstile, fcntl.LOCK_EX)
                _hold(held, room, fcntl.LOCK_EX)
            else:
                with ExitStack() as passing:
                    _hold(passing, turnstile, fcntl.LOCK_SH)
                    _hold(held, room, fcntl.LOCK_SH)
            yield
    finally:
        os.close(turnstile)
        os.close(room)


def _postgres_admin_url() -> str | None:
    url = os.environ.get(POSTGRES_ENV)
    if url:
        return url
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=0.5):
            return LOCAL_POSTGRES
    except OSError:
        return None


def _with_database(url: str, name: str) -> str:
    return make_url(normalize_url(url)).set(database=name).render_as_string(False)


@pytest.fixture(scope="session")
def pg_admin_url() -> Iterator[str]:
    """URL of a PostgreSQL maintenance database where tests may create databases."""
    url = _postgres_admin_url()
    if url is None:
        message = f"PostgreSQL not reachable: set {POSTGRES_ENV} or start it on 127.0.0.1:5432"
        if os.environ.get("CI") == "true":
            pytest.fail(message + " (CI=true: PostgreSQL tests must not skip)")
        pytest.skip(message)
    try:
        asyncio.run(admin(url, "SELECT 1"))
    except (OSError, asyncpg.PostgresError) as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"cannot connect to PostgreSQL at {url}: {exc}")
        pytest.skip(f"cannot connect to PostgreSQL at {url}: {exc}")
    yield url


@pytest.fixture
def pg_empty_url(pg_admin_url: str) -> Iterator[str]:
    """A brand-new, empty PostgreSQL database for this test (first start, `db upgrade`)."""
    name = f"signoff_t_{uuid.uuid4().hex[:12]}"
    asyncio.run(admin(pg_admin_url, f"CREATE DATABASE {name}"))
    yield normalize_url(_with_database(pg_admin_url, name))
    asyncio.run(admin(pg_admin_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


# The catalogue of the public schema in one number: which relations (tables, indexes,
# sequences) have which columns of which types. It changes when a test drops a table or an
# index, which a reset by DELETE could not repair.
_SCHEMA_FINGERPRINT = """
SELECT count(*), coalesce(sum(hashtext(c.relname || '.' || a.attname || ':'
       || a.atttypid::text || ':' || a.attnotnull::text)), 0)
FROM pg_attribute a JOIN pg_class c ON a.attrelid = c.oid
WHERE c.relnamespace = 'public'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
"""


@dataclasses.dataclass
class PostgresTestDatabase:
    """One migrated database per test process, emptied before each test that uses it.

    Creating a database per test cost 0.3-0.6 s a case (hundreds of cases); emptying one
    costs about a millisecond. A reset first ends every other connection to it (a server
    a test left behind, a pool nobody closed), so nothing of the last test can hold a lock
    or see the next one's rows; a test that changed the schema itself gets a new database."""

    admin_url: str
    name: str
    fingerprint: tuple[int, int] = (0, 0)
    revision: str = ""

    @property
    def url(self) -> str:
        return normalize_url(_with_database(self.admin_url, self.name))

    async def create(self) -> None:
        await admin(
            self.admin_url,
            f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)",
            f"CREATE DATABASE {self.name}",
        )
        await migrate(self.url)
        conn = await asyncpg.connect(asyncpg_dsn(self.url))
        try:
            self.fingerprint = tuple(await conn.fetchrow(_SCHEMA_FINGERPRINT))  # type: ignore[assignment]
            self.revision = await conn.fetchval("SELECT version_num FROM alembic_version")
        finally:
            await conn.close()

    async def reset(self) -> None:
        conn = await asyncpg.connect(asyncpg_dsn(self.url))
        try:
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            if tuple(await conn.fetchrow(_SCHEMA_FINGERPRINT)) == self.fingerprint:
                sequences = await conn.fetch(
                    "SELECT sequencename FROM pg_sequences WHERE schemaname = 'public'"
                )
                # DELETE, not TRUNCATE: on a few rows it is 100x faster (TRUNCATE makes new
                # files for every table); children first, so no foreign key objects.
                statements = [f"DELETE FROM {t.name}" for t in reversed(metadata.sorted_tables)]
                statements += [f"ALTER SEQUENCE {r[0]} RESTART" for r in sequences]
                statements += ["DELETE FROM alembic_version"]
                async with conn.transaction():
                    await conn.execute("; ".join(statements))
                    await conn.execute("INSERT INTO alembic_version VALUES ($1)", self.revision)
                return
        finally:
            await conn.close()
        await self.create()

    async def drop(self) -> None:
        await admin(self.admin_url, f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)")


@pytest.fixture(scope="session")
def pg_test_database(pg_admin_url: str) -> Iterator[PostgresTestDatabase]:
    """This test process's PostgreSQL database (one per pytest-xdist worker)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    database = PostgresTestDatabase(pg_admin_url, f"signoff_test_{worker}_{os.getpid()}")
    asyncio.run(database.create())
    yield database
    asyncio.run(database.drop())


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "signoff.db"
    asyncio.run(migrate(f"sqlite+aiosqlite:///{path}"))
    return path


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated, empty database of each kind; the same test runs on both."""
    if request.param == "sqlite":
        path = tmp_path / "signoff.db"
        shutil.copy(request.getfixturevalue("sqlite_template"), path)
        return f"sqlite+aiosqlite:///{path}"
    database: PostgresTestDatabase = request.getfixturevalue("pg_test_database")
    asyncio.run(database.reset())
    return database.url


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    # Room for every concurrent task in the race tests to hold its own connection.
    store = Store.from_url(db_url, pool_size=60, max_overflow=10)
    yield store
    await store.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def directory() -> Directory:
    return parse_config(TEST_CONFIG).directory()


@pytest.fixture
def operator(store: Store, directory: Directory, clock: FakeClock) -> Operator:
    return Operator(store, directory, clock)
