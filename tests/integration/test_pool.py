"""The connection pool a server gets by default (store.engine.create_engine).

- Under many concurrent requests the pool neither grows past its size nor churns: a burst
  reuses the same few connections (each SQLite connection is an aiosqlite thread; each
  PostgreSQL one a server backend), and every request still completes; nor do many
  transactions one after another, however many of them fail.
- SQLite writers of several processes (`serve --workers`) queue on a lock beside the file:
  a write waits while another process holds it and goes ahead when it is released, and a
  write cancelled while waiting leaves it free. The last store to close removes the lock
  file, and one still open moves to the file the others then use.
- A pooled PostgreSQL connection that died while idle (server restart, a proxy's idle
  timeout; played here by pg_terminate_backend) is noticed when it is next handed out, and
  the request gets a fresh connection instead of an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
from asyncio.subprocess import PIPE
from collections.abc import Callable
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy import event

import store.engine as engine_module
from bot.intake import create_request, validate_request
from store.repository import Store
from tests.support.databases import POSTGRES_ONLY
from tests.support.samples import request_body


def _opened(store: Store) -> Callable[[], int]:
    """How many connections `store`'s pool has opened from now on."""
    opened = 0

    def count(*_: object) -> None:
        nonlocal opened
        opened += 1

    event.listen(store.engine.sync_engine, "connect", count)
    return lambda: opened


async def test_a_burst_of_requests_reuses_a_bounded_pool(db_url: str, directory, clock) -> None:
    store = Store.from_url(db_url)  # the defaults serve and worker use
    opened = _opened(store)
    try:

        async def one(i: int) -> None:
            request = validate_request(request_body(run_id=f"burst-{i}"))
            created = await create_request(store, directory, clock, "acme", request)
            async with store.read() as tx:
                assert await tx.get_approval(created.approval.id) is not None

        for _ in range(3):  # three bursts of 64 at once
            await asyncio.gather(*(one(i) for i in range(64 * _, 64 * (_ + 1))))
        size = store.engine.sync_engine.pool.size()
        assert opened() <= size, f"{opened()} connections opened for a pool of {size}"
        async with store.read() as tx:
            page = await tx.list_approvals(tenant="acme", state="pending", limit=500)
        assert len(page) == 192
    finally:
        await store.close()


async def test_transactions_one_after_another_stay_within_the_pool(db_url: str, clock) -> None:
    """The connections a store keeps between transactions (store/connections.py) are the
    pool's: however many transactions end, and however many of them fail, none is opened
    past its size."""
    store = Store.from_url(db_url)  # the defaults serve uses
    opened = _opened(store)
    try:
        kept = 0
        for i in range(200):
            with contextlib.suppress(RuntimeError):
                async with store.write() as tx:
                    await tx.enqueue("webhook", {"i": i}, now=clock.now())
                    if i % 7 == 0:
                        raise RuntimeError("one in seven fails")
                kept += 1
            async with store.read() as tx:
                assert len(await tx.outbox_jobs()) == kept
        size = store.engine.sync_engine.pool.size()
        assert opened() <= size, f"{opened()} connections opened for a pool of {size}"
    finally:
        await store.close()


@POSTGRES_ONLY
async def test_a_pooled_connection_killed_while_idle_is_replaced_unseen(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store.from_url(db_url)
    try:
        async with store.read() as tx:
            assert await tx.get_approval("00000000-0000-0000-0000-000000000000") is None
        # Every pooled connection of this database dies, as in a server restart.
        admin = await asyncpg.connect(db_url.replace("postgresql+asyncpg", "postgresql"))
        try:
            killed = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        finally:
            await admin.close()
        assert killed >= 1
        monkeypatch.setattr(engine_module, "PING_WHEN_IDLE_FOR", 0.0)  # "idle long enough"
        async with store.read() as tx:
            assert await tx.get_approval("00000000-0000-0000-0000-000000000000") is None
    finally:
        await store.close()


_HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.readline()
"""
_PROBE = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    sys.exit(1)
"""


async def test_sqlite_writes_queue_behind_another_process_and_a_cancelled_wait_frees_the_lock(
    tmp_path: Path, sqlite_template: Path, directory, clock
) -> None:
    path = tmp_path / "signoff.db"
    shutil.copy(sqlite_template, path)
    lock = f"{path}-writer"
    store = Store.from_url(f"sqlite+aiosqlite:///{path}")

    async def create(run_id: str) -> str:
        request = validate_request(request_body(run_id=run_id))
        return (await create_request(store, directory, clock, "acme", request)).approval.id

    # Another process (a second `serve` worker, say) is writing.
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _HOLDER, lock, stdin=PIPE, stdout=PIPE
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert (await holder.stdout.readline()).strip() == b"held"
        cancelled = asyncio.create_task(create("run-cancelled"))
        await asyncio.sleep(0.3)
        assert not cancelled.done(), "a write went ahead while another process held the lock"
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        waiting = asyncio.create_task(create("run-waiting"))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        holder.stdin.write(b"\n")
        await holder.stdin.drain()
        assert await asyncio.wait_for(holder.wait(), 10) == 0
        created = await asyncio.wait_for(waiting, 10)
    finally:
        if holder.returncode is None:
            holder.kill()
            await holder.wait()
    async with store.read() as tx:
        assert (await tx.get_approval(created)) is not None
        assert await tx.approval_by_key("acme", "run-cancelled", "0" * 64) is None
    # Nothing is left holding it: another process takes it at once.
    await asyncio.sleep(0.2)
    probe = await asyncio.create_subprocess_exec(sys.executable, "-c", _PROBE, lock)
    assert await probe.wait() == 0
    await store.close()


async def test_the_last_sqlite_store_to_close_removes_the_writer_lock_and_the_others_follow(
    tmp_path: Path, sqlite_template: Path, directory, clock
) -> None:
    path = tmp_path / "signoff.db"
    shutil.copy(sqlite_template, path)
    lock = f"{path}-writer"
    url = f"sqlite+aiosqlite:///{path}"
    first, second = Store.from_url(url), Store.from_url(url)

    async def create(store: Store, run_id: str) -> None:
        request = validate_request(request_body(run_id=run_id))
        await create_request(store, directory, clock, "acme", request)

    await create(first, "run-1")
    await create(second, "run-2")
    # A clean stop leaves no lock file beside the database, though `second` still has it open.
    await first.close()
    assert "signoff.db-writer" not in _files(tmp_path)
    # `second` writes on: it takes the lock on a new file, the one other processes now use.
    await create(second, "run-3")
    assert "signoff.db-writer" in _files(tmp_path)
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _HOLDER, lock, stdin=PIPE, stdout=PIPE
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert (await holder.stdout.readline()).strip() == b"held"
        waiting = asyncio.create_task(create(second, "run-4"))
        await asyncio.sleep(0.3)
        assert not waiting.done(), "a write went ahead on a lock file nobody else queues on"
        holder.stdin.write(b"\n")
        await holder.stdin.drain()
        assert await asyncio.wait_for(holder.wait(), 10) == 0
        await asyncio.wait_for(waiting, 10)
    finally:
        if holder.returncode is None:
            holder.kill()
            await holder.wait()
    await second.close()
    assert _files(tmp_path) == ["signoff.db"]


def _files(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))
