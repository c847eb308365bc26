"""The connections a `Store` keeps open between its transactions.

Taking a connection from SQLAlchemy's pool and giving it back cost more than a short
transaction's statements: through the async layer each is a greenlet switch, the pool's
events, and at close a task of its own (AsyncConnection shields its close). On this project's
machine an empty read took about 100 µs and an empty SQLite write 220 µs, and a create with
its card makes five transactions. So a store keeps a few connections checked out, idle
between its transactions, and hands the most recently used one to the next.

A connection is kept only when it ends clean: its block raised nothing, no transaction is
left open (SQLAlchemy's own bookkeeping is rolled back, which sends nothing: the driver's
transaction already ended), and it is not invalidated. One idle for `PING_WHEN_IDLE_FOR`
goes back to the pool instead, whose checkout pings it before anyone uses it again (a
PostgreSQL server may have restarted meanwhile). `keep` leaves the pool room for what takes
connections without the store (the outbox's commit watcher, SQLite's checkpoints).

While anyone waits for the pool, a connection that ends goes back to the pool instead of
being kept: the pool hands it to the first in its queue. Kept, it went to whoever asked next,
so under a steady load the few connections cycled among the same callers and one that had to
queue (the outbox claiming a card's job among 32 agents' creates) waited until the load
paused: seconds, up to the pool's timeout.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from store import engine as engines


@dataclass(slots=True)
class Held:
    """A connection checked out of the pool, with its pool record (whose driver connection
    the hot statements use: store/statements.py)."""

    conn: AsyncConnection
    raw: Any
    since: float = 0.0


class Queued:
    """How many callers wait for a pool's connection, counted by every `IdleConnections` that
    takes from it."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


class IdleConnections:
    def __init__(self, engine: AsyncEngine, keep: int, queued: Queued | None = None) -> None:
        self._engine = engine
        self._keep = keep
        self._idle: list[Held] = []
        self._queued = queued or Queued()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Held]:
        held = await self._take()
        if held is None:
            self._queued.count += 1
            try:
                conn = await self._engine.connect()
            finally:
                self._queued.count -= 1
            try:
                held = Held(conn, await conn.get_raw_connection())
            except BaseException:
                await _close(conn)
                raise
        kept = False
        try:
            yield held
            kept = await self._kept(held)
        finally:
            if not kept:
                await _close(held.conn)

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for held in idle:
            await _close(held.conn)

    async def _take(self) -> Held | None:
        now = time.monotonic()
        while self._idle:
            held = self._idle.pop()
            if now - held.since < engines.PING_WHEN_IDLE_FOR and not held.conn.invalidated:
                return held
            await _close(held.conn)
        return None

    async def _kept(self, held: Held) -> bool:
        conn = held.conn
        if self._queued.count or len(self._idle) >= self._keep or conn.closed or conn.invalidated:
            return False
        if conn.in_transaction():
            try:
                await conn.rollback()
            except Exception:  # closed instead (and the caller's transaction stands)
                return False
        held.since = time.monotonic()
        self._idle.append(held)
        return True


async def _close(conn: AsyncConnection) -> None:
    # As AsyncConnection's own exit does: a cancellation must not leave it half closed.
    await asyncio.shield(asyncio.ensure_future(conn.close()))
