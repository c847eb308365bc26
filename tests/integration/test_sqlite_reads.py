"""The SQLite path's round trips. A read begins no transaction (store/engine.py NO_BEGIN):
each statement sees the committed database as it is when it runs, as PostgreSQL's READ
COMMITTED does. A write still begins IMMEDIATE and still rolls back when its block fails:
skipping the ROLLBACK of a read must never skip a writer's. What cannot wait runs on the
event loop's thread, with no hand-off to aiosqlite's (store/sqlite_inline.py): a write whose
lock is free, BEGIN to COMMIT. What can wait does not: a BEGIN IMMEDIATE while another
program holds the lock, and the checkpoints, which copy the log into the database."""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bot.intake import create_request, validate_request
from store.repository import Store
from store.sqlite_inline import CHECKPOINT_EVERY
from tests.support.databases import SQLITE_ONLY
from tests.support.samples import request_body


@contextmanager
def traced(store: Store, threads: dict[str, int] | None = None) -> Iterator[list[str]]:
    """Every statement SQLite runs on the pool's connections while the block runs (and, in
    `threads`, the thread that ran each)."""
    seen: list[str] = []

    def trace(sql: str) -> None:
        seen.append(sql)
        if threads is not None:
            threads[" ".join(sql.split()[:2])] = threading.get_ident()

    # The pool's idle connections, and those the store keeps checked out between its
    # transactions (store/connections.py).
    pool = store.engine.sync_engine.pool
    records = [pool._pool.get_nowait() for _ in range(pool._pool.qsize())]  # type: ignore[attr-defined]
    for record in records:
        pool._pool.put_nowait(record)  # type: ignore[attr-defined]
    drivers = [r.driver_connection for r in records]
    drivers += [held.raw.driver_connection for held in store._readers._idle]
    for driver in drivers:
        driver._conn.set_trace_callback(trace)
    try:
        yield seen
    finally:
        for driver in drivers:
            driver._conn.set_trace_callback(None)


def _size(path: str) -> int:
    return Path(path).stat().st_size


async def _warm(store: Store) -> None:
    """Open the pool's connections so the trace can be set on them."""
    async with store.read() as a, store.read() as b, store.read() as c:
        for tx in (a, b, c):
            await tx.get_approval("nothing")


@SQLITE_ONLY
async def test_a_read_sends_its_select_and_nothing_else(store: Store, directory, clock) -> None:
    created = await create_request(
        store, directory, clock, "acme", validate_request(request_body(run_id="run-r"))
    )
    await _warm(store)
    with traced(store) as seen:
        async with store.read() as tx:
            assert await tx.get_approval(created.approval.id) == created.approval
            assert await tx.events_for(created.approval.id)
    assert len(seen) == 2, seen
    assert not [s for s in seen if s.split()[0] in ("BEGIN", "ROLLBACK", "COMMIT")], seen


async def test_a_read_sees_what_commits_between_its_statements(  # on both databases
    store: Store, directory, clock
) -> None:
    async with store.read() as tx:
        assert await tx.approval_by_key("acme", "run-late", "x") is None
        created = await create_request(
            store, directory, clock, "acme", validate_request(request_body(run_id="run-late"))
        )
        assert await tx.get_approval(created.approval.id) == created.approval


@SQLITE_ONLY
async def test_a_write_that_fails_still_rolls_back(store: Store, clock) -> None:
    await _warm(store)
    with traced(store) as seen, pytest.raises(RuntimeError, match="changed my mind"):
        async with store.write() as tx:
            await tx.enqueue("webhook", {"x": 1}, now=clock.now())
            raise RuntimeError("changed my mind")
    # (The busy timeout is set to 0 around an inline BEGIN: see the waiting test below.)
    statements = [s for s in seen if not s.startswith("PRAGMA busy_timeout")]
    assert statements[0] == "BEGIN IMMEDIATE" and statements[-1] == "ROLLBACK", seen
    async with store.read() as tx:
        assert await tx.outbox_jobs() == []  # what the block wrote did not stay


@SQLITE_ONLY
async def test_a_write_whose_lock_is_free_runs_on_the_loop_from_begin_to_commit(
    store: Store, directory, clock
) -> None:
    await _warm(store)
    threads: dict[str, int] = {}
    with traced(store, threads):
        await create_request(
            store, directory, clock, "acme", validate_request(request_body(run_id="run-t"))
        )
    assert "BEGIN IMMEDIATE" in threads and "COMMIT" in threads and "INSERT INTO" in threads
    assert set(threads.values()) == {threading.get_ident()}, threads


@SQLITE_ONLY
async def test_checkpoints_run_off_the_loop_and_keep_the_log_short(
    store: Store, clock, db_url: str
) -> None:
    """SQLite's own checkpoint would run inside a COMMIT, on the loop: it is off, and the
    store runs one on a driver thread every CHECKPOINT_EVERY commits instead. Without
    them the write-ahead log would grow with every commit."""
    wal = db_url.split("///", 1)[1] + "-wal"
    await _warm(store)
    threads: dict[str, int] = {}

    async def writes(n: int) -> None:
        for i in range(n):
            async with store.write() as tx:
                await tx.enqueue("webhook", {"pad": "x" * 3000, "i": i}, now=clock.now())

    with traced(store, threads):
        await writes(CHECKPOINT_EVERY - 1)
        per_commit = _size(wal) / (CHECKPOINT_EVERY - 1)
        await writes(3 * CHECKPOINT_EVERY + 1)
    assert threads["PRAGMA wal_checkpoint(PASSIVE)"] != threading.get_ident()
    # The log was started over after a checkpoint: it never held much more than the
    # commits between two (4 x CHECKPOINT_EVERY commits would need 4 x as much).
    assert _size(wal) < 2.2 * CHECKPOINT_EVERY * per_commit


@SQLITE_ONLY
async def test_a_write_waiting_for_another_writer_leaves_the_loop_free(
    store: Store, directory, clock, db_url: str
) -> None:
    """Another program (the sqlite3 shell, say) holds the write lock for half a second: the
    store's write waits for it off the event loop, which goes on ticking meanwhile."""
    path = db_url.split("///", 1)[1]
    held, release = threading.Event(), threading.Event()

    def other_writer() -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        held.set()
        release.wait(5)
        conn.execute("ROLLBACK")
        conn.close()

    holder = threading.Thread(target=other_writer)
    holder.start()
    await asyncio.to_thread(held.wait, 5)
    ticks: list[float] = []

    async def tick() -> None:
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.01)

    ticker = asyncio.create_task(tick())
    writing = asyncio.create_task(
        create_request(
            store, directory, clock, "acme", validate_request(request_body(run_id="run-wait"))
        )
    )
    await asyncio.sleep(0.5)
    assert not writing.done()  # it waits for the lock ...
    release.set()
    created = await writing
    ticker.cancel()
    holder.join()
    assert created.created
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert len(ticks) > 20 and max(gaps) < 0.2, max(gaps)  # ... and the loop never stopped
