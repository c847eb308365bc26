"""Telling the outbox that jobs were committed, so effects follow a decision at once.

In this process, `Store.write` calls `CommitSignal.fire` after a transaction that queued or
requeued a job commits: every path (API, chat, web, CLI, sweeper) is covered by the one
place all writes go through. Other processes learn of it from the database itself:

- PostgreSQL: the transaction sends `NOTIFY signoff_outbox`, delivered at commit (and
  dropped with a rollback); `watch_commits` LISTENs on a connection of its own.
- SQLite: no notifications exist. Every commit writes to the write-ahead log, so
  `watch_commits` looks at the log file's size and modification time every few milliseconds
  (one stat call: an idle server spends nothing on it), and only when they moved asks
  `PRAGMA data_version` and reads the newest job id. New jobs are found at once; a job
  requeued or handed back by another process is found at the runner's next poll.

The poll stays as the fallback: a lost notification or a dropped listening connection
delays an effect by at most one poll interval.

Waits (`GET /v1/approvals/{id}?wait=`, bot/waits.py) hear of approvals that changed state
the same ways, with no poll behind them: `ApprovalMoves` in this process (after the commit
of a transaction whose `update_approval` changed a state); from other processes on
PostgreSQL, the id sent on `signoff_approvals` by that UPDATE itself; on SQLite, any commit
by another connection (`watch_approvals`: the waits then read their requests' states).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Collection
from datetime import datetime
from functools import partial
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncEngine

from store.engine import is_sqlite
from store.records import OutboxJob

log = logging.getLogger(__name__)

CHANNEL = "signoff_outbox"
NOTIFY = f"NOTIFY {CHANNEL}"
# Carries the id of an approval whose state a committed transaction changed.
APPROVALS_CHANNEL = "signoff_approvals"
# SQLite: how often a runner looks at the write-ahead log for another process's commit: every
# 25 ms while the log moves, less and less often (up to every 200 ms) once it has been still
# for a second. A look costs about 0.2 ms of CPU, so looking every 25 ms forever kept an idle
# server at 9 ms of CPU a second; idle, another process's commit now waits at most 200 ms.
SQLITE_CHECK_EVERY = 0.025
SQLITE_CHECK_IDLE = 0.2
SQLITE_STILL_AFTER = 1.0
# A listening connection that failed is opened again after this long (the poll covers the gap).
RECONNECT_AFTER = 1.0

# The newest job any runner may claim: one this process's own runner holds from birth
# (CommitSignal) wakes nobody, nor does a job that finished. Through the queue's index: by the
# primary key, SQLite walked back over every done job when none was queued (11 ms on 200,000
# rows, against 2 µs; 0.2 ms with 2,000 queued).
_NEWEST_JOB = (
    "SELECT max(id) FROM outbox INDEXED BY ix_outbox_due"
    " WHERE state = 'queued' AND locked_by IS NULL"
)


class Taker(Protocol):
    """The outbox runner of this process, taking the jobs its transactions queue (below)."""

    def lease(self, kind: str) -> tuple[str, datetime] | None:
        """The holder and lease end of a job of `kind` due now, if the runner takes it."""

    def take(self, jobs: list[OutboxJob], leased: int) -> None:
        """After a write transaction that asked for `leased` leases ended: the jobs it
        committed leased to the runner, to run now (none if it rolled back)."""


class CommitSignal:
    """This process's listeners for "a transaction that queued jobs committed", and the
    runner that takes the jobs this process queues, if one runs here.

    A job due now, queued while this process's runner has room, is written leased to that
    runner and handed to it after the commit: no claim (a write transaction), and on
    PostgreSQL no NOTIFY, stands between a decision and its card or webhook. If the process
    dies first, the job is taken by any runner once its lease runs out, as a claimed job
    is; a runner without room leaves the job in the queue for any replica.
    """

    def __init__(self) -> None:
        self._listeners: list[Callable[[], None]] = []
        self.taker: Taker | None = None

    def hand_to(self, taker: Taker) -> Callable[[], None]:
        """Lease this process's new jobs to `taker` while it runs; returns the undo."""
        self.taker = taker

        def stop() -> None:
            if self.taker is taker:
                self.taker = None

        return stop

    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call `listener` after each such commit; returns a function that unsubscribes."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def fire(self) -> None:
        for listener in list(self._listeners):
            try:
                listener()
            except Exception:  # a listener's failure must not fail a committed write
                log.exception("a commit listener failed")


