"""Migrations on empty databases of both kinds, and the refusal to run on an old schema."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection

from bot.errors import SchemaOutOfDate
from bot.intake import step_key
from store.engine import create_engine
from store.migrate import alembic_config, ensure_current, head_revision, upgrade
from store.schema import ALL_TABLES


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}"
    return request.getfixturevalue("pg_empty_url")


async def test_upgrade_creates_schema_and_second_run_is_a_no_op(empty_url: str) -> None:
    engine = create_engine(empty_url)
    try:
        with pytest.raises(SchemaOutOfDate, match="signoff db upgrade"):
            await ensure_current(engine)
        assert await upgrade(engine) == (None, head_revision())
        async with engine.connect() as conn:
            tables = await conn.run_sync(lambda c: set(inspect(c).get_table_names()))
            indexes = await conn.run_sync(
                lambda c: {i["name"] for i in inspect(c).get_indexes("approvals")}
            )
        assert {t.name for t in ALL_TABLES} <= tables
        assert "ix_approvals_pending_expiry" in indexes
        await ensure_current(engine)
        assert await upgrade(engine) == (head_revision(), head_revision())
    finally:
        await engine.dispose()


async def test_concurrent_upgrades_take_turns(empty_url: str) -> None:
    """Replicas starting together may all run `db upgrade`: one migrates, the others find
    nothing to do, none fails."""
    engines = [create_engine(empty_url) for _ in range(4)]
    try:
        # Without the lock the racers can block each other for good: fail, don't hang.
        results = await asyncio.wait_for(
            asyncio.gather(*(upgrade(engine) for engine in engines)), timeout=60
        )
        assert sorted(results, key=str) == sorted(
            [(None, head_revision())] + [(head_revision(), head_revision())] * 3, key=str
        )
        await ensure_current(engines[0])
    finally:
        for engine in engines:
            await engine.dispose()


async def test_brand_new_sqlite_file_opened_by_many_at_once(tmp_path: Path) -> None:
    """The first connections to a new file race to switch it to WAL; SQLite answers the losers
    "database is locked" at once (a deadlock, so no busy wait). Each round is a new file."""
    for round_ in range(20):
        url = f"sqlite+aiosqlite:///{tmp_path / f'new-{round_}.db'}"
        engines = [create_engine(url) for _ in range(6)]
        try:
            results = await asyncio.wait_for(
                asyncio.gather(*(upgrade(engine) for engine in engines)), timeout=60
            )
            assert sum(before is None for before, _ in results) == 1
        finally:
            for engine in engines:
                await engine.dispose()


async def test_0005_gives_existing_rows_their_step_and_follow_up(empty_url: str) -> None:
    """A database upgraded from 0004 with requests already in it: a live request with a step
    can be replaced by a newer one, and an outcome_unknown record names its follow-up."""
    engine = create_engine(empty_url)
    at = datetime(2026, 11, 1, tzinfo=UTC)
    columns = (
        "id, tenant, run_id, step, kind, capability, tool_name, tool_args, presentation, "
        "hash, assignee, approvers, state, created_at, expires_at"
    )
    row = (
        ":id, 'acme', 'run-1', :step, 'tool_call', 'payments.refund', 't', '{}', "
        "'{\"title\": \"x\"}', :hash, 'alice', '[\"alice\"]', :state, :at, :at"
    )
    try:

        def to_0004(connection: Connection) -> None:
            cfg = alembic_config()
            cfg.attributes["connection"] = connection
            command.upgrade(cfg, "0004")

        async with engine.begin() as conn:
            await conn.run_sync(to_0004)
            for approval_id, step, state in (
                ("a1", '{"node": "refund", "n": 1}', "approved"),
                ("a2", None, "pending"),
                ("a3", '{"node": "x"}', "outcome_unknown"),
            ):
                await conn.execute(
                    text(f"INSERT INTO approvals ({columns}) VALUES ({row})"),
                    {
                        "id": approval_id,
                        "step": step,
                        "hash": approval_id * 20,
                        "state": state,
                        "at": at,
                    },
                )
            await conn.execute(
                text(
                    "INSERT INTO approval_events (approval_id, seq, type, actor, at, data, "
                    "prev_hash, hash) VALUES ('a3', 1, 'lease_lapsed', 'system', :at, :d, :h, :h)"
                ),
                {"at": at, "d": json.dumps({"follow_up_id": "f3"}), "h": "0" * 64},
            )
        assert await upgrade(engine) == ("0004", head_revision())
        async with engine.connect() as conn:
            found = {
                r[0]: (r[1], r[2])
                for r in await conn.execute(
                    text("SELECT id, step_key, follow_up_id FROM approvals ORDER BY id")
                )
            }
        assert found == {
            "a1": (step_key({"n": 1, "node": "refund"}), None),
            "a2": (None, None),
            "a3": (None, "f3"),  # not live: it can no longer be replaced
        }
    finally:
        await engine.dispose()


async def test_0011_gives_earlier_votes_the_surface_their_events_name(empty_url: str) -> None:
    """Votes cast before 0011 stored no surface: the audit event recorded with each says it,
    and a vote no event names keeps none."""
    engine = create_engine(empty_url)
    at = datetime(2026, 11, 1, tzinfo=UTC)
    later = datetime(2026, 11, 1, 0, 5, tzinfo=UTC)
    columns = (
        "id, tenant, run_id, kind, capability, tool_name, tool_args, presentation, "
        "hash, assignee, approvers, required_approvals, state, created_at, expires_at"
    )
    row = (
        "'q1', 'acme', 'run-1', 'tool_call', 'quorum.move', 't', '{}', '{\"title\": \"x\"}', "
        "'ab', 'alice', '[\"alice\", \"bob\", \"carol\"]', 2, 'approved', :at, :at"
    )
    try:

        def to_0010(connection: Connection) -> None:
            cfg = alembic_config()
            cfg.attributes["connection"] = connection
            command.upgrade(cfg, "0010")

        async with engine.begin() as conn:
            await conn.run_sync(to_0010)
            await conn.execute(
                text(f"INSERT INTO approvals ({columns}) VALUES ({row})"), {"at": at}
            )
            for seq, (kind, actor, when) in enumerate(
                (("voted", "web:alice", at), ("approved", "slack:bob", later)), start=1
            ):
                await conn.execute(
                    text(
                        "INSERT INTO approval_events (approval_id, seq, type, actor, at, data, "
                        "prev_hash, hash) VALUES ('q1', :seq, :type, :actor, :at, '{}', :h, :h)"
                    ),
                    {"seq": seq, "type": kind, "actor": actor, "at": when, "h": "0" * 64},
                )
            for principal, when in (("alice", at), ("bob", later), ("carol", later)):
                await conn.execute(
                    text(
                        "INSERT INTO votes (approval_id, principal, decision, at) "
                        "VALUES ('q1', :principal, 'approve', :at)"
                    ),
                    {"principal": principal, "at": when},
                )
        assert await upgrade(engine) == ("0010", head_revision())
        async with engine.connect() as conn:
            found = {
                principal: via
                for principal, via in await conn.execute(text("SELECT principal, via FROM votes"))
            }
        assert found == {"alice": "web", "bob": "slack", "carol": None}
    finally:
        await engine.dispose()


async def test_0012_down_and_up_again_keeps_requests_readable_and_verified(
    empty_url: str,
) -> None:
    """A request stored before 0012 reads back after it as what it was (a tool call, not
    edited, unanswered), its hash and audit chain intact: made at the head, taken down to
    0011 (which drops the new columns) and up again."""
    from bot import audit
    from bot.clock import FakeClock
    from bot.config import parse_config
    from bot.intake import create_request
    from bot.model import public_record
    from store.repository import Store
    from tests.support.samples import TEST_CONFIG, make_request

    engine = create_engine(empty_url)
    await upgrade(engine)
    store = Store.from_url(empty_url)
    try:
        directory = parse_config(TEST_CONFIG).directory()
        created = await create_request(store, directory, FakeClock(), "acme", make_request())

        def to_0011(connection: Connection) -> None:
            cfg = alembic_config()
            cfg.attributes["connection"] = connection
            command.downgrade(cfg, "0011")

        async with engine.begin() as conn:
            await conn.run_sync(to_0011)
        assert await upgrade(engine) == ("0011", head_revision())
        async with store.read() as tx:
            row = await tx.get_approval(created.approval.id)
        assert row is not None
        record = public_record(row)
        assert record["kind"] == "tool_call" and record["tool"] is not None
        assert record["edited"] is False and record["answer"] is None
        assert record["hash"] == created.approval.hash
        assert (await audit.verify(store, row.id)).ok
    finally:
        await store.close()
        await engine.dispose()
