"""aiosqlite's connection, with what cannot wait run on the event loop's own thread.

aiosqlite runs every call on a thread of its own per connection: a statement through
SQLAlchemy is four hand-offs (cursor, execute, fetch, close), each two thread switches and a
wake-up of the event loop, and on this project's machine the hand-offs cost more CPU than
the statements (a create without its card took 7.5 ms of server CPU with them and 4.8 ms
without, measured while this module was written; with the rest of that change, 7.1 and 2.9
ms: docs/benchmarks.md, "Issue 27: the store's overheads removed"). The thread is there so
that a call that waits (for another writer's lock, on the busy timeout) does not stop the
event loop. In WAL mode most calls cannot wait:

- a read takes no lock;
- inside a transaction that began with BEGIN IMMEDIATE, this connection already holds the
  write lock, so its writes, its COMMIT and its ROLLBACK wait for nobody;
- fetching rows, making and closing cursors.

Those run inline. BEGIN IMMEDIATE is tried inline without waiting (busy timeout 0 for that
one statement) and, when another process holds the lock, goes to the thread to wait there.
Everything else (a write outside a transaction or in a deferred one, connecting, closing, a
database not in WAL mode) goes to the thread as before.

A COMMIT can run a checkpoint (SQLite's automatic one, once the log is past 1,000 pages):
on this connection it would run inline, so automatic checkpoints are off on connections in
inline mode and `Checkpoints` runs them on a driver thread instead (for `Store`).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import aiosqlite

log = logging.getLogger(__name__)

# Write transactions between two checkpoints. SQLite's automatic one runs when the log holds
# 1,000 pages; a create writes about ten.
CHECKPOINT_EVERY = 100

# The calls that never wait, whatever the state: fetching rows, making and closing cursors,
# ending a transaction (WAL mode: a COMMIT appends to the log; this connection's automatic
# checkpoint is off, see `go_inline`).
_CURSOR_CALLS = frozenset({"fetchone", "fetchmany", "fetchall", "close"})
_CONNECTION_CALLS = frozenset({"cursor", "commit", "rollback"})
_EXECUTE = frozenset({"execute", "executemany"})
# Statements that take no lock in WAL mode. (store/commits.py asks data_version every few
# milliseconds.)
_READS = frozenset({"SELECT", "COMMIT", "ROLLBACK", "END"})
_READ_PRAGMAS = frozenset({"data_version"})


class InlineConnection(aiosqlite.Connection):
    """An aiosqlite connection whose calls that cannot wait run inline (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.inline = False  # set once the file is known to be in WAL mode
        self._holds_lock = False  # the open transaction began IMMEDIATE: it has the lock
        self._busy_timeout_ms = 0

    def go_inline(self, busy_timeout_ms: int) -> None:
        """The file is in WAL mode: from now on run inline what cannot wait. Called by
        store.engine's connect hook, before anyone uses the connection (so its thread is
        idle)."""
        self._busy_timeout_ms = busy_timeout_ms
        self._conn.execute("PRAGMA wal_autocheckpoint=0")
        self.inline = True

    async def begin_immediate(self) -> None:
        """BEGIN IMMEDIATE: inline if the write lock is free, else waiting on the thread."""
        await self._execute(self._conn.execute, "BEGIN IMMEDIATE")

    async def rollback_if_open(self) -> None:
        if self._connection is not None and self._connection.in_transaction:
            await self.rollback()

    async def write_now(self, sql: str) -> None:
        """A statement that writes and returns nothing (a SAVEPOINT): inline when it
        cannot wait, else on the thread."""
        if self.cannot_wait(writes=True):
            self._conn.execute(sql)
        else:
            await self._execute(self._conn.execute, sql)

    def cannot_wait(self, writes: bool) -> bool:
        """Whether a statement that `writes` (or only reads) would run without waiting now."""
        if not self.inline or self._connection is None:
            return False
        return not writes or (self._connection.in_transaction and self._holds_lock)

    async def _execute(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if self.inline and self._connection is not None and self._running:
            name = getattr(fn, "__name__", "")
            owner = getattr(fn, "__self__", None)
            if isinstance(owner, sqlite3.Cursor) and name in _CURSOR_CALLS:
                return fn(*args, **kwargs)
            if owner is self._connection and name in _CONNECTION_CALLS:
                return fn(*args, **kwargs)
            if name in _EXECUTE and args and isinstance(owner, sqlite3.Cursor | sqlite3.Connection):
                words = args[0].split(None, 2)
                verb = words[0].upper() if words else ""
                if verb == "BEGIN":
                    return await self._begin(fn, args[0])
                if self._statement_cannot_wait(verb, words):
                    return fn(*args, **kwargs)
        return await super()._execute(fn, *args, **kwargs)

    def _statement_cannot_wait(self, verb: str, words: list[str]) -> bool:
        reads = verb in _READS or (
            verb == "PRAGMA" and len(words) == 2 and words[1].lower() in _READ_PRAGMAS
        )
        return self.cannot_wait(writes=not reads)

    async def _begin(self, execute: Any, sql: str) -> Any:
        """A BEGIN, inline when it can start at once. BEGIN IMMEDIATE takes the write lock:
        tried without waiting (busy timeout 0 for that one statement) and, when another
        process holds the lock, run on the thread to wait for it there."""
        upper = sql.upper()
        self._holds_lock = "IMMEDIATE" in upper or "EXCLUSIVE" in upper
        if not self._holds_lock:
            return execute(sql)  # a deferred BEGIN takes no lock
        conn = self._conn
        conn.execute("PRAGMA busy_timeout=0")
        try:
            return execute(sql)
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                self._holds_lock = False
                raise
        finally:
            conn.execute(f"PRAGMA busy_timeout={self._busy_timeout_ms}")
        try:
            return await super()._execute(execute, sql)
        except BaseException:
            self._holds_lock = False
            raise


def connect(database: str | Path, *, iter_chunk_size: int = 64, **kwargs: Any) -> InlineConnection:
    """aiosqlite.connect, for an InlineConnection (SQLAlchemy's `async_creator_fn`)."""

    def connector() -> sqlite3.Connection:
        return sqlite3.connect(str(database), **kwargs)

    connection = InlineConnection(connector, iter_chunk_size)
    # As SQLAlchemy does for aiosqlite's own: the thread must not keep the process alive.
    connection._thread.daemon = True
    return connection


class Checkpoints:
    """SQLite's automatic checkpoint, run on a driver thread instead of inside a COMMIT on
    the event loop's (connections in inline mode turn the automatic one off): after every
    `every` write transactions this process commits, one PASSIVE checkpoint, in a writer's
    turn (`turn`: this process's and the file's, store/repository.py) so that no writer of
    this process adds to the log meanwhile and the next one can start it over. The loop goes
    on serving reads meanwhile; writers queue as they would behind a long COMMIT."""

    def __init__(
        self,
        connection: Callable[[], AbstractAsyncContextManager[Any]],
        turn: Callable[[bool], AbstractAsyncContextManager[None]],
        every: int = CHECKPOINT_EVERY,
    ) -> None:
        self._connection = connection  # one of the store's (store/connections.py)
        self._turn = turn
        self._every = every
        self._commits = 0
        self._running: asyncio.Task[None] | None = None

    async def committed(self, transactions: int = 1) -> None:
        """A write transaction of this process committed (`transactions` callers' writes
        that shared one COMMIT count as that many)."""
        self._commits += transactions
        if self._commits < self._every or (self._running and not self._running.done()):
            return
        self._commits = 0
        self._running = asyncio.get_running_loop().create_task(self._checkpoint())
        # Let it ask for its turn now: a caller writing in a loop that never waits (every
        # statement inline) would otherwise keep the turn until its loop ends.
        await asyncio.sleep(0)

    async def _checkpoint(self) -> None:
        try:
            async with self._turn(True), self._connection() as held:
                raw = held.raw.driver_connection
                # Not a statement that runs inline (see InlineConnection): on the thread.
                async with raw.execute("PRAGMA wal_checkpoint(PASSIVE)") as cursor:
                    await cursor.fetchall()
        except Exception as exc:  # the next one may succeed; meanwhile the log grows
            log.warning("SQLite checkpoint failed (%s: %s); retried later", type(exc).__name__, exc)

    async def close(self) -> None:
        if self._running is not None:
            await self._running
