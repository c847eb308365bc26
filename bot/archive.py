"""Retention: decided requests older than `[retention] keep_decided` leave the database for
archive files (bot/archive_file.py), with their whole audit trails; and audit export, the
same file for a time range and tenant, deleting nothing.

An archive run works in batches, each its own file and its own write transaction:

1. find up to `batch` archivable requests (store.archive: a final state, the newest event
   of their trail older than the cutoff, no job still queued, no open follow-up, no
   standing grant given from them that ended after the cutoff) and read everything stored
   about them, outside any lock, and compress it;
2. in one write transaction: lock those rows and read their chain heads; a request that
   moved since (an event appended) stays for a later run; write the file (temporary name,
   fsync, link into place, fsync the directory), then delete the rows it holds and record
   the batch (`archive_batches`: its file, counts, SHA-256); commit.

The file is on disk before the rows go. A crash after the file and before the commit
leaves the rows and a complete file without its ledger row; the next run (`recover`) finds
the file, verifies it, deletes exactly the rows it holds whose chain heads are still the
ones in the file, and records it. A request that gained an event in between (a late
refused click) stays and is archived again later, its chain then extending the one in the
earlier file. A run never writes a request the ledger says has left, so re-running
duplicates nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import logging
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO, Any

from bot import archive_file
from bot.clock import Clock, utc_iso
from bot.errors import ConfigError, InvalidRequest
from store import archive as archive_store
from store.repository import Store

log = logging.getLogger("signoff.archive")

PREFIX = "signoff-archive-"


@dataclass(frozen=True)
class Retention:
    """`[retention]` as the archiver runs it."""

    keep: timedelta
    directory: Path
    batch: int = 1000

    @classmethod
    def from_config(cls, config: Any) -> Retention:
        """From a `Config`; a refusal (nothing done) when no retention is configured."""
        from bot.durations import parse_duration

        retention = config.retention
        if retention.keep_decided is None:
            raise ConfigError(
                'no retention is configured: set [retention] keep_decided (e.g. "400d") '
                "before archiving"
            )
        return cls(
            parse_duration(retention.keep_decided), Path(retention.archive_dir), retention.batch
        )


@dataclass
class ArchiveReport:
    cutoff: datetime
    requests: int = 0
    events: int = 0
    bytes: int = 0
    files: list[Path] = field(default_factory=list)
    recovered: list[Path] = field(default_factory=list)
    # Files in the archive directory a crash left that do not verify: nothing was deleted
    # for them; an operator looks.
    unverified: list[Path] = field(default_factory=list)


def _batch_id(now: datetime) -> str:
    return f"{PREFIX}{now:%Y%m%dT%H%M%S}-{secrets.token_hex(4)}"


def _encode(header: dict[str, Any], bundles: list[dict[str, Any]]) -> tuple[bytes, int, int]:
    out = io.BytesIO()
    writer = archive_file.Writer(out, header)
    for bundle in bundles:
        writer.add(bundle)
    writer.close()
    return out.getvalue(), writer.requests, writer.events


def _prepare_directory(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot create the archive directory {directory}: {exc.strerror}"
        ) from None
    if not directory.is_dir():
        raise ConfigError(f"[retention] archive_dir {directory} is not a directory")


async def archive(
    store: Store,
    clock: Clock,
    retention: Retention,
    *,
    max_batches: int | None = None,
) -> ArchiveReport:
    """Move every archivable request (or `max_batches` files' worth) to archive files."""
    _prepare_directory(retention.directory)
    now = clock.now()
    report = ArchiveReport(cutoff=now - retention.keep)
    await recover(store, retention.directory, report)
    after = ""
    done = 0
    while max_batches is None or done < max_batches:
        async with store.read() as tx:
            ids = await archive_store.archivable(tx, report.cutoff, after, retention.batch)
        if not ids:
            break
        after = ids[-1]
        await _one_batch(store, clock, retention.directory, report, ids)
        done += 1
    return report


async def _one_batch(
    store: Store, clock: Clock, directory: Path, report: ArchiveReport, ids: list[str]
) -> None:
    async with store.read() as tx:
        bundles = await archive_store.bundles(tx, ids)
    now = clock.now()
    batch = _batch_id(now)
    header = {
        "kind": "archive",
        "batch": batch,
        "created_at": utc_iso(now),
        "cutoff": utc_iso(report.cutoff),
    }
    # Compressed before the lock: the write transaction holds only the file's write.
    body, requests, events = await asyncio.to_thread(_encode, header, bundles)
    path = directory / f"{batch}{archive_file.SUFFIX}"
    async with store.write() as tx:
        heads = await archive_store.lock_heads(tx, ids)
        still = [
            b
            for b in bundles
            if heads.get(b["request"]["id"])
            == (b["request"]["audit_seq"], b["request"]["audit_head"], b["request"]["state"])
        ]
        if not still:
            return
        if len(still) < len(bundles):  # rare: one moved since it was read
            body, requests, events = _encode(header, still)
        await asyncio.to_thread(archive_file.write_atomically, path, body)
        try:
            await archive_store.remove(tx, [b["request"]["id"] for b in still])
            await archive_store.record_batch(
                tx,
                {
                    "id": batch,
                    "created_at": now,
                    "cutoff": report.cutoff,
                    "requests": requests,
                    "events": events,
                    "sha256": _sha256(body),
                },
            )
        except BaseException:
            path.unlink(missing_ok=True)  # rolled back: the rows stay, so must no file
            raise
    report.requests += requests
    report.events += events
    report.bytes += len(body)
    report.files.append(path)


def _sha256(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def _batch_files(directory: Path) -> dict[str, Path]:
    found = directory.glob(f"{PREFIX}*{archive_file.SUFFIX}")
    return {p.name.removesuffix(archive_file.SUFFIX): p for p in found}


async def recover(store: Store, directory: Path, report: ArchiveReport) -> None:
    """Finish the batches a crash interrupted: files in `directory` the ledger lacks."""
    files = await asyncio.to_thread(_batch_files, directory)
    if not files:
        return
    async with store.read() as tx:
        known = await archive_store.recorded(tx, files)
    for batch in sorted(set(files) - known):
        path = files[batch]
        checked = await asyncio.to_thread(archive_file.verify_file, path)
        if not checked.ok or checked.header.get("kind") != "archive":
            log.error("archive file %s is not recorded and does not verify; left alone", path)
            report.unverified.append(path)
            continue
        async with store.write() as tx:
            heads = await archive_store.lock_heads(tx, checked.approval_ids)
            held = [
                approval_id
                for approval_id, (seq, head) in checked.heads.items()
                if heads.get(approval_id, (None, None, None))[:2] == (seq, head)
            ]
            await archive_store.remove(tx, held)
            created = checked.header.get("created_at")
            cutoff = checked.header.get("cutoff")
            await archive_store.record_batch(
                tx,
                {
                    "id": batch,
                    "created_at": datetime.fromisoformat(created) if created else report.cutoff,
                    "cutoff": datetime.fromisoformat(cutoff) if cutoff else report.cutoff,
                    "requests": checked.requests,
                    "events": checked.events,
                    "sha256": await asyncio.to_thread(archive_file.file_sha256, path),
                },
            )
        log.warning(
            "finished archive batch %s a crash interrupted (%d rows deleted)", batch, len(held)
        )
        report.recovered.append(path)


# -- export ---------------------------------------------------------------------------------


@dataclass
class ExportReport:
    requests: int = 0
    events: int = 0


async def check_export(
    store: Store,
    *,
    tenant: str | None,
    since: datetime | None,
    until: datetime | None,
    known_tenants: set[str] | frozenset[str],
) -> None:
    """Refuse a range that ends before it starts and a tenant neither configured nor
    stored, before anything is written."""
    if since is not None and until is not None and since >= until:
        raise InvalidRequest(f"--since ({utc_iso(since)}) is not before --until ({utc_iso(until)})")
    if tenant is not None and tenant not in known_tenants:
        async with store.read() as tx:
            stored = await archive_store.tenants_seen(tx, tenant)
        if not stored:
            raise InvalidRequest(
                f"unknown tenant {tenant!r}: not configured and no request of it is stored"
            )


async def export(
    store: Store,
    clock: Clock,
    out: IO[bytes],
    *,
    tenant: str | None,
    since: datetime | None,
    until: datetime | None,
    page: int = 500,
) -> ExportReport:
    """Write every request created in [since, until) (of `tenant`) with its whole trail to
    `out` in the archive format (`check_export` first)."""
    now = clock.now()
    header = {
        "kind": "export",
        "batch": f"signoff-export-{now:%Y%m%dT%H%M%S}",
        "created_at": utc_iso(now),
        "tenant": tenant,
        "since": utc_iso(since) if since else None,
        "until": utc_iso(until) if until else None,
    }
    writer = archive_file.Writer(out, header)
    after = ""
    while True:
        async with store.read() as tx:
            ids = await archive_store.exportable(
                tx, tenant=tenant, since=since, until=until, after=after, limit=page
            )
            if not ids:
                break
            bundles = await archive_store.bundles(tx, ids)
        after = ids[-1]
        for bundle in bundles:
            writer.add(bundle)
    writer.close()
    return ExportReport(writer.requests, writer.events)
