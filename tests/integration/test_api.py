"""The agent-facing HTTP API over real HTTP, on real SQLite and PostgreSQL.

The real application (`build_app`, no background tasks, a FakeClock) is served on a loopback
port and driven with an aiohttp client. What these tests prove:

- bad input of every kind (malformed, ambiguous or uncanonicalisable JSON, wrong types,
  unknown or missing fields, oversized bodies sent with Content-Length or chunked, missing or
  wrong keys, unroutable requests, wrong methods and paths) gets its 4xx and stable error code
  in the `{"error": {"code", "message"}}` shape, writes nothing, and leaves the server serving;
- create is idempotent on (tenant, run_id, call); get and list return the truthful record
  (`state`, `execution`, `hash`); list filters and cursor pagination visit every row once;
- one tenant's key cannot see or touch another tenant's approvals: 404, indistinguishable
  from an id that does not exist;
- claim and complete follow the state machine: one winner (also under 20 concurrent HTTP
  claims), leases from config or body, stable idempotency keys, claim tokens checked,
  completion retries answered with the recorded outcome;
- grant and approval TTLs are judged on the injected clock (410 `expired`);
- supersede and cancel withdraw only what has not started;
- /metrics, /readyz and /healthz report the database's real state;
- odd ids and NUL-bearing query values get the same answer on both databases.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bot.app import build_app
from bot.clock import utc_iso
from bot.config import parse_config
from bot.errors import ConfigError
from store.migrate import head_revision
from store.repository import Store
from tests.support.api_server import (
    ACME_KEY,
    GLOBEX_KEY,
    NO_BODY,
    Api,
    Reply,
    Serve,
    listing,
)
from tests.support.samples import TEST_CONFIG, request_body, tamper

MAX_BODY = 256 * 1024  # server.max_body_bytes default
HEX64 = re.compile(r"^[0-9a-f]{64}$")


def assert_error(reply: Reply, status: int, code: str) -> dict[str, Any]:
    """The reply is the API's error shape with this status and code; returns the error."""
    assert reply.status == status, reply.body
    assert reply.headers["Content-Type"].startswith("application/json"), reply.headers
    assert isinstance(reply.body, dict) and set(reply.body) == {"error"}, reply.body
    error = reply.body["error"]
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"].strip(), error
    return error


# For a refusal made before any database is opened (routing, a query's syntax): the database
# cannot change its answer, so it runs once.
SQLITE_ONLY = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


def error_fields(error: dict[str, Any]) -> list[str]:
    return [f["field"] for f in error.get("fields", [])]


# -- 1. bad input ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Bad:
    """One bad request: what to send, and the status, code and field it must get."""

    name: str
    status: int
    code: str
    field: str | None = None
    path: str = "/v1/approvals"  # "{id}" is an approved approval of acme
    body: Any = NO_BODY
    raw: bytes | None = None
    key: str | None = ACME_KEY
    headers: dict[str, str] | None = None
    chunked: bool = False


def _raw(**overrides: Any) -> str:
    return json.dumps(request_body(**overrides))


def _with_number(literal: str) -> bytes:
    """A valid create body whose tool arguments hold `literal` verbatim (json.dumps cannot
    write 1e400 or NaN itself)."""
    text = _raw(tool={"name": "stripe.refunds.create", "arguments": {"amount": 424242}})
    return text.replace("424242", literal).encode()


def _without(name: str) -> dict[str, Any]:
    body = request_body()
    del body[name]
    return body


_OVERSIZED = b'{"pad": "' + b"x" * (MAX_BODY + 10) + b'"}'
_NESTED = b"[" * 100_000 + b"]" * 100_000
_CLAIM = "/v1/approvals/{id}/claim"
_COMPLETE = "/v1/approvals/{id}/complete"

