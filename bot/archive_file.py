"""The archive file: what `signoff db archive` moves out of the database and `signoff audit
export` copies out of it, and its offline verification (`signoff audit verify --archive`).

A gzip-compressed JSON Lines file:

- line 1, the header: `{"signoff_archive": 1, "kind": "archive" | "export", "batch": ...,
  "created_at": ..., ...}`;
- one line per request: `{"request": {every column of its row}, "events": [its whole audit
  trail, oldest first], "votes": [...], "refusals": [...], "grants": [standing grants given
  from it], "cards": [the chat messages that showed it]}`; times are UTC text
  (2026-01-05T09:00:00.000000Z, the form the event hashes cover);
- the last line: `{"end": {"requests": N, "events": M, "sha256": ...}}`, the SHA-256 of the
  request lines' bytes (each with its newline), so a file cut at a line boundary, or with a
  line taken out, added or edited, is caught even where every chain in it holds.

The audit chain is per request (bot/audit.py): each line carries one request's chain from
its first event to the head its row records, so a line is verified on its own, exactly as
`audit verify` verifies that request in the database, and the requests left in the
database lose no link by their neighbours leaving.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import zlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from bot import audit
from bot.clock import utc_iso
from store import json_text
from store.archive import FINAL_STATES
from store.records import ChainHead, Event

FORMAT = 1
SUFFIX = ".jsonl.gz"


def _plain(value: Any) -> Any:
    return utc_iso(value) if isinstance(value, datetime) else value


def _row(row: Mapping[str, Any]) -> dict[str, Any]:
    return {key: _plain(value) for key, value in row.items()}


def line_of(bundle: Mapping[str, Any]) -> dict[str, Any]:
    """One request's line (store.archive.bundles' form, times as text)."""
    return {
        key: _row(rows) if key == "request" else [_row(r) for r in rows]
        for key, rows in bundle.items()
    }


class Writer:
    """Writes one archive file's lines to a binary stream as gzip: the header, the requests,
    the end line on `close`."""

    def __init__(self, out: IO[bytes], header: Mapping[str, Any]) -> None:
        # mtime=0: the same lines make the same bytes (a batch's SHA-256 is reproducible).
        self._gzip = gzip.GzipFile(fileobj=out, mode="wb", compresslevel=6, mtime=0)
        self._digest = hashlib.sha256()
        self.requests = self.events = 0
        self._write({"signoff_archive": FORMAT, **header})

    def _write(self, value: Mapping[str, Any]) -> bytes:
        data = json_text.dumps(value).encode() + b"\n"
        self._gzip.write(data)
        return data

    def add(self, bundle: Mapping[str, Any]) -> None:
        self._digest.update(self._write(line_of(bundle)))
        self.requests += 1
        self.events += len(bundle["events"])

    def close(self) -> None:
        end = {"requests": self.requests, "events": self.events, "sha256": self._digest.hexdigest()}
        self._write({"end": end})
        self._gzip.close()


def _link(tmp: Path, path: Path) -> None:
    """`tmp` as `path`, refusing an existing `path` (a rename would overwrite it)."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise
    except OSError:  # a file system without hard links: check, then rename
        if path.exists():
            raise FileExistsError(path) from None
        os.rename(tmp, path)


@contextmanager
def atomic_file(path: Path, *, replace: bool = False) -> Iterator[IO[bytes]]:
    """A new file at `path` with what the block writes, durably: a temporary file beside it,
    fsynced, linked into place, the directory fsynced. Nothing is left at `path` if the
    block fails; an existing `path` is refused unless `replace`."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "xb") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            _link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def write_atomically(path: Path, data: bytes) -> None:
    """`data` as the new file `path` (`atomic_file`)."""
    with atomic_file(path) as out:
        out.write(data)


# -- reading and verifying -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Problem:
    line: int
    approval_id: str | None
    problem: str


@dataclass
class FileReport:
    header: dict[str, Any] = field(default_factory=dict)
    requests: int = 0
    events: int = 0
    problems: list[Problem] = field(default_factory=list)
    approval_ids: list[str] = field(default_factory=list)
    # Each request's chain head as the file holds it: what the archiver may delete.
    heads: dict[str, tuple[int, str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems


class Unreadable(Exception):
    """The file cannot be read on from `line` (not gzip, cut short, corrupt)."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(reason)
        self.line, self.reason = line, reason


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    number = 0
    try:
        with gzip.open(path, "rb") as stream:
            for number, raw in enumerate(stream, start=1):
                yield number, raw
    except gzip.BadGzipFile:
        where = "not a gzip file" if number == 0 else "the gzip stream is corrupt"
        raise Unreadable(number + 1, where) from None
    except EOFError:
        raise Unreadable(number + 1, "the file is cut short (its gzip stream ends early)") from None
    except zlib.error as exc:
        raise Unreadable(number + 1, f"the compressed data is corrupt ({exc})") from None


