"""Retention and audit export on both databases: decided requests past the retention move to
archive files that verify offline, nothing else moves, a crash between the file and the
delete is finished by the next run without a duplicate, and the refusals write nothing."""

from __future__ import annotations

import gzip
import io
import json
from datetime import timedelta
from pathlib import Path

import pytest

from bot import archive_file, audit
from bot.archive import Retention, archive, check_export, export
from bot.clock import FakeClock
from bot.config import parse_config
from bot.errors import ConfigError, InvalidRequest
from bot.intake import create_request
from bot.operator import Actor, Operator
from bot.sweeper import Sweeper, retention_for
from store import archive as archive_store
from store.records import Approval
from store.repository import Store
from tests.support.samples import TEST_CONFIG, make_request, tamper

ALICE = Actor("alice", via="test")
KEEP = timedelta(days=400)


async def _create(
    store: Store, operator: Operator, clock: FakeClock, run: str, **kw: object
) -> Approval:
    tenant = str(kw.pop("tenant", "acme"))
    made = await create_request(
        store, operator.directory, clock, tenant, make_request(run_id=run, **kw)
    )
    return made.approval


async def _history(store: Store, operator: Operator, clock: FakeClock) -> dict[str, Approval]:
    """Three decided (approved and executed is not reachable here: rejected, cancelled, a
    quorum rejected), one approved, one pending; then the outbox's jobs done."""
    made = {}
    for name in ("rejected", "cancelled", "quorum", "approved", "pending"):
        capability = "quorum.x" if name == "quorum" else "payments.refund"
        made[name] = await _create(store, operator, clock, name, capability=capability)
        clock.advance(minutes=1)
    await operator.reject_shown(made["rejected"].id, made["rejected"].hash, ALICE, note="no")
    await operator.cancel(made["cancelled"].id, ALICE)
    await operator.approve_shown(made["quorum"].id, made["quorum"].hash, ALICE)
    await operator.reject_shown(made["quorum"].id, made["quorum"].hash, Actor("bob", via="test"))
    await operator.approve_shown(made["approved"].id, made["approved"].hash, ALICE)
    await tamper(store, "UPDATE outbox SET state = 'done'")
    return made


def _save(path: Path, data: bytes) -> None:
    path.write_bytes(data)


def _ids_in(paths: list[Path]) -> list[str]:
    ids = []
    for path in paths:
        with gzip.open(path, "rt") as lines:
            for line in lines:
                record = json.loads(line)
                if "request" in record:
                    ids.append(record["request"]["id"])
    return ids


async def _states(store: Store) -> dict[str, str]:
    async with store.read() as tx:
        rows = await tx.list_approvals(limit=100)
    return {row.id: row.state for row in rows}


async def test_decided_requests_past_retention_move_to_a_verified_file(
    store: Store, operator: Operator, clock: FakeClock, tmp_path: Path
) -> None:
    made = await _history(store, operator, clock)
    # A row of a table declared beside its statements names a request: it goes with it.
    await tamper(
        store,
        "INSERT INTO email_links (token_hash, approval_id, principal, action, shown_hash, "
        "created_at, expires_at) VALUES (:t, :a, 'alice', 'approve', :h, :at, :at)",
        t="ab" * 32,
        a=made["rejected"].id,
        h=made["rejected"].hash,
        at=clock.now().replace(tzinfo=None),
    )
    retention = Retention(KEEP, tmp_path / "archive", batch=2)

    clock.advance(days=399)  # not yet past the retention: nothing moves
    report = await archive(store, clock, retention)
    assert report.requests == 0 and report.files == []

    clock.advance(days=2)
    report = await archive(store, clock, retention)
    decided = {made[n].id for n in ("rejected", "cancelled", "quorum")}
    assert report.requests == 3 and len(report.files) == 2  # batches of 2
    assert sorted(_ids_in(report.files)) == sorted(decided)
    left = await _states(store)
    assert set(left) == {made["approved"].id, made["pending"].id}  # never archived
    for path in report.files:
        checked = archive_file.verify_file(path)
        assert checked.ok, checked.problems
        assert checked.header["kind"] == "archive"
    # The database that remains verifies too, and records both batches.
    assert (await audit.verify(store)).ok
    async with store.read() as tx:
        ledger = await archive_store.batches(tx)
    assert {row["id"] + archive_file.SUFFIX for row in ledger} == {p.name for p in report.files}
    assert sum(row["requests"] for row in ledger) == 3
    # A second run finds nothing more and writes no file.
    again = await archive(store, clock, retention)
    assert again.requests == 0 and again.files == [] and again.recovered == []
    assert len(list((tmp_path / "archive").iterdir())) == 2