class ApprovalMoves:
    """This process's listeners for "these approvals changed state", called after the commit
    of a transaction that changed them (`Store`), and by `watch_approvals` for other
    processes' commits: with the ids, or with None when only "something was committed" is
    known (SQLite)."""

    def __init__(self) -> None:
        self._listeners: list[Callable[[Collection[str] | None], None]] = []

    def subscribe(self, listener: Callable[[Collection[str] | None], None]) -> Callable[[], None]:
        """Call `listener` at each move; returns a function that unsubscribes."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def fire(self, approval_ids: Collection[str] | None) -> None:
        for listener in list(self._listeners):
            try:
                listener(approval_ids)
            except Exception:  # a listener's failure must not fail a committed write
                log.exception("an approval-move listener failed")


async def watch_commits(
    engine: AsyncEngine, woken: Callable[[], None], stop: asyncio.Event
) -> None:
    """Call `woken` whenever another process commits new outbox jobs, until `stop` is set."""
    if is_sqlite(engine):
        watch = partial(_watch_sqlite, engine, woken, stop)
    else:
        watch = partial(_listen, engine, CHANNEL, lambda _payload: woken(), stop)
    await _keep_watching(watch, stop, woken, "jobs")


async def watch_approvals(
    engine: AsyncEngine, moved: Callable[[Collection[str] | None], None], stop: asyncio.Event
) -> None:
    """Call `moved` with the ids of approvals another process changed the state of (on
    PostgreSQL), or with None whenever another connection committed anything (on SQLite),
    until `stop` is set."""

    async def committed(_raw: object) -> None:
        moved(None)

    # Once watching, `moved(None)` too: whatever was committed before the watch began.
    if is_sqlite(engine):
        watch = partial(_sqlite_commits, engine, stop, committed, committed)
    else:
        listening = partial(moved, None)
        watch = partial(
            _listen, engine, APPROVALS_CHANNEL, lambda id_: moved([id_]), stop, listening
        )
    await _keep_watching(watch, stop, lambda: moved(None), "approvals")


async def _keep_watching(
    watch: Callable[[], Awaitable[None]],
    stop: asyncio.Event,
    after_gap: Callable[[], None],
    what: str,
) -> None:
    """Run `watch` until `stop`, starting it again after a failure (and calling
    `after_gap`: something may have been committed meanwhile)."""
    while not stop.is_set():
        try:
            await watch()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning(
                "watching for %s committed by other processes failed (%s: %s); retrying in %.0f s",
                what,
                type(exc).__name__,
                exc,
                RECONNECT_AFTER,
            )
            await _until(stop, RECONNECT_AFTER)
            after_gap()


async def _listen(
    engine: AsyncEngine,
    channel: str,
    heard: Callable[[str], None],
    stop: asyncio.Event,
    listening: Callable[[], None] | None = None,
) -> None:
    """LISTEN on `channel` on a connection of its own, calling `heard` with each payload
    (and `listening` once the LISTEN is in place)."""
    async with engine.connect() as conn:
        raw = (await conn.get_raw_connection()).driver_connection
        lost = asyncio.Event()

        def notified(_conn: object, _pid: object, _channel: object, payload: str) -> None:
            heard(payload)

        def terminated(*_: object) -> None:
            lost.set()

        await raw.add_listener(channel, notified)
        raw.add_termination_listener(terminated)
        if listening is not None:
            listening()
        try:
            waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(lost.wait())]
            try:
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()
            if lost.is_set():
                raise ConnectionError("the listening connection closed")
        finally:
            raw.remove_termination_listener(terminated)
            if not raw.is_closed():
                await raw.remove_listener(channel, notified)


async def _watch_sqlite(
    engine: AsyncEngine, woken: Callable[[], None], stop: asyncio.Event
) -> None:
    newest: int | None = None

    async def committed(raw: object) -> None:
        nonlocal newest
        latest = await _newest_job(raw)
        if latest is not None and (newest is None or latest > newest):
            woken()
        newest = latest

    async def started(raw: object) -> None:
        nonlocal newest
        newest = await _newest_job(raw)

    await _sqlite_commits(engine, stop, committed, started)


async def _sqlite_commits(
    engine: AsyncEngine,
    stop: asyncio.Event,
    committed: Callable[[object], Awaitable[None]],
    started: Callable[[object], Awaitable[None]] | None = None,
) -> None:
    """Await `committed(connection)` after each commit by another connection to the file."""
    # A connection of its own: data_version counts commits made by *other* connections,
    # and only while the same connection keeps asking. No transaction stays open on it
    # (each statement stands alone), so it holds back no WAL checkpoint.
    database = engine.url.database
    if not database or database == ":memory:" or "mode=memory" in str(engine.url):
        # No other process can open an in-memory database (and its one connection is
        # shared, so a watcher's statements would land in others' transactions).
        await stop.wait()
        return
    log_file = f"{database}-wal"
    async with engine.connect() as conn:
        raw = (await conn.get_raw_connection()).driver_connection
        version = await _data_version(raw)
        if started is not None:
            await started(raw)
        written = _written(log_file)
        every = SQLITE_CHECK_EVERY
        still = 0.0  # how long the log has not moved
        while not stop.is_set():
            # A plain sleep: waiting on `stop` with a timeout would make a task per turn
            # (the runner cancels this watcher when it stops).
            await asyncio.sleep(every)
            seen = _written(log_file)
            if seen == written and seen is not None:
                still += every
                if still >= SQLITE_STILL_AFTER:
                    every = min(every * 2, SQLITE_CHECK_IDLE)
                continue
            written = seen
            every, still = SQLITE_CHECK_EVERY, 0.0
            moved = await _data_version(raw)
            if moved == version:
                continue
            version = moved
            await committed(raw)


def _written(path: str) -> tuple[int, int, int] | None:
    """What changes when anyone commits: the log's inode, size and modification time (None
    while it is missing, and then the database is asked every time)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


async def _data_version(raw: object) -> int:
    async with raw.execute("PRAGMA data_version") as cursor:  # type: ignore[attr-defined]
        row = await cursor.fetchone()
    return int(row[0])


async def _newest_job(raw: object) -> int | None:
    async with raw.execute(_NEWEST_JOB) as cursor:  # type: ignore[attr-defined]
        row = await cursor.fetchone()
    # Autocommit is off in the driver: end the implicit read so no snapshot stays open.
    await raw.rollback()  # type: ignore[attr-defined]
    return None if row[0] is None else int(row[0])


async def _until(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        pass