def _time(text: Any) -> datetime:
    if not isinstance(text, str):
        raise ValueError(f"expected a time, got {text!r}")
    return datetime.fromisoformat(text)


def _events(rows: Any) -> list[Event]:
    if not isinstance(rows, list):
        raise ValueError("events: expected a list")
    return [
        Event(
            id=row.get("id"),
            approval_id=row["approval_id"],
            seq=row["seq"],
            type=row["type"],
            actor=row.get("actor"),
            at=_time(row["at"]),
            data=row["data"],
            prev_hash=row["prev_hash"],
            hash=row["hash"],
        )
        for row in rows
    ]


def _head(row: Mapping[str, Any]) -> ChainHead:
    return ChainHead(
        audit_seq=row["audit_seq"],
        audit_head=row["audit_head"],
        state=row["state"],
        decided_by=row.get("decided_by"),
        hash=row["hash"],
        kind=row["kind"],
        capability=row["capability"],
        presentation=row["presentation"],
        tool_name=row["tool_name"],
        args=row["tool_args"],
        question=row.get("question"),
        original_args=row.get("original_args"),
        original_hash=row.get("original_hash"),
    )


def _judge(number: int, line: Mapping[str, Any], kind: str, report: FileReport) -> None:
    """One request line: its chain and its row, as `audit verify` judges them."""
    request = line["request"]
    if not isinstance(request, dict) or not isinstance(request.get("id"), str):
        report.problems.append(Problem(number, None, "the request has no id"))
        return
    approval_id = request["id"]
    if approval_id in report.heads:
        report.problems.append(Problem(number, approval_id, "this request is in the file twice"))
        return
    try:
        events = _events(line.get("events"))
        head = _head(request)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        problem = f"the line is not a whole request ({type(exc).__name__}: {exc})"
        report.problems.append(Problem(number, approval_id, problem))
        return
    report.events += len(events)
    report.heads[approval_id] = (head.audit_seq, head.audit_head)
    report.approval_ids.append(approval_id)
    if any(event.approval_id != approval_id for event in events):
        report.problems.append(Problem(number, approval_id, "an event names another request"))
        return
    if not events:
        report.problems.append(Problem(number, approval_id, "the request has no audit events"))
        return
    try:
        broken = audit.trail_problem(head, events)
    except (TypeError, ValueError, AttributeError, KeyError) as exc:  # a value of the wrong type
        problem = f"the line is not a whole request ({type(exc).__name__}: {exc})"
        report.problems.append(Problem(number, approval_id, problem))
        return
    if broken is not None:
        report.problems.append(
            Problem(number, approval_id, f"event #{broken.seq}: {broken.problem}")
        )
    elif kind == "archive" and head.state not in FINAL_STATES:
        problem = f"an archive holds only decided requests, this one is {head.state!r}"
        report.problems.append(Problem(number, approval_id, problem))


def verify_file(path: Path) -> FileReport:
    """Every chain and hash of an archive file, without a database. Problems name their line;
    a file that cannot be read on stops at the line where it breaks."""
    report = FileReport()
    digest = hashlib.sha256()
    ended = False
    last = 0
    try:
        for number, raw in _lines(path):
            last = number
            if ended:
                report.problems.append(Problem(number, None, "a line after the end line"))
                break
            try:
                line = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
                report.problems.append(Problem(number, None, f"not a JSON line ({exc})"))
                if number == 1:
                    break
                continue
            if not isinstance(line, dict):
                report.problems.append(Problem(number, None, "not a JSON object"))
                continue
            if number == 1:
                if line.get("signoff_archive") != FORMAT:
                    problem = "not a signoff archive (its first line is no archive header)"
                    report.problems.append(Problem(1, None, problem))
                    break
                report.header = line
            elif "end" in line:
                ended = True
                _check_end(number, line["end"], digest.hexdigest(), report)
            elif "request" in line:
                digest.update(raw)
                report.requests += 1
                _judge(number, line, str(report.header.get("kind")), report)
            else:
                report.problems.append(Problem(number, None, "neither a request nor the end line"))
    except Unreadable as exc:
        report.problems.append(Problem(exc.line, None, exc.reason))
        return report
    if last == 0:
        report.problems.append(Problem(1, None, "the file is empty"))
    elif report.header and not ended:
        problem = f"the file ends at line {last} without its end line: it was cut short"
        report.problems.append(Problem(last + 1, None, problem))
    return report


def _check_end(number: int, end: Any, digest: str, report: FileReport) -> None:
    if not isinstance(end, dict):
        report.problems.append(Problem(number, None, "the end line is malformed"))
        return
    if end.get("requests") != report.requests:
        problem = (
            f"the end line counts {end.get('requests')} requests, the file holds {report.requests}"
        )
        report.problems.append(Problem(number, None, problem))
    elif end.get("sha256") != digest:
        problem = "the request lines do not hash to the end line's SHA-256 (a line was altered)"
        report.problems.append(Problem(number, None, problem))


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
