"""Shared fixtures: real databases (a SQLite file and a PostgreSQL database per test), a
FakeClock, a directory built from a test config.

PostgreSQL comes from $SIGNOFF_TEST_POSTGRES_URL (a URL to a maintenance database, e.g.
postgresql://postgres@127.0.0.1:5432/postgres), else a server answering on 127.0.0.1:5432.
Without one the PostgreSQL cases skip, saying so, except under CI=true where they fail.
A migrated template database is built once per session and cloned per test
(CREATE DATABASE ... TEMPLATE), which is fast and keeps tests isolated.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import hmac
import os
import shutil
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from bot.clock import FakeClock
from bot.config import parse_config
from bot.intake import ParsedRequest, validate_request
from bot.operator import Operator
from bot.routing import Directory
from store.engine import create_engine, normalize_url
from store.migrate import upgrade
from store.records import Approval
from store.repository import Store

POSTGRES_ENV = "SIGNOFF_TEST_POSTGRES_URL"
LOCAL_POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"

TEST_CONFIG: dict[str, Any] = {
    "tenants": [
        {"name": "acme", "webhook_url": "http://127.0.0.1:9/hooks"},
        {"name": "globex"},
    ],
    "principals": {
        "alice": {"name": "Alice Ng", "slack": "U0ALICE", "telegram": 111},
        "bob": {"name": "Bob Stone", "slack": "U0BOB", "telegram": 222},
        "carol": {"name": "Carol Diaz"},
        "dave": {"name": "Dave Roe"},
        "sam": {"name": "Sam Requester"},
    },
    "groups": {"finance": {"members": ["alice", "bob", "sam"]}},
    "routes": [
        {
            "tenant": "acme",
            "capability": "payments.*",
            "approvers": ["group:finance"],
            "escalation": [{"after": "24h", "to": "carol"}],
        },
        {
            "tenant": "acme",
            "capability": "contracts.*",
            "approvers": ["alice", "sam"],
            "allow_self_approval": True,
        },
        {
            "tenant": "acme",
            "capability": "quorum.*",
            "approvers": ["alice", "bob", "carol"],
            "required_approvals": 2,
        },
        {"tenant": "globex", "capability": "*", "approvers": ["dave"]},
    ],
}


def _postgres_admin_url() -> str | None:
    url = os.environ.get(POSTGRES_ENV)
    if url:
        return url
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=0.5):
            return LOCAL_POSTGRES
    except OSError:
        return None


def _asyncpg_dsn(url: str) -> str:
    return make_url(normalize_url(url)).set(drivername="postgresql").render_as_string(False)


def _with_database(url: str, name: str) -> str:
    return make_url(normalize_url(url)).set(database=name).render_as_string(False)


async def _admin(url: str, *statements: str) -> None:
    conn = await asyncpg.connect(_asyncpg_dsn(url))
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


async def _migrate(url: str) -> None:
    engine = create_engine(url)
    try:
        await upgrade(engine)
    finally:
        await engine.dispose()


@pytest.fixture(scope="session")
def pg_admin_url() -> Iterator[str]:
    """URL of a PostgreSQL maintenance database where tests may create databases."""
    url = _postgres_admin_url()
    if url is None:
        message = f"PostgreSQL not reachable: set {POSTGRES_ENV} or start it on 127.0.0.1:5432"
        if os.environ.get("CI") == "true":
            pytest.fail(message + " (CI=true: PostgreSQL tests must not skip)")
        pytest.skip(message)
    try:
        asyncio.run(_admin(url, "SELECT 1"))
    except (OSError, asyncpg.PostgresError) as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"cannot connect to PostgreSQL at {url}: {exc}")
        pytest.skip(f"cannot connect to PostgreSQL at {url}: {exc}")
    yield url


@pytest.fixture(scope="session")
def pg_template(pg_admin_url: str) -> Iterator[str]:
    """Name of a migrated template database, built once per session."""
    name = f"signoff_tmpl_{os.getpid()}"
    asyncio.run(_admin(pg_admin_url, f"DROP DATABASE IF EXISTS {name}", f"CREATE DATABASE {name}"))
    asyncio.run(_migrate(_with_database(pg_admin_url, name)))
    yield name
    asyncio.run(_admin(pg_admin_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


@pytest.fixture
def pg_empty_url(pg_admin_url: str) -> Iterator[str]:
    """A brand-new, empty PostgreSQL database for this test."""
    name = f"signoff_t_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(pg_admin_url, f"CREATE DATABASE {name}"))
    yield normalize_url(_with_database(pg_admin_url, name))
    asyncio.run(_admin(pg_admin_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "signoff.db"
    asyncio.run(_migrate(f"sqlite+aiosqlite:///{path}"))
    return path


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated, empty database of each kind; the same test runs on both."""
    if request.param == "sqlite":
        path = tmp_path / "signoff.db"
        shutil.copy(request.getfixturevalue("sqlite_template"), path)
        yield f"sqlite+aiosqlite:///{path}"
        return
    admin = request.getfixturevalue("pg_admin_url")
    template = request.getfixturevalue("pg_template")
    name = f"signoff_t_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(admin, f"CREATE DATABASE {name} TEMPLATE {template}"))
    yield normalize_url(_with_database(admin, name))
    asyncio.run(_admin(admin, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    # Room for every concurrent task in the race tests to hold its own connection.
    store = Store.from_url(db_url, pool_size=60, max_overflow=10)
    yield store
    await store.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def directory() -> Directory:
    return parse_config(TEST_CONFIG).directory()


@pytest.fixture
def operator(store: Store, directory: Directory, clock: FakeClock) -> Operator:
    return Operator(store, directory, clock)


async def tamper(store: Store, sql: str, **params: Any) -> None:
    """Change the database behind signoff's back with plain SQL, as an intruder or a careless
    operator with database access would."""
    async with store.engine.begin() as conn:
        await conn.execute(text(sql), params)


def standard_webhook_signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """A webhook signature as the Standard Webhooks specification words it, with no library:
    base64 of HMAC-SHA256, keyed by the base64-decoded part after `whsec_`, over
    "id.timestamp.body"."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def request_body(**overrides: Any) -> dict[str, Any]:
    """A valid create body (as JSON would give it); keyword arguments replace fields."""
    body: dict[str, Any] = {
        "run_id": "run-1",
        "capability": "payments.refund",
        "tool": {"name": "stripe.refunds.create", "arguments": {"charge": "ch_1", "amount": 12000}},
        "presentation": {
            "title": "Refund €120.00 to Zoë",
            "fields": [{"label": "Amount", "value": "€120.00"}],
        },
        "reason": "refunds over €100 need approval",
        "requested_by": "sam",
    }
    body.update(overrides)
    return {k: v for k, v in body.items() if v is not None}


def make_request(**overrides: Any) -> ParsedRequest:
    return validate_request(request_body(**overrides))


RECORD_NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
RECORD_HASH = "3f" * 32


def approval_record(**changes: Any) -> Approval:
    """A stored approval as the repository returns it, without a database: a pending
    payments.refund request by sam, assigned to group:finance, made at RECORD_NOW."""
    base = Approval(
        id="0b7d1c4e-8a59-4c35-9d0e-3f1a2b3c4d5e",
        tenant="acme",
        run_id="run-1",
        step={"cursor": 4},
        kind="tool_call",
        capability="payments.refund",
        tool_name="stripe.refunds.create",
        tool_args={"charge": "ch_1", "amount": 12000},
        presentation={
            "title": "Refund €120.00 to Zoë",
            "summary": "Customer asked twice.",
            "fields": [{"label": "Amount", "value": "€120.00"}],
        },
        reason="refunds over €100 need approval",
        hash=RECORD_HASH,
        requested_by="sam",
        assignee="group:finance",
        approvers=["group:finance"],
        required_approvals=1,
        allow_self_approval=False,
        state="pending",
        preconditions={"balance_at_least": 12000},
        resume={"thread": "t-1"},
        callback_url=None,
        created_at=RECORD_NOW,
        expires_at=RECORD_NOW + timedelta(hours=72),
        escalate_at=RECORD_NOW + timedelta(hours=24),
        escalation_level=0,
        assigned_note=None,
        grant_ttl_s=86400,
        decided_by=None,
        decided_at=None,
        decision_note=None,
        grant_expires_at=None,
        claim_token=None,
        claimed_at=None,
        lease_until=None,
        executed_at=None,
        outcome=None,
        origin_id=None,
        version=1,
        audit_seq=1,
        audit_head="0" * 64,
    )
    return dataclasses.replace(base, **changes)
