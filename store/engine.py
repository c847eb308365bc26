"""Engine factory: SQLite through aiosqlite (embedded default) or PostgreSQL through asyncpg.

SQLite is tuned so several processes can share one file: WAL lets readers run beside a
writer, `busy_timeout` makes a second writer wait instead of failing, and write transactions
start with BEGIN IMMEDIATE so they take the write lock up front. (A deferred transaction that
reads and then writes can fail with "database is locked" whatever the timeout, because SQLite
will not upgrade a reader's lock while another writer holds it.)
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import (
    ArgumentError,
    DBAPIError,
    DisconnectionError,
    IntegrityError,
    ProgrammingError,
)
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from store import json_text, sqlite_inline
from store.errors import ConfigError, InvalidRequest, SchemaOutOfDate, StoreUnavailable

SQLITE_BUSY_TIMEOUT_MS = 30_000
# Pool sizes per process. SQLite: its one writer and this many readers (WAL lets readers run
# beside the writer). PostgreSQL: the process is CPU-bound long before ten connections are
# busy; more would only hold server memory.
SQLITE_READERS = 4
POSTGRES_POOL = 10
# The connection the outbox runner keeps for hearing of other processes' commits (LISTEN, or
# SQLite's data_version), beside the pool's working connections; a process without a runner
# never opens it.
COMMIT_WATCHER = 1
# A pooled PostgreSQL connection unused for this long is pinged before it is handed out
# (the server may have restarted or a proxy dropped it meanwhile); a busy one is not, which
# spares a round trip on almost every checkout under load.
PING_WHEN_IDLE_FOR = 10.0
# SQLite reports a missing table or column as an OperationalError, like a lost connection;
# PostgreSQL says undefined_table / undefined_column.
_SCHEMA_MISMATCH = re.compile(r"no such (table|column)")
_UNDEFINED_OBJECT = frozenset({"42P01", "42703"})
# Execution option read by the "begin" hook: which BEGIN a SQLite transaction starts with.
BEGIN_MODE = "signoff_sqlite_begin"
# ... or none: a read's statements each see the database as it is when they run, as on
# PostgreSQL at READ COMMITTED, without a BEGIN and a ROLLBACK through aiosqlite's thread
# (each a pair of thread switches: a third of the server's CPU went to them).
NO_BEGIN = "none"


def normalize_url(url: str) -> str:
    """Accept the plain forms people write and pick the async driver signoff ships with."""
    for plain, driver in (
        ("sqlite://", "sqlite+aiosqlite://"),
        ("postgresql://", "postgresql+asyncpg://"),
        ("postgres://", "postgresql+asyncpg://"),
    ):
        if url.startswith(plain):
            return driver + url[len(plain) :]
    return url


def resolve_sqlite_path(url: str, base: Path) -> str:
    """A SQLite URL whose file path is relative, made absolute against `base` (the config
    file's directory), so the database does not move with the directory a command runs in.
    Absolute paths, `:memory:`, `file:` URIs and every other database are returned as given."""
    if not normalize_url(url).startswith("sqlite+aiosqlite:"):
        return url
    scheme, sep, rest = url.partition(":///")
    path, mark, query = rest.partition("?")
    if not sep or not path or path.startswith(("/", "file:")) or path == ":memory:":
        return url
    return f"{scheme}:///{(base.absolute() / path).as_posix()}{mark}{query}"


def new_sqlite_file(url: str) -> Path | None:
    """The file a SQLite URL names, when it does not exist yet but could be created (its
    directory is there): opening it would create it. None for anything else."""
    url = normalize_url(url)
    if not url.startswith("sqlite+aiosqlite:"):
        return None
    path = make_url(url).database or ""
    if not path or path == ":memory:" or path.startswith("file:") or _absent(path):
        return None
    file = Path(path).absolute()
    return None if file.exists() else file


def create_engine(url: str, **kwargs: Any) -> AsyncEngine:
    """An AsyncEngine for a `sqlite+aiosqlite://` or `postgresql+asyncpg://` URL."""
    url = normalize_url(url)
    # JSON columns are written and read by orjson (store/json_text.py says where it is not).
    kwargs.setdefault("json_serializer", json_text.dumps)
    kwargs.setdefault("json_deserializer", json_text.loads)
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigError(f"database.url: cannot parse {url!r}") from exc
    if parsed.drivername == "sqlite+aiosqlite":
        # One writer at a time (Store queues them) plus readers, and never more: a
        # connection opened past the pool's size is closed again on return, and with it
        # its aiosqlite thread, to be opened afresh on the next burst. (+ COMMIT_WATCHER: the
        # outbox runner's watch for other processes' commits holds one; store/commits.py.)
        if parsed.database not in (None, "", ":memory:") and "mode=memory" not in url:
            kwargs.setdefault("pool_size", 1 + SQLITE_READERS + COMMIT_WATCHER)
            kwargs.setdefault("max_overflow", 0)
        return _sqlite_engine(url, **kwargs)
    if parsed.drivername == "postgresql+asyncpg":
        kwargs.setdefault("pool_size", POSTGRES_POOL + COMMIT_WATCHER)
        kwargs.setdefault("max_overflow", 0)
        engine = create_async_engine(url, **kwargs)
        _ping_when_idle(engine)
        return engine
    raise ConfigError(
        f"database.url: unsupported driver {parsed.drivername!r}; "
        "use sqlite+aiosqlite:///PATH or postgresql+asyncpg://USER@HOST/DB"
    )


def _ping_when_idle(engine: AsyncEngine) -> None:
    """`pool_pre_ping`, but only for connections idle longer than PING_WHEN_IDLE_FOR: one
    that fails its ping is discarded and the pool hands out another (DisconnectionError is
    the pool's signal to retry the checkout)."""

    @event.listens_for(engine.sync_engine, "checkin")
    def _returned(_dbapi_connection: Any, record: Any) -> None:
        if record is not None:
            record.info["signoff_idle_since"] = time.monotonic()

    @event.listens_for(engine.sync_engine, "checkout")
    def _handed_out(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("signoff_idle_since")
        if since is None or time.monotonic() - since < PING_WHEN_IDLE_FOR:
            return
        try:
            alive = engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:  # the driver's own error for a dead connection
            raise DisconnectionError(f"stale pooled connection: {exc}") from exc
        if not alive:
            raise DisconnectionError("stale pooled connection")


def _sqlite_engine(url: str, **kwargs: Any) -> AsyncEngine:
    connect_args = kwargs.pop("connect_args", {})
    connect_args.setdefault("timeout", SQLITE_BUSY_TIMEOUT_MS / 1000)
    # The driver path (store/fast_path.py) runs statements on the event loop's thread too.
    connect_args.setdefault("check_same_thread", False)
    engine = create_async_engine(url, connect_args=connect_args, **kwargs)
    path = make_url(url).database or ""

    @event.listens_for(engine.sync_engine, "do_connect")
    def _open(dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
        # Refused before the driver tries: a failed aiosqlite connect leaves its thread to
        # finish after the error, and a command that exits at once can race it into printing
        # a traceback under the one line that says why.
        if (absent := _absent(path)) is not None:
            raise StoreUnavailable(absent)
        try:
            return dialect.loaded_dbapi.connect(
                *cargs, async_creator_fn=sqlite_inline.connect, **cparams
            )
        except Exception as exc:
            raise StoreUnavailable(_unopenable(path, exc)) from exc

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from the driver so the "begin" hook decides.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            # The first statements that write: a file SQLite could open only for reading
            # fails here, before any command starts.
            journal = _use_wal(cursor)
        except Exception as exc:
            raise StoreUnavailable(_unopenable(path, exc)) from exc
        if journal == "wal":
            dbapi_connection.driver_connection.go_inline(SQLITE_BUSY_TIMEOUT_MS)
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        mode = conn.get_execution_options().get(BEGIN_MODE, "DEFERRED")
        if mode != NO_BEGIN:
            conn.exec_driver_sql(f"BEGIN {mode}")

    dialect = engine.sync_engine.dialect
    rollback = dialect.do_rollback

    def _rollback_if_open(dbapi_connection: Any) -> None:
        # sqlite3 answers a ROLLBACK outside a transaction (a read that never began one) with
        # a no-op; asking costs a round trip through aiosqlite's thread, so ask only when
        # there is something to roll back. Reading `in_transaction` is how aiosqlite itself
        # answers it, without the thread.
        driver = getattr(dbapi_connection, "driver_connection", None)
        if getattr(driver, "_connection", None) is not None and not driver.in_transaction:
            return
        rollback(dbapi_connection)

    dialect.do_rollback = _rollback_if_open  # type: ignore[method-assign]
    return engine


def _absent(path: str) -> str | None:
    """Why no SQLite file can be at `path` (no such directory; a directory in its place), in
    one line, or None."""
    if not path or path == ":memory:" or path.startswith("file:"):
        return None
    file = Path(path).absolute()
    where = f"cannot open the SQLite database {file}"
    if not file.parent.is_dir():
        return f"{where}: directory {file.parent} does not exist"
    if file.is_dir():
        return f"{where}: it is a directory"
    return None


def _unopenable(path: str, exc: Exception) -> str:
    """One line naming the SQLite file and why it cannot be used, in the operator's terms."""
    if not path or path == ":memory:" or path.startswith("file:"):
        return f"cannot open the SQLite database {path or ':memory:'}: {exc}"
    if (absent := _absent(path)) is not None:
        return absent
    file = Path(path).absolute()
    where = f"cannot open the SQLite database {file}"
    # Beside the file SQLite creates its -wal and -shm files, so the directory must be
    # writable too, not only the file.
    if (file.exists() and not os.access(file, os.W_OK)) or "readonly" in str(exc):
        return f"{where}: read-only ({exc})"
    if not os.access(file.parent, os.W_OK):
        return f"{where}: directory {file.parent} is read-only"
    return f"{where}: {exc}"


def _use_wal(cursor: Any) -> str:
    """Put the file in WAL mode (a property of the file: once set, it stays); the journal
    mode it is in ("wal", or "memory" for :memory:, or "delete" where the filesystem cannot
    share memory between processes).

    Switching needs the file to itself. On a brand-new file, connections opening at once
    (replicas running `db upgrade` together) can deadlock on the switch, and SQLite then
    answers "database is locked" at once instead of waiting out the busy timeout. Retry
    briefly until this connection switches or sees that another one did. (This blocks the
    event loop for those few milliseconds, once, on a brand-new file only.)
    """
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return str(cursor.fetchone()[0]).lower()
        except Exception as exc:  # the driver's OperationalError, raised through the adapter
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(0.01)


class WriterLock:
    """The SQLite writers of every signoff process on one file, one at a time, in the order
    they asked (an flock on a file beside the database), so that the processes of
    `serve --workers` queue for the write lock instead of meeting in SQLite's busy handler,
    which polls with sleeps of up to 100 ms. Any other writer (the sqlite3 shell) still
    waits on busy_timeout, as before.

    Taking it costs no thread hop when it is free; a process finding it held waits in a
    thread, and if its task is cancelled meanwhile, releases it as soon as it gets it.

    The last process to close removes the file, as SQLite removes its -wal and -shm files, so
    a clean stop leaves only the database. Whoever holds the lock checks that the file it
    locked is still the one at the path; if a closing process removed it meanwhile, it takes
    the lock again on the file now there, so every process still queues on one lock."""

    def __init__(self, database_path: str) -> None:
        self.path = f"{database_path}-writer"
        self._fd: int | None = None

    @classmethod
    def for_engine(cls, engine: AsyncEngine) -> WriterLock | None:
        path = engine.url.database or ""
        if not is_sqlite(engine) or not path or path == ":memory:" or path.startswith("file:"):
            return None
        return cls(path)

    def _open(self) -> int:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            except OSError as exc:
                raise StoreUnavailable(
                    f"cannot open the SQLite writer lock {self.path}: {exc}"
                ) from exc
        return self._fd

    @asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        while True:
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                taking = asyncio.ensure_future(asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX))
                try:
                    await asyncio.shield(taking)
                except asyncio.CancelledError:
                    taking.add_done_callback(
                        lambda f: f.cancelled() or f.exception() or self._release()
                    )
                    raise
            if self._locked_file_is_current(fd):
                break
            # Removed by a process that closed while this one waited: queue on the new file.
            self.close()
        try:
            yield
        finally:
            self._release()

    def _locked_file_is_current(self, fd: int) -> bool:
        try:
            at_path = os.stat(self.path)
        except FileNotFoundError:
            return False
        held = os.fstat(fd)
        return (at_path.st_dev, at_path.st_ino) == (held.st_dev, held.st_ino)

    def _release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Stop using the lock; remove its file unless another process is writing now (a
        process that waits for it, or takes it later, moves to a new file: see `held`)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pass  # another process holds it and will find the file where it left it
        else:
            if self._locked_file_is_current(fd):
                with suppress(FileNotFoundError):
                    os.unlink(self.path)
        finally:
            os.close(fd)  # releases the flock


def is_sqlite(engine: AsyncEngine) -> bool:
    return engine.dialect.name == "sqlite"


@asynccontextmanager
async def translated_errors() -> AsyncIterator[None]:
    """Turn database failures a human can act on into signoff's errors.

    Unreachable or unopenable database: StoreUnavailable. Missing table or column:
    SchemaOutOfDate. A value the database refuses (SQLSTATE class 22): InvalidRequest.
    Everything else that signals a bug in signoff (integrity, syntax) passes unchanged.
    """
    try:
        yield
    except DBAPIError as exc:
        state = getattr(exc.orig, "sqlstate", None) or ""
        if state in _UNDEFINED_OBJECT or _SCHEMA_MISMATCH.search(str(exc.orig)):
            raise SchemaOutOfDate(
                f"the database schema does not match this signoff ({exc.orig}); "
                "run `signoff db upgrade`"
            ) from exc
        if state.startswith("22"):
            raise InvalidRequest(f"the database refused a value: {exc.orig}") from exc
        if isinstance(exc, (IntegrityError, ProgrammingError)) or state.startswith(("23", "42")):
            raise
        raise StoreUnavailable(f"database unavailable: {exc.orig}") from exc
    except OSError as exc:
        raise StoreUnavailable(f"database unavailable: {exc}") from exc
