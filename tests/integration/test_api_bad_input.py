"""Bad input to the agent-facing HTTP API, over real HTTP, on real SQLite and PostgreSQL.

The real application (`build_app`, no background tasks, a FakeClock) is served on a loopback
port and driven with an aiohttp client (tests/support/api_server.py). What these tests prove:

- bad input of every kind (malformed, ambiguous or uncanonicalisable JSON, wrong types,
  unknown or missing fields, oversized bodies sent with Content-Length or chunked, missing or
  wrong keys, unroutable requests, wrong methods and paths) gets its 4xx and stable error code
  in the `{"error": {"code", "message"}}` shape, writes nothing, and leaves the server serving;
- odd ids and NUL-bearing query values get the same answer on both databases.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.support.api_server import ACME_KEY, NO_BODY, Api, assert_error, error_fields
from tests.support.databases import SQLITE_ONLY
from tests.support.samples import request_body

MAX_BODY = 256 * 1024  # server.max_body_bytes default


# -- bad input -------------------------------------------------------------------------------


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


# -- odd ids and query values ----------------------------------------------------------------


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