BAD_INPUTS = [
    Bad("malformed json", 400, "malformed_json", raw=b'{"run_id": "r-1",'),
    Bad("empty body", 400, "malformed_json", raw=b""),
    Bad("duplicate key", 400, "malformed_json", raw=b'{"run_id": "a", "run_id": "b"}'),
    Bad(
        "duplicate nested key",
        400,
        "malformed_json",
        raw=_raw().replace('"charge": "ch_1"', '"charge": "ch_1", "charge": "ch_2"').encode(),
    ),
    Bad("invalid utf-8", 400, "malformed_json", raw=b'{"run_id": "\xff\xfe"}'),
    Bad("100k nesting", 400, "malformed_json", raw=_NESTED),
    Bad("json array", 422, "invalid_request", "(body)", body=[request_body()]),
    Bad("json string", 422, "invalid_request", "(body)", body="approve me"),
    Bad("run_id not a string", 422, "invalid_request", "run_id", body=request_body(run_id=7)),
    Bad(
        "required_approvals as text",
        422,
        "invalid_request",
        "required_approvals",
        body=request_body(required_approvals="2"),
    ),
    Bad(
        "arguments a list",
        422,
        "invalid_request",
        "tool.arguments",
        body=request_body(tool={"name": "t", "arguments": [1, 2]}),
    ),
    Bad(
        "presentation a string",
        422,
        "invalid_request",
        "presentation",
        body=request_body(presentation="Refund"),
    ),
    Bad("missing run_id", 422, "invalid_request", "run_id", body=_without("run_id")),
    Bad("missing tool", 422, "invalid_request", "tool", body=_without("tool")),
    Bad("unknown field", 422, "invalid_request", "priority", body=request_body(priority="high")),
    Bad(
        "unknown nested field",
        422,
        "invalid_request",
        "tool.timeout",
        body=request_body(tool={"name": "t", "arguments": {}, "timeout": 5}),
    ),
    Bad(
        "agent asks for interrupted_side_effect",
        422,
        "invalid_request",
        "kind",
        body=request_body(kind="interrupted_side_effect"),
    ),
    Bad(
        "bad capability",
        422,
        "invalid_request",
        "capability",
        body=request_body(capability="payments..refund"),
    ),
    Bad("NUL in run_id", 422, "invalid_request", "run_id", body=request_body(run_id="r\x00")),
    Bad(
        "callback_url not http",
        422,
        "invalid_request",
        "callback_url",
        body=request_body(callback_url="ftp://hooks.example/x"),
    ),
    # urlsplit raises on these: found by schemathesis as a 500.
    Bad(
        "callback_url with an unbalanced bracket",
        422,
        "invalid_request",
        "callback_url",
        body=request_body(callback_url="http://[::1"),
    ),
    Bad(
        "callback_url with a port past 65535",
        422,
        "invalid_request",
        "callback_url",
        body=request_body(callback_url="https://agents.example:99999/hook"),
    ),
    Bad(
        "approval_ttl 3 fortnights",
        422,
        "invalid_request",
        "approval_ttl",
        body=request_body(approval_ttl="3 fortnights"),
    ),
    Bad(
        "approval_ttl beyond the route",
        422,
        "invalid_request",
        "approval_ttl",
        body=request_body(approval_ttl="73h"),
    ),
    Bad("grant_ttl zero", 422, "invalid_request", "grant_ttl", body=request_body(grant_ttl="0h")),
    Bad(
        "required_approvals beyond approvers",
        422,
        "invalid_request",
        "required_approvals",
        body=request_body(required_approvals=4),
    ),
    Bad("1e400 in arguments", 422, "not_canonical", raw=_with_number("1e400")),
    Bad("2**60 in arguments", 422, "not_canonical", raw=_with_number(str(2**60))),
    Bad("-2**53 in arguments", 422, "not_canonical", raw=_with_number(str(-(2**53)))),
    Bad("NaN literal", 422, "not_canonical", raw=_with_number("NaN")),
    Bad("-Infinity literal", 422, "not_canonical", raw=_with_number("-Infinity")),
    Bad(
        "65 levels deep in arguments",
        422,
        "not_canonical",
        body=request_body(tool={"name": "t", "arguments": {"a": json.loads("[" * 64 + "]" * 64)}}),
    ),
    Bad(
        "capability matching no route",
        422,
        "no_route",
        body=request_body(capability="hr.terminate"),
    ),
    Bad(
        "approvers outside the route",
        422,
        "approvers_outside_route",
        body=request_body(approvers=["dave"]),
    ),
    Bad("oversized, Content-Length", 413, "too_large", raw=_OVERSIZED),
    Bad("oversized, chunked", 413, "too_large", raw=_OVERSIZED, chunked=True),
    Bad("no Authorization", 401, "unauthorized", body=request_body(), key=None),
    Bad("wrong key", 401, "unauthorized", body=request_body(), key="acme-test-key-9f2c4"),
    Bad(
        "Basic scheme",
        401,
        "unauthorized",
        body=request_body(),
        key=None,
        headers={"Authorization": f"Basic {ACME_KEY}"},
    ),
    Bad(
        "empty bearer",
        401,
        "unauthorized",
        body=request_body(),
        key=None,
        headers={"Authorization": "Bearer "},
    ),
    Bad(
        "claim lease 3 fortnights",
        422,
        "invalid_request",
        "lease",
        _CLAIM,
        body={"lease": "3 fortnights"},
    ),
    Bad("claim lease over 24h", 422, "invalid_request", "lease", _CLAIM, body={"lease": "25h"}),
    Bad("claim unknown field", 422, "invalid_request", "force", _CLAIM, body={"force": True}),
    Bad("claim without key", 401, "unauthorized", path=_CLAIM, body={}, key=None),
    Bad(
        "complete bad outcome",
        422,
        "invalid_request",
        "outcome",
        _COMPLETE,
        body={"claim_token": "t", "outcome": "maybe"},
    ),
    Bad(
        "complete without token",
        422,
        "invalid_request",
        "claim_token",
        _COMPLETE,
        body={"outcome": "succeeded"},
    ),
    Bad(
        "supersede empty reason",
        422,
        "invalid_request",
        "reason",
        "/v1/approvals/{id}/supersede",
        body={"reason": ""},
    ),
    Bad(
        "cancel body an array",
        422,
        "invalid_request",
        "(body)",
        "/v1/approvals/{id}/cancel",
        body=[],
    ),
]


def _databases(bad: Bad) -> list[str]:
    """A create's input is judged before any database is opened, so the database cannot change
    its answer: once, on SQLite. What names an approval is looked up first: on both."""
    return ["sqlite"] if bad.path == "/v1/approvals" else ["sqlite", "postgresql"]


