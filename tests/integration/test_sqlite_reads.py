"""The SQLite path's round trips. A read begins no transaction (store/engine.py NO_BEGIN):
each statement sees the committed database as it is when it runs, as PostgreSQL's READ
COMMITTED does, and no BEGIN or ROLLBACK goes through aiosqlite's thread. A write still
begins IMMEDIATE and still rolls back when its block fails: skipping the ROLLBACK of a read
must never skip a writer's. The hot statements run on the event loop's thread
(store/fast_path.py), but whatever can wait for another writer (BEGIN IMMEDIATE) or checkpoint
(COMMIT) does not: a server waiting for the file's write lock keeps answering."""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from bot.intake import create_request, validate_request
from store.repository import Store
from tests.support.samples import request_body

sqlite_only = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


@contextmanager
def traced(store: Store, threads: dict[str, int] | None = None) -> Iterator[list[str]]:
    """Every statement SQLite runs on the pool's connections while the block runs (and, in
    `threads`, the thread that ran each)."""
    seen: list[str] = []

    def trace(sql: str) -> None:
        seen.append(sql)
        if threads is not None:
            threads[" ".join(sql.split()[:2])] = threading.get_ident()

    pool = store.engine.sync_engine.pool
    connections = [pool._pool.get_nowait() for _ in range(pool._pool.qsize())]  # type: ignore[attr-defined]
    try:
        for record in connections:
            record.driver_connection._conn.set_trace_callback(trace)
    finally:
        for record in connections:
            pool._pool.put_nowait(record)  # type: ignore[attr-defined]
    try:
        yield seen
    finally:
        for record in connections:
            record.driver_connection._conn.set_trace_callback(None)


async def _warm(store: Store) -> None:
    """Open the pool's connections so the trace can be set on them."""
    async with store.read() as a, store.read() as b, store.read() as c:
        for tx in (a, b, c):
            await tx.get_approval("nothing")


@sqlite_only
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


@sqlite_only
async def test_a_write_that_fails_still_rolls_back(store: Store, clock) -> None:
    await _warm(store)
    with traced(store) as seen, pytest.raises(RuntimeError, match="changed my mind"):
        async with store.write() as tx:
            await tx.enqueue("webhook", {"x": 1}, now=clock.now())
            raise RuntimeError("changed my mind")
    assert seen[0] == "BEGIN IMMEDIATE" and seen[-1] == "ROLLBACK", seen
    async with store.read() as tx:
        assert await tx.outbox_jobs() == []  # what the block wrote did not stay


@sqlite_only
async def test_hot_statements_run_on_the_loop_and_begin_and_commit_do_not(
    store: Store, directory, clock
) -> None:
    await _warm(store)
    threads: dict[str, int] = {}
    with traced(store, threads):
        await create_request(
            store, directory, clock, "acme", validate_request(request_body(run_id="run-t"))
        )
    loop = threading.get_ident()
    assert threads["INSERT INTO"] == loop  # the approval and its event: the driver path
    assert threads["BEGIN IMMEDIATE"] != loop
    assert threads["COMMIT"] != loop


@sqlite_only
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
