"""Backup and restore of the SQLite database (store/backup.py): a backup taken while a real
server creates and decides requests restores to a database that verifies and holds every
write acknowledged before the backup began; the refusals write nothing."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from contextlib import closing
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from bot import audit
from bot.operator import Actor, Operator
from store import backup
from store.migrate import known_revisions
from store.repository import Store
from tests.support.api_server import Serve
from tests.support.databases import SQLITE_ONLY

ALICE = Actor("alice", via="test")


def _file(db_url: str) -> Path:
    database = make_url(db_url).database
    assert database is not None
    return Path(database)


@SQLITE_ONLY
async def test_a_backup_under_load_holds_every_write_acknowledged_before_it(
    serve: Serve, db_url: str, tmp_path: Path
) -> None:
    api = await serve()
    operator = Operator(api.store, api.directory, api.clock)
    acked: list[tuple[float, str, str]] = []  # (when acknowledged, approval id, its state then)
    under_way = asyncio.Event()  # some acknowledged, many still to come

    def ack(approval_id: str, state: str) -> None:
        acked.append((time.monotonic(), approval_id, state))
        if len(acked) >= 30:
            under_way.set()

    async def one(i: int) -> None:
        record = await api.create(run_id=f"run-{i}")
        ack(record["id"], "pending")
        if i % 2:
            await operator.approve_shown(record["id"], record["hash"], ALICE)
            ack(record["id"], "approved")
        else:
            await operator.reject_shown(record["id"], record["hash"], ALICE, note="no")
            ack(record["id"], "rejected")

    tasks = [asyncio.create_task(one(i)) for i in range(50)]
    await under_way.wait()
    began = time.monotonic()
    dest = tmp_path / "backup.db"
    await asyncio.to_thread(
        backup.backup, _file(db_url), dest, force=False, known=known_revisions()
    )
    ended = time.monotonic()
    await asyncio.gather(*tasks)
    before = [a for a in acked if a[0] < began]
    assert before and any(a[0] > ended for a in acked), "the writes did not overlap the backup"

    restored = tmp_path / "restored.db"
    backup.restore(dest, restored, force=False, known=known_revisions())
    store = Store.from_url(f"sqlite+aiosqlite:///{restored}")
    try:
        report = await audit.verify(store)
        assert report.ok, report.problems
        async with store.read() as tx:
            states = {a.id: a.state for a in await tx.list_approvals(limit=1000)}
    finally:
        await store.close()
    latest: dict[str, str] = {}
    for _, approval_id, state in sorted(before):
        latest[approval_id] = state
    for approval_id, state in latest.items():
        assert approval_id in states, f"{approval_id} was acknowledged before the backup"
        if state != "pending":
            assert states[approval_id] == state


@SQLITE_ONLY
async def test_backup_and_restore_refusals_write_nothing(
    store: Store, db_url: str, tmp_path: Path
) -> None:
    known = known_revisions()
    source = _file(db_url)
    dest = tmp_path / "b.db"
    dest.write_text("something precious")
    with pytest.raises(backup.BackupRefused, match="exists; choose another path"):
        backup.backup(source, dest, force=False, known=known)
    assert dest.read_text() == "something precious"
    backup.backup(source, dest, force=True, known=known)
    assert backup.check_signoff_database(dest, known).requests == 0

    # Restore: not a database, a database but not signoff's, an unknown revision.
    target = tmp_path / "target.db"
    text_file = tmp_path / "notes.txt"
    text_file.write_text("hello")
    with pytest.raises(backup.BackupRefused, match="not a SQLite database"):
        backup.restore(text_file, target, force=False, known=known)
    other = tmp_path / "other.db"
    with closing(sqlite3.connect(other)) as conn:
        conn.execute("CREATE TABLE t (x)")
    with pytest.raises(backup.BackupRefused, match="not a signoff database"):
        backup.restore(other, target, force=False, known=known)
    with pytest.raises(backup.BackupRefused, match="does not know"):
        backup.restore(dest, target, force=False, known=frozenset({"0001"}))
    assert not target.exists()

    # An existing database: refused without --force, and while a process has it open.
    with pytest.raises(backup.BackupRefused, match="pass --force"):
        backup.restore(dest, source, force=False, known=known)
    async with store.read() as tx:  # the fixture's store holds its connection open
        await tx.list_approvals(limit=1)
    with pytest.raises(backup.BackupRefused, match="open in another process"):
        backup.restore(dest, source, force=True, known=known)


@SQLITE_ONLY
def test_restore_replaces_a_closed_database(db_url: str, tmp_path: Path) -> None:
    known = known_revisions()
    source = _file(db_url)
    saved = tmp_path / "saved.db"
    backup.backup(source, saved, force=False, known=known)
    with closing(sqlite3.connect(source)) as conn, conn:  # it changes after the backup
        conn.execute("INSERT INTO alembic_version VALUES ('extra')")
    backup.restore(saved, source, force=True, known=known)
    with closing(sqlite3.connect(source)) as conn:
        assert len(conn.execute("SELECT * FROM alembic_version").fetchall()) == 1
    assert not Path(f"{source}-wal").exists()


def test_postgresql_is_refused_with_its_own_tools() -> None:
    url = "postgresql+asyncpg://signoff@db/signoff"
    for command in ("backup", "restore"):
        with pytest.raises(backup.BackupRefused, match="pg_dump") as refused:
            backup.sqlite_path(url, command)
        assert "pg_restore" in refused.value.message