@pytest.mark.parametrize(
    ("bad", "db_url"),
    [pytest.param(b, db, id=f"{db}-{b.name}") for b in BAD_INPUTS for db in _databases(b)],
    indirect=["db_url"],
)
async def test_bad_input_is_refused_with_its_code_and_writes_nothing(api: Api, bad: Bad) -> None:
    target = await api.approved(run_id="run-standing")
    before = await api.snapshot()

    data: Any = bad.raw
    if bad.chunked:
        payload = bad.raw or b""

        async def chunks() -> AsyncIterator[bytes]:
            for start in range(0, len(payload), 16 * 1024):
                yield payload[start : start + 16 * 1024]

        data = chunks()
    headers = {"Content-Type": "application/json", **(bad.headers or {})}
    reply = await api.call(
        "POST", bad.path.format(id=target["id"]), bad.body, key=bad.key, data=data, headers=headers
    )

    error = assert_error(reply, bad.status, bad.code)
    if bad.field is not None:
        assert bad.field in error_fields(error), error
        assert bad.field in error["message"], error
    if bad.status == 413:
        # The message names the configured limit, not an internal one.
        assert str(MAX_BODY) in error["message"], error
    if bad.status == 401:
        assert ACME_KEY not in json.dumps(reply.body)
    assert await api.snapshot() == before
    health = await api.call("GET", "/healthz", key=None)
    assert (health.status, health.body) == (200, {"status": "ok"})


async def test_body_of_exactly_the_limit_is_accepted_and_one_byte_more_is_not(api: Api) -> None:
    body = request_body(step={"pad": ""})
    size = len(json.dumps(body).encode())
    body["step"]["pad"] = "x" * (MAX_BODY - size)
    exact = json.dumps(body).encode()
    assert len(exact) == MAX_BODY

    reply = await api.call("POST", "/v1/approvals", data=exact)
    assert reply.status == 201, reply.body

    body["step"]["pad"] += "y"
    body["run_id"] = "run-2"
    over = await api.call("POST", "/v1/approvals", data=json.dumps(body).encode())
    error = assert_error(over, 413, "too_large")
    assert str(MAX_BODY) in error["message"]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("DELETE", "/v1/approvals/{id}"),
        ("PUT", "/v1/approvals"),
        ("GET", "/v1/approvals/{id}/claim"),
        ("PATCH", "/v1/approvals/{id}/complete"),
    ],
)
@SQLITE_ONLY
async def test_wrong_method_is_405_in_the_error_shape(api: Api, method: str, path: str) -> None:
    record = await api.create()
    before = await api.snapshot()
    reply = await api.call(method, path.format(id=record["id"]))
    error = assert_error(reply, 405, "method_not_allowed")
    assert method in error["message"]
    assert "Allow" in reply.headers
    assert await api.snapshot() == before


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v2/approvals"),
        ("POST", "/v1/approvals/some-id/approve"),
        ("GET", "/nothing-here"),  # `/` itself names the API and health paths (docs/web.md)
        ("GET", "/v1/approvals/a/b/c"),
    ],
)
@SQLITE_ONLY
async def test_unknown_path_is_404_in_the_error_shape(api: Api, method: str, path: str) -> None:
    reply = await api.call(method, path, key=None)
    error = assert_error(reply, 404, "not_found")
    assert path in error["message"]


# -- 2. create, get, list --------------------------------------------------------------------


async def test_create_is_idempotent_per_run_and_call(api: Api) -> None:
    first = await api.call("POST", "/v1/approvals", request_body())
    assert first.status == 201, first.body
    record = first.body
    assert HEX64.match(record["hash"])
    assert (record["state"], record["execution"], record["tenant"]) == (
        "pending",
        "not_started",
        "acme",
    )

    again = await api.call("POST", "/v1/approvals", request_body())
    assert again.status == 200, again.body
    assert again.body == record

    # The same call with its argument keys in another order is the same call (canonical JSON).
    reordered = request_body(
        tool={"name": "stripe.refunds.create", "arguments": {"amount": 12000, "charge": "ch_1"}}
    )
    same = await api.call("POST", "/v1/approvals", reordered)
    assert (same.status, same.body["id"]) == (200, record["id"])

    other_run = await api.call("POST", "/v1/approvals", request_body(run_id="run-2"))
    assert other_run.status == 201
    assert other_run.body["id"] != record["id"]
    assert other_run.body["hash"] == record["hash"]

    other_call = await api.call(
        "POST",
        "/v1/approvals",
        request_body(tool={"name": "stripe.refunds.create", "arguments": {"charge": "ch_2"}}),
    )
    assert other_call.status == 201
    assert other_call.body["hash"] != record["hash"]

    # Asking again after a decision returns the decided record, not a new request.
    await api.approve(record)
    after = await api.call("POST", "/v1/approvals", request_body())
    assert (after.status, after.body["id"], after.body["state"]) == (200, record["id"], "approved")
    rows, _ = await api.snapshot()
    assert len(rows) == 3


async def test_get_returns_the_truthful_record(api: Api) -> None:
    sent = request_body(
        step={"cursor": 4},
        resume={"thread": "t-1"},
        preconditions={"balance_at_least": 12000},
        approval_ttl="2h",
    )
    created = await api.call("POST", "/v1/approvals", sent)
    assert created.status == 201
    record = await api.get(created.body["id"])
    assert record == created.body
    assert record["state"] == "pending"
    assert record["execution"] == "not_started"
    assert record["tool"] == sent["tool"]
    assert record["presentation"] == sent["presentation"]
    assert (record["step"], record["resume"], record["preconditions"]) == (
        {"cursor": 4},
        {"thread": "t-1"},
        {"balance_at_least": 12000},
    )
    assert record["created_at"] == utc_iso(api.clock.now())
    assert record["expires_at"] == utc_iso(api.clock.now() + timedelta(hours=2))
    assert record["assignee"] == "group:finance"
    assert record["decided_by"] is None

    api.clock.advance(minutes=5)
    await api.approve(record)
    decided = await api.get(record["id"])
    assert (decided["state"], decided["execution"], decided["hash"]) == (
        "approved",
        "not_started",
        record["hash"],
    )
    assert decided["decided_by"] == "alice"
    assert decided["decided_at"] == utc_iso(api.clock.now())
    assert decided["grant_expires_at"] == utc_iso(api.clock.now() + timedelta(hours=24))

    missing = await api.call("GET", f"/v1/approvals/{uuid.uuid4()}")
    assert_error(missing, 404, "not_found")