async def test_an_event_on_an_old_request_restarts_its_retention(
    store: Store, operator: Operator, clock: FakeClock, tmp_path: Path
) -> None:
    made = await _history(store, operator, clock)
    clock.advance(days=300)
    # A refused click on the rejected request's card, long after: its trail moved on.
    async with store.write() as tx:
        row = await tx.lock_approval(made["rejected"].id)
        assert row is not None
        await audit.note(tx, row, "refused", actor="bob", at=clock.now(), data={"code": "x"})
    clock.advance(days=101)
    report = await archive(store, clock, Retention(KEEP, tmp_path))
    assert made["rejected"].id not in _ids_in(report.files)
    assert made["cancelled"].id in _ids_in(report.files)


async def test_what_live_work_leans_on_is_held_back(
    store: Store, operator: Operator, clock: FakeClock, tmp_path: Path
) -> None:
    made = await _history(store, operator, clock)
    await tamper(
        store,
        "UPDATE outbox SET state = 'queued' WHERE id = (SELECT min(id) FROM outbox WHERE "
        "approval_id = :a)",
        a=made["rejected"].id,
    )
    clock.advance(days=401)
    report = await archive(store, clock, Retention(KEEP, tmp_path))
    archived = set(_ids_in(report.files))
    assert made["rejected"].id not in archived  # its webhook is still being delivered
    assert made["cancelled"].id in archived
    async with store.read() as tx:
        total, ready = await archive_store.counts_before(tx, clock.now() - KEEP)
    assert (total, ready) == (1, 0)


class Crash(BaseException):
    """The process dies here (kill -9): nothing after it runs, the transaction is lost."""


