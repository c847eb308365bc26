"""The commands that keep the database's history: `db archive` (retention), `db backup` and
`db restore` (SQLite), `audit export` and `audit verify --archive FILE` (offline).

Every refusal is made before anything is written: a missing retention, a range that ends
before it starts, an unknown tenant, an existing file without --force, a file that is not
what it should be, PostgreSQL for backup and restore.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.cli.context import EXIT_REFUSED
from bot.errors import InvalidRequest, SignoffError

if TYPE_CHECKING:
    from bot.cli.context import Context
    from bot.config import Config


def _size(count: int) -> str:
    """Bytes as people read them: 912 B, 38.7 MB."""
    size = float(count)
    for unit in ("B", "kB", "MB"):
        if size < 1000:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"


async def cmd_db_archive(ctx: Context, args: argparse.Namespace) -> int:
    from bot.archive import Retention, archive
    from store import archive as archive_store

    retention = Retention.from_config(ctx.config)
    if args.list:
        async with ctx.store.read() as tx:
            rows = await archive_store.batches(tx)
        for row in rows:
            print(
                f"{row['id']}  {row['created_at']:%Y-%m-%d %H:%M}  {row['requests']:>6} requests "
                f"{row['events']:>7} events  sha256:{row['sha256']}"
            )
        if not rows:
            print("no archive batches recorded")
        return 0
    if args.dry_run:
        cutoff = ctx.clock.now() - retention.keep
        async with ctx.store.read() as tx:
            total, ready = await archive_store.counts_before(tx, cutoff)
        print(
            f"{ready} decided requests would be archived to {retention.directory} "
            f"({total - ready} more held back: a job still queued, an open follow-up or a "
            "recent standing grant)"
        )
        return 0
    report = await archive(ctx.store, ctx.clock, retention)
    for path in report.recovered:
        print(f"finished {path.name}, which an interrupted run had written", file=sys.stderr)
    for path in report.unverified:
        print(
            f"signoff: {path} is not recorded and does not verify; nothing was deleted for it "
            f"(check it with `signoff audit verify --archive {path}`)",
            file=sys.stderr,
        )
    print(
        f"archived {report.requests} requests ({report.events} events) decided before "
        f"{report.cutoff:%Y-%m-%d %H:%M} UTC into {len(report.files)} file(s) in "
        f"{retention.directory}, {_size(report.bytes)}"
    )
    return EXIT_REFUSED if report.unverified else 0


def _moment(text: str | None, now: datetime, flag: str) -> datetime | None:
    """A date, a date and time, or a duration back from now ("30d")."""
    from bot.durations import parse_duration, parse_moment

    if text is None:
        return None
    try:
        return now - parse_duration(text)
    except ValueError:
        pass
    try:
        return parse_moment(text, now)
    except ValueError as exc:
        raise InvalidRequest(f"{flag}: {exc} (or a duration back from now, 30d)") from None


def _new_file(out: Path, force: bool) -> Path:
    if out.exists() and not force:
        raise InvalidRequest(f"{out} exists; choose another name or pass --force")
    if not out.parent.is_dir():
        raise InvalidRequest(f"{out.parent} is not a directory")
    return out


async def cmd_audit_export(ctx: Context, args: argparse.Namespace) -> int:
    from bot.archive import check_export, export
    from bot.archive_file import atomic_file

    now = ctx.clock.now()
    chosen: dict[str, Any] = {
        "tenant": args.tenant,
        "since": _moment(args.since, now, "--since"),
        "until": _moment(args.until, now, "--until"),
    }
    await check_export(ctx.store, known_tenants=frozenset(ctx.directory.tenants), **chosen)
    if args.out is None:
        if sys.stdout.isatty():
            raise InvalidRequest("the export is gzip: name a file with --out, or redirect stdout")
        report = await export(ctx.store, ctx.clock, sys.stdout.buffer, **chosen)
    else:
        out = _new_file(Path(args.out), args.force)
        try:
            with atomic_file(out, replace=args.force) as stream:
                report = await export(ctx.store, ctx.clock, stream, **chosen)
        except FileExistsError:
            raise InvalidRequest(f"{out} exists; choose another name or pass --force") from None
    where = f" to {args.out}" if args.out else ""
    print(f"exported {report.requests} requests ({report.events} events){where}", file=sys.stderr)
    return 0


# -- offline: no database session ----------------------------------------------------------


async def cmd_db_backup(config: Config, args: argparse.Namespace) -> int:
    from store import backup
    from store.migrate import known_revisions

    source = backup.sqlite_path(config.database_url, "backup")
    checked = await asyncio.to_thread(
        backup.backup, source, Path(args.path), force=args.force, known=known_revisions()
    )
    print(
        f"backed up {source} to {args.path}: schema {checked.revision}, {checked.requests} requests"
    )
    return 0


async def cmd_db_restore(config: Config, args: argparse.Namespace) -> int:
    from store import backup
    from store.migrate import known_revisions

    target = backup.sqlite_path(config.database_url, "restore")
    checked = await asyncio.to_thread(
        backup.restore, Path(args.path), target, force=args.force, known=known_revisions()
    )
    print(
        f"restored {args.path} as {target}: schema {checked.revision}, "
        f"{checked.requests} requests; the next start brings the schema up to date"
    )
    return 0


def verify_archive(path: str) -> int:
    """`audit verify --archive FILE`: every chain and hash in the file, no database."""
    from bot.archive_file import verify_file
    from bot.cli.rendering import safe

    file = Path(path)
    if not file.is_file():
        print(f"signoff: {safe(path)} is not a file", file=sys.stderr)
        return EXIT_REFUSED
    try:
        report = verify_file(file)
    except (OSError, SignoffError) as exc:
        print(f"signoff: cannot read {safe(path)}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    if report.ok:
        header = report.header
        print(
            f"archive intact: {header.get('kind')} {header.get('batch')}, {report.requests} "
            f"requests, {report.events} events, every chain and hash checked"
        )
        return 0
    for problem in report.problems:
        who = f" (approval {problem.approval_id})" if problem.approval_id else ""
        print(f"{safe(path)} line {problem.line}{who}: {safe(problem.problem)}", file=sys.stderr)
    print(
        f"archive BROKEN: {len(report.problems)} problem(s); {report.requests} requests read",
        file=sys.stderr,
    )
    return EXIT_REFUSED


class ArchiveFile(argparse.Action):
    """`--archive FILE` turns `audit verify` into a command without a database or config."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        setattr(namespace, self.dest, values)

        def run() -> int:
            if getattr(namespace, "id", None):  # known only once every argument is read
                print("signoff: give an approval id or --archive FILE, not both", file=sys.stderr)
                return 2
            return verify_archive(values)

        namespace.standalone = run