async def test_list_filters_by_state_run_capability_and_assignee(api: Api) -> None:
    refund = await api.create(run_id="run-a")
    api.clock.advance(seconds=1)
    refund_b = await api.create(run_id="run-b")
    api.clock.advance(seconds=1)
    contract = await api.create(
        run_id="run-a",
        capability="contracts.cancel",
        tool={"name": "crm.contracts.cancel", "arguments": {"id": "c-9"}},
    )
    api.clock.advance(seconds=1)
    globex = await api.create(key=GLOBEX_KEY, run_id="run-a", capability="ops.restart")
    await api.approve(refund_b)

    def ids(page: dict[str, Any]) -> list[str]:
        return [a["id"] for a in page["approvals"]]

    assert ids(await listing(api)) == [contract["id"], refund_b["id"], refund["id"]]
    assert ids(await listing(api, "?state=pending")) == [contract["id"], refund["id"]]
    assert ids(await listing(api, "?state=approved")) == [refund_b["id"]]
    assert ids(await listing(api, "?state=executed")) == []
    assert ids(await listing(api, "?run_id=run-a")) == [contract["id"], refund["id"]]
    assert ids(await listing(api, "?capability=payments.refund")) == [refund_b["id"], refund["id"]]
    assert ids(await listing(api, "?assignee=alice")) == [contract["id"]]
    assert ids(await listing(api, "?assignee=group%3Afinance&state=pending")) == [refund["id"]]
    assert ids(await listing(api, "?run_id=run-a", key=GLOBEX_KEY)) == [globex["id"]]
    page = await listing(api, "?state=approved")
    assert page["approvals"][0]["execution"] == "not_started"
    assert page["approvals"][0]["hash"] == refund_b["hash"]


async def test_cursor_pagination_returns_every_approval_once_newest_first(api: Api) -> None:
    created = []
    for i in range(7):
        record = await api.create(run_id=f"run-{i}")
        created.append(record)
        if i % 2:  # pairs share a created_at, so the id breaks the tie
            api.clock.advance(seconds=1, microseconds=250)
    expected = [
        r["id"] for r in sorted(created, key=lambda r: (r["created_at"], r["id"]), reverse=True)
    ]

    seen: list[str] = []
    pages = 0
    query = "?limit=3"
    while True:
        page = await listing(api, query)
        pages += 1
        assert len(page["approvals"]) <= 3
        seen += [a["id"] for a in page["approvals"]]
        if page["next_cursor"] is None:
            break
        query = f"?limit=3&cursor={page['next_cursor']}"
        assert pages < 10
    assert pages == 3
    assert seen == expected
    assert len(set(seen)) == 7

    # A full last page says there is no more only if there truly is none.
    exact = await listing(api, "?limit=7")
    assert [a["id"] for a in exact["approvals"]] == expected
    assert exact["next_cursor"] is None


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("?cursor=not-a-cursor", "cursor"),
        ("?cursor=WyIyMDI2LTAxLTA1IiwgIngiXQ", "cursor"),  # ["2026-01-05", "x"]
        ("?cursor=bnVsbA", "cursor"),  # null
        ("?limit=0", "limit"),
        ("?limit=10000", "limit"),
        ("?limit=three", "limit"),
        ("?state=waiting", "state"),
        ("?tenant=globex", "tenant"),
        ("?sort=asc", "sort"),
    ],
)
@SQLITE_ONLY
async def test_list_refuses_bad_query_parameters(api: Api, query: str, field: str) -> None:
    await api.create()
    reply = await api.call("GET", f"/v1/approvals{query}")
    error = assert_error(reply, 422, "invalid_request")
    assert field in error_fields(error), error


# -- 3. tenant isolation ---------------------------------------------------------------------


_ACTIONS: list[tuple[str, str, Any]] = [
    ("GET", "", NO_BODY),
    ("POST", "/claim", {}),
    ("POST", "/complete", {"claim_token": "x", "outcome": "succeeded"}),
    ("POST", "/supersede", {"reason": "stale"}),
    ("POST", "/cancel", {}),
]


@pytest.mark.parametrize(
    ("method", "suffix", "body"), _ACTIONS, ids=[a[1] or "get" for a in _ACTIONS]
)
@pytest.mark.parametrize("acme_state", ["pending", "approved"])
async def test_another_tenants_approval_is_not_found(
    api: Api, method: str, suffix: str, body: Any, acme_state: str
) -> None:
    record = await api.create()
    if acme_state == "approved":
        await api.approve(record)
    before = await api.snapshot()

    theirs = await api.call(method, f"/v1/approvals/{record['id']}{suffix}", body, key=GLOBEX_KEY)
    nobody = str(uuid.uuid4())
    missing = await api.call(method, f"/v1/approvals/{nobody}{suffix}", body, key=GLOBEX_KEY)

    error = assert_error(theirs, 404, "not_found")
    assert_error(missing, 404, "not_found")
    # Indistinguishable: the same body but for the id it echoes.
    assert json.loads(json.dumps(theirs.body).replace(record["id"], nobody)) == missing.body
    assert "acme" not in json.dumps(error)
    assert await api.snapshot() == before
    assert (await api.get(record["id"]))["state"] == acme_state

    listed = await listing(api, "?limit=500", key=GLOBEX_KEY)
    assert record["id"] not in [a["id"] for a in listed["approvals"]]
    by_run = await listing(api, f"?run_id={record['run_id']}", key=GLOBEX_KEY)
    assert by_run["approvals"] == []


