"""`signoff db archive`, `audit export`, `audit verify --archive`, `db backup` and `db restore`
as an operator runs them, against both databases: what they do, and every refusal a clear
line with nothing written."""

from __future__ import annotations

import gzip
import time
from pathlib import Path

from tests.support.cli import (
    Deployment,
    assert_refused,
    config_with,
    deployment,
    to_toml,
)


def _with_retention(deploy: Deployment, db_url: str, **retention: object) -> None:
    deploy.config_path.write_text(to_toml(config_with(db_url, retention=retention)), "utf-8")


def _decided(deploy: Deployment) -> str:
    """A globex request (no webhook, no cards: nothing left queued), rejected by dave."""
    record = deploy.request(tenant="globex", capability="x.y", run_id="r1")
    result = deploy.cli.run(
        "approvals", "reject", record["id"], "--hash", record["hash"], "--as", "dave"
    )
    assert result.returncode == 0, str(result)
    return str(record["id"])


def test_archive_export_and_offline_verify(tmp_path: Path, db_url: str) -> None:
    deploy = deployment(tmp_path, db_url, None)
    decided = _decided(deploy)
    pending = deploy.request(tenant="globex", capability="x.y", run_id="r2")["id"]
    _with_retention(deploy, db_url, keep_decided="1s", archive_dir="kept", batch=10)
    time.sleep(1.2)

    export = deploy.cli.run("audit", "export", "--tenant", "globex", "--out", "all.jsonl.gz")
    assert export.returncode == 0 and "exported 2 requests" in export.stderr, str(export)

    dry = deploy.cli.run("db", "archive", "--dry-run")
    assert dry.returncode == 0 and dry.stdout.startswith("1 decided requests"), str(dry)
    result = deploy.cli.run("db", "archive")
    assert result.returncode == 0 and "archived 1 requests" in result.stdout, str(result)
    (path,) = (tmp_path / "kept").iterdir()  # beside the config file
    with gzip.open(path, "rt") as lines:
        assert decided in lines.read()

    for file in (path, tmp_path / "all.jsonl.gz"):
        verified = deploy.cli.run("audit", "verify", "--archive", str(file))
        assert verified.returncode == 0 and "archive intact" in verified.stdout, str(verified)
    whole = deploy.cli.run("audit", "verify")
    assert whole.returncode == 0 and "1 approvals" in whole.stdout, str(whole)
    listed = deploy.cli.run("db", "archive", "--list")
    assert path.name.removesuffix(".jsonl.gz") in listed.stdout, str(listed)
    shown = deploy.cli.run("approvals", "show", pending)
    assert shown.returncode == 0, str(shown)

    # A line cut out of the middle of the file: verify says which line, offline.
    with gzip.open(path, "rb") as stream:
        lines = stream.readlines()
    broken = tmp_path / "broken.jsonl.gz"
    with gzip.open(broken, "wb") as stream:
        stream.writelines([lines[0], lines[1][: len(lines[1]) // 2] + b"\n", lines[2]])
    refused = deploy.cli.run("audit", "verify", "--archive", str(broken))
    assert refused.returncode == 1 and "line 2" in refused.stderr, str(refused)
    assert "Traceback" not in refused.stderr


def test_refusals_write_nothing(tmp_path: Path, db_url: str) -> None:
    deploy = deployment(tmp_path, db_url, None)
    assert_refused(deploy.cli.run("db", "archive"), "no retention is configured", "keep_decided")
    assert not (tmp_path / "archive").exists()

    out = tmp_path / "x.jsonl.gz"
    backwards = deploy.cli.run(
        "audit", "export", "--since", "2026-12-01", "--until", "2026-11-01", "--out", str(out)
    )
    assert_refused(backwards, "is not before --until")
    assert_refused(
        deploy.cli.run("audit", "export", "--tenant", "initech", "--out", str(out)),
        "unknown tenant 'initech'",
    )
    assert not out.exists()
    out.write_text("keep me")
    assert_refused(deploy.cli.run("audit", "export", "--out", str(out)), "exists")
    assert out.read_text() == "keep me"

    not_gzip = deploy.cli.run("audit", "verify", "--archive", str(out))
    assert not_gzip.returncode == 1 and not_gzip.stdout == "", str(not_gzip)
    assert "x.jsonl.gz line 1: not a gzip file" in not_gzip.stderr, str(not_gzip)

    if db_url.startswith("postgresql"):
        for command in ("backup", "restore"):
            line = assert_refused(deploy.cli.run("db", command, str(tmp_path / "b.db")), "pg_dump")
            assert "pg_restore" in line
        assert not (tmp_path / "b.db").exists()
        return
    existing = tmp_path / "b.db"
    existing.write_text("not a backup")
    assert_refused(deploy.cli.run("db", "backup", str(existing)), "exists", "--force")
    assert_refused(deploy.cli.run("db", "restore", str(existing)), "not a SQLite database")
    assert existing.read_text() == "not a backup"


def test_backup_then_restore_through_the_cli(tmp_path: Path, sqlite_db: Deployment) -> None:
    decided = _decided(sqlite_db)
    saved = tmp_path / "saved.db"
    result = sqlite_db.cli.run("db", "backup", str(saved))
    assert result.returncode == 0 and "1 requests" in result.stdout, str(result)
    sqlite_db.execute("DELETE FROM approval_events")  # a disaster after the backup
    assert_refused(sqlite_db.cli.run("db", "restore", str(saved)), "pass --force")
    result = sqlite_db.cli.run("db", "restore", str(saved), "--force")
    assert result.returncode == 0, str(result)
    verified = sqlite_db.cli.run("audit", "verify")
    assert verified.returncode == 0 and "1 approvals" in verified.stdout, str(verified)
    assert sqlite_db.query("SELECT state FROM approvals WHERE id = ?", decided) == [("rejected",)]
