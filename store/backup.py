"""Backup and restore of the embedded SQLite database (`signoff db backup`, `db restore`).

A backup uses SQLite's online backup API (Python's `sqlite3.Connection.backup`) against the
live file, in one step: the copy is the database as of one read transaction, which in WAL
mode holds back no writer of the running server, and so holds every write committed before
it began. The copy is written beside the destination, switched to a rollback journal (one
self-contained file), checked, fsynced and only then given its name.

A restore refuses a file that is not a signoff database at a schema revision this signoff
knows, and a target a process has open (a server, a worker: stop them first), found by
asking SQLite for an exclusive lock on it. PostgreSQL has its own tools (pg_dump,
pg_restore): both commands refuse it and say so.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url

from store.engine import normalize_url
from store.errors import InvalidRequest

_SQLITE_MAGIC = b"SQLite format 3\x00"
POSTGRES_BACKUP = (
    "on PostgreSQL, back up with pg_dump and restore with pg_restore (docs/operations.md, "
    '"Backup and restore"): signoff db {command} works on the embedded SQLite database only'
)


class BackupRefused(InvalidRequest):
    """The backup or restore was refused; nothing was written."""

    code = "backup_refused"


def sqlite_path(database_url: str, command: str) -> Path:
    """The file of a SQLite database URL; a refusal for PostgreSQL and in-memory databases."""
    url = make_url(normalize_url(database_url))
    if url.get_backend_name() != "sqlite":
        raise BackupRefused(POSTGRES_BACKUP.format(command=command))
    database = url.database or ""
    if not database or database == ":memory:" or database.startswith("file:"):
        raise BackupRefused(f"signoff db {command} needs a database file, not {database!r}")
    return Path(database)


@dataclass(frozen=True)
class Checked:
    """What a database file holds, as far as a restore needs to know."""

    revision: str
    requests: int


def check_signoff_database(path: Path, known: frozenset[str], *, whole: bool = True) -> Checked:
    """Refuse `path` unless it is a SQLite file of signoff's at a revision in `known`;
    `whole`: every page checked too (not the live database: a long read for nothing)."""
    try:
        with open(path, "rb") as file:
            magic = file.read(len(_SQLITE_MAGIC))
    except FileNotFoundError:
        raise BackupRefused(f"{path} does not exist") from None
    except OSError as exc:
        raise BackupRefused(f"cannot read {path}: {exc.strerror}") from None
    if magic != _SQLITE_MAGIC:
        raise BackupRefused(f"{path} is not a SQLite database (not a signoff backup)")
    try:
        conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise BackupRefused(f"cannot open {path}: {exc}") from None
    try:
        if whole and conn.execute("PRAGMA quick_check").fetchone() != ("ok",):
            raise BackupRefused(f"{path} is a damaged SQLite database (quick_check failed)")
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not {"alembic_version", "approvals", "approval_events"} <= tables:
            raise BackupRefused(f"{path} is a SQLite database but not a signoff database")
        rows = conn.execute("SELECT version_num FROM alembic_version").fetchall()
        revision = rows[0][0] if len(rows) == 1 else None
        if revision not in known:
            raise BackupRefused(
                f"{path} is at schema revision {revision!r}, which this signoff does not know "
                "(a newer release made it: restore it with that release)"
            )
        requests = conn.execute("SELECT count(*) FROM approvals").fetchone()[0]
    except sqlite3.Error as exc:
        raise BackupRefused(f"{path} cannot be read as a signoff database: {exc}") from None
    finally:
        conn.close()
    return Checked(revision, int(requests))


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _copy(source: sqlite3.Connection, target: Path) -> None:
    """`source` into a new file `target`, one self-contained file on disk (fsynced)."""
    dest = sqlite3.connect(target)
    try:
        source.backup(dest)  # pages=-1: one step, one consistent read of the source
        dest.execute("PRAGMA journal_mode=DELETE")
        dest.commit()
    finally:
        dest.close()
    with open(target, "rb+") as file:
        os.fsync(file.fileno())


def _place(tmp: Path, path: Path, replace: bool) -> None:
    if replace:
        os.replace(tmp, path)
    else:
        os.link(tmp, path)  # refuses an existing path, where a rename would overwrite it
        os.unlink(tmp)
    _fsync_directory(path.parent)


def backup(source: Path, dest: Path, *, force: bool, known: frozenset[str]) -> Checked:
    """Copy the live database `source` to `dest` while servers use it."""
    if dest.exists() and not force:
        raise BackupRefused(f"{dest} exists; choose another path or pass --force to replace it")
    if dest.is_dir():
        raise BackupRefused(f"{dest} is a directory; name the backup file")
    if not dest.parent.is_dir():
        raise BackupRefused(f"{dest.parent} is not a directory")
    check_signoff_database(source, known, whole=False)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        live = sqlite3.connect(source, timeout=30)
        try:
            _copy(live, tmp)
        finally:
            live.close()
        checked = check_signoff_database(tmp, known)
        _place(tmp, dest, force)
    except sqlite3.Error as exc:
        raise BackupRefused(f"the backup failed: {exc}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return checked


def restore(backup_file: Path, target: Path, *, force: bool, known: frozenset[str]) -> Checked:
    """Put the backup `backup_file` in place as the database `target`, which no process
    may have open."""
    checked = check_signoff_database(backup_file, known)
    if target.exists() and not force:
        raise BackupRefused(
            f"{target} exists; pass --force to replace it with the backup (stop every server "
            "and worker using it first)"
        )
    if not target.parent.is_dir():
        raise BackupRefused(f"{target.parent} is not a directory")
    if target.exists():
        _refuse_if_open(target)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        source = sqlite3.connect(f"{backup_file.absolute().as_uri()}?mode=ro", uri=True)
        try:
            _copy(source, tmp)
        finally:
            source.close()
        if target.exists():
            _refuse_if_open(target)  # again, just before: a server may have started since
        # The old database's journal files would be read as the new one's: gone first.
        for stale in ("-wal", "-shm", "-journal"):
            Path(f"{target}{stale}").unlink(missing_ok=True)
        _place(tmp, target, replace=True)
    except sqlite3.Error as exc:
        raise BackupRefused(f"the restore failed: {exc}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return checked


def _refuse_if_open(path: Path) -> None:
    """A process with the database open (its WAL connections hold a shared lock while they
    are open, idle or not) makes an exclusive lock impossible: refuse then."""
    conn = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        conn.execute("PRAGMA locking_mode=EXCLUSIVE")
        conn.execute("BEGIN EXCLUSIVE")
        conn.execute("ROLLBACK")
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise BackupRefused(
                f"{path} is open in another process (a server or worker?): stop it, then restore"
            ) from None
    except sqlite3.DatabaseError:
        pass  # not a database at all: nothing can be using it as one
    finally:
        conn.close()