async def test_same_run_and_call_in_two_tenants_are_two_approvals(api: Api) -> None:
    body = request_body(capability="payments.refund")
    acme = await api.call("POST", "/v1/approvals", body)
    globex = await api.call("POST", "/v1/approvals", body, key=GLOBEX_KEY)
    assert (acme.status, globex.status) == (201, 201)
    assert acme.body["id"] != globex.body["id"]
    assert (acme.body["tenant"], globex.body["tenant"]) == ("acme", "globex")


# -- 4. claim and complete -------------------------------------------------------------------


async def test_claim_hands_over_the_stored_call_with_a_lease(api: Api) -> None:
    record = await api.approved(
        step={"cursor": 4}, resume={"thread": "t-1"}, preconditions={"balance_at_least": 12000}
    )
    api.clock.advance(minutes=3)
    claimed = await api.claim(record["id"])
    assert claimed.status == 200, claimed.body
    c = claimed.body
    assert c["tool"] == {
        "name": "stripe.refunds.create",
        "arguments": {"charge": "ch_1", "amount": 12000},
    }
    assert (c["step"], c["resume"], c["preconditions"]) == (
        {"cursor": 4},
        {"thread": "t-1"},
        {"balance_at_least": 12000},
    )
    assert c["lease_until"] == utc_iso(api.clock.now() + timedelta(minutes=10))
    assert HEX64.match(c["idempotency_key"])
    # Stable: a function of this exact approved call, the same on every claim of it.
    expected_key = hashlib.sha256(f"{record['id']}:{record['hash']}".encode()).hexdigest()
    assert c["idempotency_key"] == expected_key
    assert isinstance(c["claim_token"], str) and len(c["claim_token"]) >= 16
    assert c["claim_token"] not in json.dumps(c["approval"])
    assert (c["approval"]["state"], c["approval"]["execution"]) == ("executing", "started")
    assert c["approval"]["claimed_at"] == utc_iso(api.clock.now())
    assert c["approval"]["lease_until"] == c["lease_until"]

    stored = await api.get(record["id"])
    assert (stored["state"], stored["execution"]) == ("executing", "started")
    assert c["claim_token"] not in json.dumps(stored)

    again = await api.claim(record["id"])
    error = assert_error(again, 409, "not_pending")
    assert error["state"] == "executing"

    other = await api.approved(run_id="run-2")
    other_claim = await api.claim(other["id"])
    assert other_claim.body["idempotency_key"] != c["idempotency_key"]
    assert other_claim.body["claim_token"] != c["claim_token"]


async def test_claim_lease_from_the_body_and_from_config(serve: Serve) -> None:
    api = await serve(claim_lease="7m")
    record = await api.approved()
    claimed = await api.claim(record["id"])
    assert claimed.status == 200, claimed.body
    assert claimed.body["lease_until"] == utc_iso(api.clock.now() + timedelta(minutes=7))

    other = await api.approved(run_id="run-2")
    short = await api.claim(other["id"], {"lease": "2m"})
    assert short.status == 200, short.body
    assert short.body["lease_until"] == utc_iso(api.clock.now() + timedelta(minutes=2))


async def test_claim_of_a_request_that_is_not_approved_is_409(api: Api) -> None:
    record = await api.create()
    reply = await api.claim(record["id"])
    error = assert_error(reply, 409, "not_pending")
    assert error["state"] == "pending"
    assert (await api.get(record["id"]))["state"] == "pending"


async def test_complete_records_the_outcome_once(api: Api) -> None:
    record = await api.approved()
    token = (await api.claim(record["id"])).body["claim_token"]
    path = f"/v1/approvals/{record['id']}/complete"

    wrong = await api.call("POST", path, {"claim_token": token + "x", "outcome": "succeeded"})
    assert_error(wrong, 409, "claim_mismatch")
    assert (await api.get(record["id"]))["state"] == "executing"

    huge = {"claim_token": token, "outcome": "succeeded", "result": {"log": "x" * 17 * 1024}}
    assert_error(await api.call("POST", path, huge), 413, "too_large")
    assert (await api.get(record["id"]))["state"] == "executing"

    api.clock.advance(minutes=1)
    done = {"claim_token": token, "outcome": "succeeded", "result": {"refund": "re_1"}}
    first = await api.call("POST", path, done)
    assert first.status == 200, first.body
    assert (first.body["state"], first.body["execution"]) == ("executed", "finished")
    assert first.body["outcome"] == {"status": "succeeded", "result": {"refund": "re_1"}}
    assert first.body["executed_at"] == utc_iso(api.clock.now())
    _, jobs = await api.snapshot()

    api.clock.advance(minutes=1)
    retry = await api.call("POST", path, done)
    assert (retry.status, retry.body) == (200, first.body)
    assert (await api.snapshot())[1] == jobs  # a retry causes no second webhook

    changed = await api.call("POST", path, {**done, "outcome": "failed"})
    assert_error(changed, 409, "not_pending")
    late_claim = await api.claim(record["id"])
    assert_error(late_claim, 409, "not_pending")
    assert await api.get(record["id"]) == first.body


async def test_complete_with_failed_outcome(api: Api) -> None:
    record = await api.approved()
    token = (await api.claim(record["id"])).body["claim_token"]
    reply = await api.call(
        "POST",
        f"/v1/approvals/{record['id']}/complete",
        {"claim_token": token, "outcome": "failed", "result": {"error": "card_declined"}},
    )
    assert reply.status == 200, reply.body
    assert (reply.body["state"], reply.body["execution"]) == ("failed", "finished")
    assert reply.body["outcome"]["status"] == "failed"