def register(db: Any, audit: Any, common: argparse.ArgumentParser) -> None:
    """Add these commands to the `db` and `audit` command groups."""
    p = db.add_parser(
        "archive", parents=[common], help="move decided requests past [retention] to files"
    )
    p.add_argument("--dry-run", action="store_true", help="count, archive nothing")
    p.add_argument("--list", action="store_true", help="list the archive batches recorded")
    p.set_defaults(handler=cmd_db_archive)
    p = db.add_parser("backup", parents=[common], help="copy the live SQLite database")
    p.add_argument("path", help="the backup file to write")
    p.add_argument("--force", action="store_true", help="replace an existing file")
    p.set_defaults(offline=cmd_db_backup)
    p = db.add_parser(
        "restore", parents=[common], help="put a SQLite backup in place (servers stopped)"
    )
    p.add_argument("path", help="the backup file to restore")
    p.add_argument("--force", action="store_true", help="replace the existing database")
    p.set_defaults(offline=cmd_db_restore)

    p = audit.add_parser(
        "export", parents=[common], help="requests and their trails as an archive file"
    )
    p.add_argument("--since", metavar="T", help="created at or after (date, date and time, 30d)")
    p.add_argument("--until", metavar="T", help="created before (same forms)")
    p.add_argument("--tenant", help="only this tenant")
    p.add_argument("--out", metavar="FILE", help="write here (default: stdout)")
    p.add_argument("--force", action="store_true", help="replace an existing --out file")
    p.set_defaults(handler=cmd_audit_export)


__all__ = ["ArchiveFile", "register", "verify_archive"]
