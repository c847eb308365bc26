"""On SQLite a read begins no transaction (store/engine.py NO_BEGIN): each statement sees the
committed database as it is when it runs, as PostgreSQL's READ COMMITTED does, and no BEGIN
or ROLLBACK goes through aiosqlite's thread. A write still begins IMMEDIATE and still rolls
back when its block fails: skipping the ROLLBACK of a read must never skip a writer's."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from bot.intake import create_request, validate_request
from store.repository import Store
from tests.conftest import request_body

sqlite_only = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


@contextmanager
def traced(store: Store) -> Iterator[list[str]]:
    """Every statement SQLite runs on the pool's connections while the block runs."""
    seen: list[str] = []
    pool = store.engine.sync_engine.pool
    connections = [pool._pool.get_nowait() for _ in range(pool._pool.qsize())]  # type: ignore[attr-defined]
    try:
        for record in connections:
            record.driver_connection._conn.set_trace_callback(seen.append)
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