async def test_complete_before_claim_is_409(api: Api) -> None:
    record = await api.approved()
    reply = await api.call(
        "POST",
        f"/v1/approvals/{record['id']}/complete",
        {"claim_token": "guess", "outcome": "succeeded"},
    )
    error = assert_error(reply, 409, "not_pending")
    assert error["state"] == "approved"


# -- 5. grant TTL ----------------------------------------------------------------------------


async def test_claim_after_the_grant_ttl_is_410_expired(api: Api) -> None:
    record = await api.approved()
    api.clock.advance(hours=24, seconds=1)
    reply = await api.claim(record["id"])
    error = assert_error(reply, 410, "expired")
    assert error["state"] == "expired"
    stored = await api.get(record["id"])
    assert (stored["state"], stored["execution"]) == ("expired", "not_started")
    # Expired stays expired.
    assert_error(await api.claim(record["id"]), 410, "expired")


async def test_claim_just_before_the_grant_ttl_succeeds(api: Api) -> None:
    record = await api.approved()
    api.clock.advance(hours=23, minutes=59, seconds=59)
    assert (await api.claim(record["id"])).status == 200


async def test_a_request_may_shorten_its_grant_ttl(api: Api) -> None:
    record = await api.approved(grant_ttl="1h")
    api.clock.advance(hours=1)
    assert_error(await api.claim(record["id"]), 410, "expired")


# -- 6. supersede and cancel -----------------------------------------------------------------


async def test_supersede_pending_records_the_reason(api: Api) -> None:
    record = await api.create()
    reason = "balance fell below 12000 before anyone decided"
    reply = await api.call("POST", f"/v1/approvals/{record['id']}/supersede", {"reason": reason})
    assert reply.status == 200, reply.body
    assert (reply.body["state"], reply.body["execution"]) == ("superseded", "not_started")
    assert reply.body["decision_note"] == reason
    assert await api.get(record["id"]) == reply.body
    assert_error(await api.claim(record["id"]), 409, "not_pending")


async def test_supersede_approved(api: Api) -> None:
    record = await api.approved()
    reply = await api.call("POST", f"/v1/approvals/{record['id']}/supersede", {"reason": "stale"})
    assert (reply.status, reply.body["state"]) == (200, "superseded")


@pytest.mark.parametrize("body", [{}, {"reason": None}, {"note": "x"}])
async def test_supersede_needs_a_reason(api: Api, body: dict[str, Any]) -> None:
    record = await api.create()
    reply = await api.call("POST", f"/v1/approvals/{record['id']}/supersede", body)
    error = assert_error(reply, 422, "invalid_request")
    assert error_fields(error)
    assert (await api.get(record["id"]))["state"] == "pending"


async def test_cancel_approved_and_pending(api: Api) -> None:
    approved = await api.approved()
    reply = await api.call("POST", f"/v1/approvals/{approved['id']}/cancel", {"reason": "done"})
    assert reply.status == 200, reply.body
    assert (reply.body["state"], reply.body["decision_note"]) == ("cancelled", "done")
    assert_error(await api.claim(approved["id"]), 409, "not_pending")

    pending = await api.create(run_id="run-2")
    empty = await api.call("POST", f"/v1/approvals/{pending['id']}/cancel")  # no body at all
    assert (empty.status, empty.body["state"]) == (200, "cancelled")


@pytest.mark.parametrize("finished", [False, True])
@pytest.mark.parametrize("action", ["cancel", "supersede"])
async def test_withdrawing_a_started_call_is_409(api: Api, action: str, finished: bool) -> None:
    record = await api.approved()
    token = (await api.claim(record["id"])).body["claim_token"]
    if finished:
        done = await api.call(
            "POST",
            f"/v1/approvals/{record['id']}/complete",
            {"claim_token": token, "outcome": "succeeded"},
        )
        assert done.status == 200
    state = "executed" if finished else "executing"
    before = await api.snapshot()
    reply = await api.call("POST", f"/v1/approvals/{record['id']}/{action}", {"reason": "r"})
    error = assert_error(reply, 409, "not_pending")
    assert error["state"] == state
    assert await api.snapshot() == before


async def test_cancel_of_an_overdue_pending_request_is_410_expired(api: Api) -> None:
    record = await api.create(approval_ttl="1h")
    api.clock.advance(hours=1, seconds=1)
    reply = await api.call("POST", f"/v1/approvals/{record['id']}/cancel", {})
    error = assert_error(reply, 410, "expired")
    assert error["state"] == "expired"
    stored = await api.get(record["id"])
    assert (stored["state"], stored["execution"]) == ("expired", "not_started")


# -- 7. metrics and readiness ----------------------------------------------------------------


def _samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                found[tuple(sorted(sample.labels.items()))] = sample.value
    return found


async def test_metrics_report_pending_and_outbox_backlog(api: Api) -> None:
    await api.create(run_id="r1")
    await api.create(run_id="r2")
    decided = await api.create(run_id="r3")
    await api.create(
        run_id="r1",
        capability="contracts.cancel",
        tool={"name": "crm.cancel", "arguments": {"id": "c-1"}},
    )
    await api.create(key=GLOBEX_KEY, capability="ops.restart")
    await api.approve(decided)  # acme has a webhook: one queued job

    reply = await api.call("GET", "/metrics", key=None)
    assert reply.status == 200
    assert reply.headers["Content-Type"].startswith("text/plain")
    pending = _samples(reply.body, "signoff_pending_approvals")
    assert pending == {
        (("capability", "payments.refund"), ("tenant", "acme")): 2.0,
        (("capability", "contracts.cancel"), ("tenant", "acme")): 1.0,
        (("capability", "ops.restart"), ("tenant", "globex")): 1.0,
    }
    async with api.store.read() as tx:
        queued = await tx.outbox_jobs(state="queued")
    assert queued
    backlog = _samples(reply.body, "signoff_outbox_backlog")
    assert sum(backlog.values()) == len(queued)
    assert backlog[(("kind", "webhook"),)] == len([j for j in queued if j.kind == "webhook"])