async def test_a_crash_between_the_file_and_the_delete_is_finished_without_duplicates(
    store: Store,
    operator: Operator,
    clock: FakeClock,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = await _history(store, operator, clock)
    clock.advance(days=401)
    retention = Retention(KEEP, tmp_path / "archive", batch=10)
    write = archive_file.write_atomically

    def write_then_die(path: Path, data: bytes) -> None:
        write(path, data)
        raise Crash

    monkeypatch.setattr(archive_file, "write_atomically", write_then_die)
    with pytest.raises(Crash):
        await archive(store, clock, retention)
    monkeypatch.setattr(archive_file, "write_atomically", write)
    (orphan,) = (tmp_path / "archive").iterdir()
    assert archive_file.verify_file(orphan).ok
    assert len(await _states(store)) == 5  # the rows are all still there

    # Meanwhile one of them gains an event: it must stay, it is more than the file holds.
    async with store.write() as tx:
        row = await tx.lock_approval(made["cancelled"].id)
        assert row is not None
        await audit.note(tx, row, "refused", actor="bob", at=clock.now(), data={"code": "x"})

    report = await archive(store, clock, retention)
    assert report.recovered == [orphan] and report.files == []
    left = await _states(store)
    assert set(left) == {made["approved"].id, made["pending"].id, made["cancelled"].id}
    assert (await audit.verify(store)).ok
    async with store.read() as tx:
        assert [row["id"] for row in await archive_store.batches(tx)] == [
            orphan.name.removesuffix(archive_file.SUFFIX)
        ]
    # Once its own retention is over, it goes, with its whole (longer) trail.
    clock.advance(days=401)
    later = await archive(store, clock, retention)
    assert _ids_in(later.files) == [made["cancelled"].id]
    assert archive_file.verify_file(later.files[0]).ok


async def test_a_failed_delete_leaves_no_file(
    store: Store,
    operator: Operator,
    clock: FakeClock,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await _history(store, operator, clock)
    clock.advance(days=401)

    async def refuse(*args: object) -> None:
        raise RuntimeError("the database refused")

    monkeypatch.setattr(archive_store, "remove", refuse)
    with pytest.raises(RuntimeError):
        await archive(store, clock, Retention(KEEP, tmp_path / "archive"))
    assert list((tmp_path / "archive").iterdir()) == []
    assert len(await _states(store)) == 5


def test_archiving_without_a_retention_is_refused() -> None:
    with pytest.raises(ConfigError, match="keep_decided"):
        Retention.from_config(parse_config(TEST_CONFIG))
    with pytest.raises(ConfigError, match=r"retention\.sweep"):
        parse_config({**TEST_CONFIG, "retention": {"sweep": True}})
    with pytest.raises(ConfigError, match="keep_decided"):
        parse_config({**TEST_CONFIG, "retention": {"keep_decided": "a year"}})
    config = parse_config({**TEST_CONFIG, "retention": {"keep_decided": "400d"}})
    assert Retention.from_config(config).keep == KEEP
    assert retention_for(config) == {}  # the sweeper archives only with `sweep`
    swept = parse_config(
        {
            **TEST_CONFIG,
            "retention": {"keep_decided": "400d", "sweep": True, "sweep_interval": "2h"},
        }
    )
    assert retention_for(swept)["archive_every"] == 7200
    assert retention_for(swept)["retention"].keep == KEEP


async def test_the_sweeper_archives_when_configured(
    store: Store, operator: Operator, clock: FakeClock, tmp_path: Path
) -> None:
    made = await _history(store, operator, clock)
    clock.advance(days=401)
    sweeper = Sweeper(
        store,
        operator.directory,
        clock,
        retention=Retention(KEEP, tmp_path, batch=1),
        archive_every=3600,
    )
    assert await sweeper.archive_if_due() == 3
    assert made["rejected"].id not in await _states(store)
    assert await sweeper.archive_if_due() == 0
    off = Sweeper(store, operator.directory, clock)
    assert await off.archive_if_due() == 0


# -- export -----------------------------------------------------------------------------------


async def test_export_writes_a_time_range_of_one_tenant_and_deletes_nothing(
    store: Store, operator: Operator, clock: FakeClock, tmp_path: Path
) -> None:
    start = clock.now()
    made = await _history(store, operator, clock)  # acme, created a minute apart
    other = await _create(store, operator, clock, "g", tenant="globex", capability="x.y")
    out = tmp_path / "export.jsonl.gz"
    stream = io.BytesIO()
    report = await export(
        store,
        clock,
        stream,
        tenant="acme",
        since=start + timedelta(seconds=30),  # leaves out the first (rejected)
        until=start + timedelta(minutes=4),  # and the last (pending)
    )
    _save(out, stream.getvalue())
    assert report.requests == 3
    ids = set(_ids_in([out]))
    assert ids == {made[n].id for n in ("cancelled", "quorum", "approved")}
    checked = archive_file.verify_file(out)
    assert checked.ok, checked.problems
    assert checked.header["kind"] == "export" and checked.header["tenant"] == "acme"
    assert other.id in await _states(store) and len(await _states(store)) == 6


async def test_export_refusals(store: Store, clock: FakeClock) -> None:
    now = clock.now()
    known = frozenset({"acme", "globex"})
    with pytest.raises(InvalidRequest, match="not before --until"):
        await check_export(
            store, tenant=None, since=now, until=now - timedelta(days=1), known_tenants=known
        )
    with pytest.raises(InvalidRequest, match="unknown tenant 'initech'"):
        await check_export(store, tenant="initech", since=None, until=None, known_tenants=known)
    await check_export(store, tenant="acme", since=None, until=now, known_tenants=known)


# -- offline verification ------------------------------------------------------------------------


async def _one_file(store: Store, operator: Operator, clock: FakeClock, tmp_path: Path) -> Path:
    await _history(store, operator, clock)
    clock.advance(days=401)
    report = await archive(store, clock, Retention(KEEP, tmp_path / "a"))
    (path,) = report.files
    return path


def _rewrite(path: Path, change: object) -> list[bytes]:
    with gzip.open(path, "rb") as stream:
        lines = stream.readlines()
    lines = change(lines)  # type: ignore[operator]
    with gzip.open(path, "wb") as stream:
        stream.writelines(lines)
    return lines


async def test_verify_names_the_line_of_an_altered_event(
    store: Store, operator: Operator, clock: FakeClock, tmp_path: Path
) -> None:
    path = await _one_file(store, operator, clock, tmp_path)

    def edit(lines: list[bytes]) -> list[bytes]:
        record = json.loads(lines[2])
        record["events"][-1]["data"]["note"] = "approved after all"
        lines[2] = json.dumps(record).encode() + b"\n"
        return lines

    _rewrite(path, edit)
    report = archive_file.verify_file(path)
    lines = {p.line for p in report.problems}
    assert 3 in lines, report.problems
    assert any("altered" in p.problem for p in report.problems)


async def test_verify_catches_a_removed_line_and_a_cut_file(
    store: Store, operator: Operator, clock: FakeClock, tmp_path: Path
) -> None:
    path = await _one_file(store, operator, clock, tmp_path)
    whole = path.read_bytes()
    _rewrite(path, lambda lines: lines[:2] + lines[3:])
    report = archive_file.verify_file(path)
    assert any("counts 3 requests, the file holds 2" in p.problem for p in report.problems)

    _rewrite(path, lambda lines: lines[:-1])  # the end line gone: cut at a line boundary
    report = archive_file.verify_file(path)
    assert any("cut short" in p.problem for p in report.problems), report.problems

    path.write_bytes(whole[: len(whole) // 2])  # cut inside the gzip stream
    report = archive_file.verify_file(path)
    assert report.problems and "cut short" in report.problems[-1].problem

    path.write_bytes(b"not gzip at all\n")
    report = archive_file.verify_file(path)
    assert report.problems[0].line == 1 and "not a gzip file" in report.problems[0].problem