async def test_readyz_names_the_schema_revision(api: Api) -> None:
    reply = await api.call("GET", "/readyz", key=None)
    assert (reply.status, reply.body) == (200, {"status": "ready", "schema": head_revision()})
    health = await api.call("GET", "/healthz", key=None)
    assert (health.status, health.body) == (200, {"status": "ok"})


# -- 8. concurrency --------------------------------------------------------------------------


async def test_twenty_concurrent_claims_have_one_winner(api: Api) -> None:
    record = await api.approved()
    replies = await asyncio.gather(*(api.claim(record["id"]) for _ in range(20)))
    winners = [r for r in replies if r.status == 200]
    losers = [r for r in replies if r.status != 200]
    assert len(winners) == 1, [(r.status, r.body) for r in replies]
    assert len(losers) == 19
    for loser in losers:
        error = assert_error(loser, 409, "not_pending")
        assert error["state"] == "executing"

    async with api.store.read() as tx:
        events = [e.type for e in await tx.events_for(record["id"])]
    assert events.count("claimed") == 1
    token = winners[0].body["claim_token"]
    done = await api.call(
        "POST",
        f"/v1/approvals/{record['id']}/complete",
        {"claim_token": token, "outcome": "succeeded"},
    )
    assert (done.status, done.body["state"]) == (200, "executed")


# -- odd ids and query values ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/approvals/a%00b", NO_BODY),
        ("POST", "/v1/approvals/a%00b/claim", {}),
        ("POST", "/v1/approvals/a%00b/cancel", {}),
        ("GET", "/v1/approvals/" + "x" * 300, NO_BODY),
        ("GET", "/v1/approvals/%C3%A9t%C3%A9", NO_BODY),
    ],
)
async def test_odd_ids_are_not_found(api: Api, method: str, path: str, body: Any) -> None:
    """No such approval can exist, so the answer is the same 404 on both databases."""
    assert_error(await api.call(method, path, body), 404, "not_found")


@pytest.mark.parametrize("name", ["run_id", "capability", "assignee"])
async def test_list_filter_with_a_nul_is_refused_naming_the_parameter(api: Api, name: str) -> None:
    """Like every text field of a body (bot/validation.py NO_NUL), a NUL is refused up front,
    so SQLite and PostgreSQL answer alike."""
    await api.create()
    reply = await api.call("GET", f"/v1/approvals?{name}=a%00b")
    error = assert_error(reply, 422, "invalid_request")
    assert name in error_fields(error), error


async def test_ten_concurrent_identical_creates_make_one_approval(serve: Serve) -> None:
    api = await serve(max_creates_in_flight=10)  # all ten at once, none refused for load
    replies = await asyncio.gather(
        *(api.call("POST", "/v1/approvals", request_body()) for _ in range(10))
    )
    statuses = sorted(r.status for r in replies)
    assert statuses == [200] * 9 + [201], [(r.status, r.body) for r in replies]
    assert len({r.body["id"] for r in replies}) == 1
    rows, _ = await api.snapshot()
    assert len(rows) == 1


async def test_concurrent_retries_of_one_completion_record_it_once(api: Api) -> None:
    record = await api.approved()
    token = (await api.claim(record["id"])).body["claim_token"]
    done = {"claim_token": token, "outcome": "succeeded", "result": {"refund": "re_1"}}
    replies = await asyncio.gather(
        *(api.call("POST", f"/v1/approvals/{record['id']}/complete", done) for _ in range(10))
    )
    assert [r.status for r in replies] == [200] * 10, [r.body for r in replies]
    assert all(r.body == replies[0].body for r in replies)
    async with api.store.read() as tx:
        events = [e.type for e in await tx.events_for(record["id"])]
    assert events.count("executed") == 1


async def test_claim_racing_cancel_has_one_winner(api: Api) -> None:
    record = await api.approved()
    claim, cancel = await asyncio.gather(
        api.claim(record["id"]),
        api.call("POST", f"/v1/approvals/{record['id']}/cancel", {"reason": "withdrawn"}),
    )
    assert sorted([claim.status, cancel.status]) == [200, 409], (claim.body, cancel.body)
    final = (await api.get(record["id"]))["state"]
    assert final == ("executing" if claim.status == 200 else "cancelled")


# -- review fixes: input that must stay a 4xx ------------------------------------------------


async def test_an_undecodable_authorization_header_is_401(api: Api) -> None:
    host, port = api.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        b"GET /v1/approvals HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff\xfe\r\n"
        b"Connection: close\r\n\r\n"
    )
    await writer.drain()
    response = await reader.read()
    writer.close()
    status_line, _, rest = response.partition(b"\r\n")
    assert status_line.split()[1] == b"401", response
    assert b'"unauthorized"' in rest


async def test_a_non_ascii_claim_token_is_422_not_a_crash(api: Api) -> None:
    record = await api.approved()
    assert (await api.claim(record["id"])).status == 200
    reply = await api.call(
        "POST",
        f"/v1/approvals/{record['id']}/complete",
        {"claim_token": "éé", "outcome": "succeeded"},
    )
    assert "claim_token" in error_fields(assert_error(reply, 422, "invalid_request"))


async def test_a_cursor_hiding_a_nul_is_refused_on_both_databases(api: Api) -> None:
    forged = base64.urlsafe_b64encode(
        json.dumps(["2026-01-05T09:00:00.000000Z", "a\x00b"]).encode()
    ).decode()
    reply = await api.call("GET", f"/v1/approvals?cursor={forged}")
    assert error_fields(assert_error(reply, 422, "invalid_request")) == ["cursor"]


async def test_two_tenants_with_the_same_key_value_refuse_to_start(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIGNOFF_TEST_ACME_KEY", "same")
    monkeypatch.setenv("SIGNOFF_TEST_GLOBEX_KEY", "same")
    tenants = [
        {"name": "acme", "api_key_env": "SIGNOFF_TEST_ACME_KEY"},
        {"name": "globex", "api_key_env": "SIGNOFF_TEST_GLOBEX_KEY"},
    ]
    config = parse_config({**TEST_CONFIG, "tenants": tenants})
    with pytest.raises(ConfigError, match="same API key"):
        build_app(config, store, background=False)


# -- recoverable claims, renew, release, and what claim re-checks, over HTTP ----------------


async def test_a_claim_retried_with_its_idempotency_key_gets_the_same_claim(api: Api) -> None:
    record = await api.approved()
    path = f"/v1/approvals/{record['id']}/claim"
    first = await api.call("POST", path, {}, headers={"Idempotency-Key": "agent-7:try"})
    again = await api.call("POST", path, {}, headers={"Idempotency-Key": "agent-7:try"})
    assert first.status == again.status == 200, (first.body, again.body)
    assert again.body["claim_token"] == first.body["claim_token"]
    assert again.body["lease_until"] == first.body["lease_until"]
    other = await api.call("POST", path, {}, headers={"Idempotency-Key": "agent-8"})
    assert assert_error(other, 409, "not_pending")["state"] == "executing"
    bad = await api.call("POST", path, {}, headers={"Idempotency-Key": "käse"})
    assert error_fields(assert_error(bad, 422, "invalid_request")) == ["Idempotency-Key"]


async def test_renew_and_release_over_http(api: Api) -> None:
    record = await api.approved()
    token = (await api.claim(record["id"], {"lease": "5m"})).body["claim_token"]
    base = f"/v1/approvals/{record['id']}"
    renewed = await api.call("POST", f"{base}/renew", {"claim_token": token, "lease": "1h"})
    assert renewed.status == 200, renewed.body
    assert renewed.body["lease_until"] == utc_iso(api.clock.now() + timedelta(hours=1))
    too_long = await api.call("POST", f"{base}/renew", {"claim_token": token, "lease": "25h"})
    assert error_fields(assert_error(too_long, 422, "invalid_request")) == ["lease"]
    wrong = await api.call("POST", f"{base}/release", {"claim_token": token + "x"})
    assert_error(wrong, 409, "claim_mismatch")
    released = await api.call("POST", f"{base}/release", {"claim_token": token})
    assert released.status == 200, released.body
    assert (released.body["state"], released.body["lease_until"]) == ("approved", None)
    assert_error(
        await api.call("POST", f"{base}/release", {"claim_token": token}), 409, "not_pending"
    )
    token = (await api.claim(record["id"])).body["claim_token"]
    api.clock.advance(hours=1)
    late = await api.call("POST", f"{base}/renew", {"claim_token": token})
    assert_error(late, 409, "lease_exhausted")


async def test_claim_of_an_altered_row_is_409_approval_corrupt(api: Api) -> None:
    record = await api.approved()
    await tamper(
        api.store,
        "UPDATE approvals SET tool_args = :v WHERE id = :id",
        v='{"charge": "ch_attacker", "amount": 999999}',
        id=record["id"],
    )
    assert_error(await api.claim(record["id"]), 409, "approval_corrupt")
    assert (await api.get(record["id"]))["state"] == "approved"


async def test_the_record_names_what_replaced_it_and_its_escalation_level(api: Api) -> None:
    old = await api.approved(step={"node": "refund"})
    new = await api.create(step={"node": "refund"}, tool={"name": "t", "arguments": {"a": 2}})
    replaced = await api.get(old["id"])
    assert (replaced["state"], replaced["superseded_by"]) == ("superseded", new["id"])
    assert (new["superseded_by"], new["follow_up_id"], new["escalation_level"]) == (None, None, 0)
    assert_error(await api.claim(old["id"]), 409, "not_pending")


async def test_a_page_of_large_records_is_bounded_in_bytes_and_says_so(api: Api) -> None:
    made = {
        (
            await api.create(
                run_id=f"big-{i}", tool={"name": "t", "arguments": {"blob": "x" * 200_000}}
            )
        )["id"]
        for i in range(8)
    }
    seen: list[str] = []
    query = "?limit=500"
    while True:
        reply = await api.call("GET", f"/v1/approvals{query}")
        assert reply.status == 200, reply.body
        page = reply.body
        # About 1 MiB, never the 1.6 MB of all eight.
        assert len(json.dumps(page)) < 1.5 * 1024 * 1024
        seen += [a["id"] for a in page["approvals"]]
        if page["next_cursor"] is None:
            assert "truncated" not in page
            break
        assert page["truncated"] is True and 1 <= len(page["approvals"]) < 8
        query = f"?limit=500&cursor={page['next_cursor']}"
    assert sorted(seen) == sorted(made) and len(seen) == len(set(seen))
