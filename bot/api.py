"""The agent-facing HTTP API (the contract: docs/reference.md, "HTTP API").

Every route is tenant-scoped by the bearer key: a key of one tenant never sees or touches
another tenant's approvals, and their ids answer 404 exactly like ids that do not exist.
Bodies are parsed strictly (bot.validation.parse_json) and validated with pydantic; every
error, including aiohttp's own (unknown route, wrong method, body too large), leaves as
`{"error": {"code", "message", ...}}`. Bad input never reaches a 500.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import logging
import os
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, StrictStr

from bot.admission import Admission, AdmissionSettings
from bot.agent_actions import AgentActions
from bot.api_embed import Minting
from bot.canonical import canonical_json
from bot.clock import Clock, utc_iso
from bot.durations import parse_duration
from bot.errors import (
    ConfigError,
    InvalidRequest,
    NoRoute,
    NotFound,
    Overloaded,
    RequestTooLarge,
    SignoffError,
    Unauthorized,
)
from bot.intake import create_request, validate_request
from bot.model import DEFAULT_LEASE, State, public_record
from bot.routing import Directory
from bot.validation import (
    IS_DURATION,
    IS_LEASE,
    MAX_REQUEST_BYTES,
    NO_NUL,
    StrictModel,
    parse_json,
    validate,
)
from bot.waits import MAX_WAIT, Waits
from store import json_text
from store.repository import Store

log = logging.getLogger("signoff.api")

MAX_RESULT_BYTES = 16 * 1024
_MAX_PAGE = 500
# About how much JSON one page of the list may hold, and how many rows are read at a time.
_PAGE_BYTES = 1024 * 1024
_READ_BATCH = 50
_ID = re.compile(r"[0-9a-fA-F-]{1,36}")
# `ids` in a list's query: as many as fit a request line (aiohttp reads 8 KB of it).
_MAX_IDS = 100
_IDS = rf"^[0-9a-fA-F-]{{1,36}}(,[0-9a-fA-F-]{{1,36}}){{0,{_MAX_IDS - 1}}}$"


@dataclass
class ApiContext:
    store: Store
    directory: Directory
    clock: Clock
    actions: AgentActions
    # (tenant, key) for every tenant whose api_key_env is set
    keys: list[tuple[str, bytes]]
    max_body: int = MAX_REQUEST_BYTES
    claim_lease: timedelta = DEFAULT_LEASE
    # Creates only: nothing else an agent or a person asks is ever refused for load.
    admission: Admission = field(default_factory=lambda: Admission(AdmissionSettings()))
    # The waits this process holds (bot/waits.py); bounded by their own limits.
    waits: Waits | None = None


API: web.AppKey[ApiContext] = web.AppKey("signoff_api", ApiContext)


def tenant_keys(directory: Directory, environ: Any = os.environ) -> list[tuple[str, bytes]]:
    """Each tenant's API key from its environment variable; tenants without one cannot use
    the API (logged, so an operator sees why their agent gets 401)."""
    keys = _keys(directory, environ)
    keyed = {name for name, _ in keys}
    for tenant in directory.tenants.values():
        if tenant.name not in keyed:
            why = f"${tenant.api_key_env} is not set" if tenant.api_key_env else "no api_key_env"
            log.warning("tenant %s cannot use the HTTP API: %s", tenant.name, why)
    return keys


def check_tenant_keys(directory: Directory, environ: Any = os.environ) -> None:
    """Refuse (ConfigError) two tenants sharing one API key: a request could not say whose it
    is. `serve` checks this before it starts any worker."""
    _keys(directory, environ)


def _keys(directory: Directory, environ: Any) -> list[tuple[str, bytes]]:
    keys: list[tuple[str, bytes]] = []
    for tenant in directory.tenants.values():
        value = environ.get(tenant.api_key_env) if tenant.api_key_env else None
        if not value:
            continue
        for other, key in keys:
            if hmac.compare_digest(key, value.encode()):
                raise ConfigError(
                    f"tenants {other!r} and {tenant.name!r} have the same API key; "
                    "each tenant needs its own"
                )
        keys.append((tenant.name, value.encode()))
    return keys


# -- errors --------------------------------------------------------------------------------


def _json_response(data: Any, *, status: int = 200) -> web.Response:
    """A JSON response, written by orjson (store.json_text)."""
    return web.json_response(data, status=status, dumps=json_text.dumps)


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return utc_iso(value)
    return value


def error_response(status: int, code: str, message: str, **details: Any) -> web.Response:
    error = {"code": code, "message": message}
    error |= {k: _jsonable(v) for k, v in details.items() if v is not None and v != []}
    return _json_response({"error": error}, status=status)


_HTTP_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
}


@web.middleware
async def errors_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        return await handler(request)
    except SignoffError as exc:
        response = error_response(exc.http_status, exc.code, exc.message, **exc.details)
        if isinstance(exc, Overloaded):
            response.headers["Retry-After"] = str(exc.retry_after)
        return response
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = _HTTP_CODES.get(exc.status, "http_error")
        message = exc.text or exc.reason
        if exc.status == 404:
            message = f"no such endpoint: {request.method} {request.path}"
        elif exc.status == 413:
            # aiohttp names its own buffer size; say the configured limit.
            message = f"request body is over the limit of {request.app[API].max_body} bytes"
        elif exc.status == 405:
            message = f"{request.method} is not allowed on {request.path}"
        response = error_response(exc.status, code, message)
        if exc.status == 405 and "Allow" in exc.headers:
            response.headers["Allow"] = exc.headers["Allow"]
        return response
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return error_response(500, "internal", "internal error; see the server log")


# -- request plumbing ------------------------------------------------------------------------


def _tenant(request: web.Request) -> str:
    """The tenant whose key is presented (every key is compared, in constant time)."""
    header = request.headers.get("Authorization", "")
    scheme, _, presented = header.partition(" ")
    if scheme.lower() != "bearer" or not presented.strip():
        raise Unauthorized("missing API key: send Authorization: Bearer <tenant api key>")
    # aiohttp keeps undecodable header bytes as surrogates: encode them back, never fail.
    offered = presented.strip().encode("utf-8", "surrogateescape")
    found = None
    for tenant, key in request.app[API].keys:
        if hmac.compare_digest(offered, key):
            found = tenant
    if found is None:
        raise Unauthorized("unknown API key")
    return found


async def _body(request: web.Request, *, optional: bool = False) -> Any:
    ctx = request.app[API]
    if request.content_length is not None and request.content_length > ctx.max_body:
        raise RequestTooLarge(
            f"request is {request.content_length} bytes; the limit is {ctx.max_body}"
        )
    data = await request.read()  # the app's client_max_size stops chunked bodies too
    if optional and not data.strip():
        return {}
    return parse_json(data, ctx.max_body)


Lease = Annotated[StrictStr, IS_DURATION, IS_LEASE]


class ClaimBody(StrictModel):
    lease: Lease | None = None


ClaimToken = Annotated[StrictStr, Field(min_length=1, max_length=200, pattern=r"^[!-~]+$")]


class CompleteBody(StrictModel):
    claim_token: ClaimToken
    outcome: Literal["succeeded", "failed"]
    result: Any = None


class ReleaseBody(StrictModel):
    claim_token: ClaimToken


class RenewBody(StrictModel):
    claim_token: ClaimToken
    lease: Lease | None = None


class SupersedeBody(StrictModel):
    reason: Annotated[StrictStr, Field(min_length=1, max_length=4000), NO_NUL]


class CancelBody(StrictModel):
    reason: Annotated[StrictStr, Field(max_length=4000), NO_NUL] | None = None


# Seconds a wait may be held: a number, at most MAX_WAIT (renewed by the client for longer).
Wait = Annotated[float, Field(gt=0, le=MAX_WAIT, allow_inf_nan=False)]


class ListQuery(BaseModel):
    # Query strings are text: numbers are parsed (not strict), unknown parameters refused.
    model_config = ConfigDict(extra="forbid")

    state: State | None = None
    run_id: Annotated[str, Field(max_length=256), NO_NUL] | None = None
    capability: Annotated[str, Field(max_length=256), NO_NUL] | None = None
    assignee: Annotated[str, Field(max_length=160), NO_NUL] | None = None
    limit: Annotated[int, Field(ge=1, le=_MAX_PAGE)] = 50
    # Issued cursors are unpadded base64url; anything else cannot be one.
    cursor: Annotated[str, Field(max_length=200, pattern=r"^[A-Za-z0-9_-]*$")] | None = None
    # Only these requests: comma-separated ids, at most _MAX_IDS.
    ids: Annotated[str, Field(max_length=_MAX_IDS * 37, pattern=_IDS)] | None = None
    # Hold the page until one of its requests leaves `seen` (WaitQuery).
    wait: Wait | None = None
    seen: State = State.PENDING


def _encode_cursor(created_at: datetime, approval_id: str) -> str:
    raw = json.dumps([utc_iso(created_at), approval_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created, approval_id = json.loads(raw)
        when = datetime.strptime(created, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
        if not isinstance(approval_id, str) or not _ID.fullmatch(approval_id):
            raise ValueError("not an approval id")
        return when, approval_id
    except (ValueError, TypeError, binascii.Error):
        raise InvalidRequest(
            "cursor is not one this server issued; pass next_cursor from the previous page",
            fields=[{"field": "cursor", "message": "invalid cursor"}],
        ) from None


def _approval_id(request: web.Request) -> str:
    """The id in the path. Ids are UUIDs: anything else cannot exist, and is answered like an
    unknown id without asking the database (which would refuse some text, e.g. NUL)."""
    approval_id = request.match_info["id"]
    if not _ID.fullmatch(approval_id):
        raise NotFound(f"no approval with id {approval_id!r}")
    return approval_id


# -- handlers --------------------------------------------------------------------------------


async def create(request: web.Request) -> web.Response:
    tenant = _tenant(request)
    ctx = request.app[API]
    # Refused before its body is read, validated or stored: a 429 is cheap and wrote nothing.
    async with ctx.admission.admit():
        parsed = validate_request(await _body(request))
        result = await create_request(ctx.store, ctx.directory, ctx.clock, tenant, parsed)
    for replaced in result.superseded:
        ctx.actions.committed(replaced)
    if result.granted is not None:
        ctx.actions.committed(result.granted)
    if result.created:
        log.info(
            "approval %s requested by tenant %s (%s)",
            result.approval.id,
            tenant,
            result.approval.capability,
            extra={"approval_id": result.approval.id, "tenant": tenant, "actor": f"agent:{tenant}"},
        )
    return _json_response(public_record(result.approval), status=201 if result.created else 200)


class WaitQuery(BaseModel):
    """`?wait=SECONDS&seen=STATE`: hold the answer until the request is not in `seen`."""

    model_config = ConfigDict(extra="ignore")  # a plain GET never refused its query

    wait: Wait | None = None
    seen: State = State.PENDING


async def get(request: web.Request) -> web.Response:
    tenant = _tenant(request)
    approval_id = _approval_id(request)
    query = validate(WaitQuery, dict(request.query))
    if query.wait is not None:
        found = await _waits(request).hold(tenant, [approval_id], query.seen, query.wait)
        if not found:
            raise NotFound(f"no approval with id {request.match_info['id']!r}")
        return _waited(_json_response(public_record(found[0])), query.wait)
    async with request.app[API].store.read() as tx:
        approval = await tx.get_approval(approval_id, tenant)
    if approval is None:
        raise NotFound(f"no approval with id {request.match_info['id']!r}")
    return _json_response(public_record(approval))


def _waits(request: web.Request) -> Waits:
    ctx = request.app[API]
    if ctx.waits is None:  # an API built without the app's (tests of the API alone)
        ctx.waits = Waits(ctx.store)
    return ctx.waits


def _waited(response: web.Response, seconds: float) -> web.Response:
    """A wait's answer: says it was held (clients that see no such header poll instead)."""
    response.headers["Signoff-Wait"] = f"{seconds:g}"
    return response


async def list_(request: web.Request) -> web.Response:
    """A page of records, newest first: at most `limit` of them and about `_PAGE_BYTES` of
    JSON, whichever comes first (records can be large: a page of 500 could otherwise be
    hundreds of MB). A page cut short by size says so (`truncated`); `next_cursor` goes on
    from its last record either way. Rows are read a few at a time, so neither the answer
    nor what is read for it grows with `limit`. With `wait`, the page is held until one of
    the requests on it leaves the state `seen` (bot/waits.py), then read again."""
    tenant = _tenant(request)
    query = validate(ListQuery, dict(request.query))
    if query.wait is None:
        return _page_response(await _page(request, tenant, query))
    shown = await _page(request, tenant, query)
    await _waits(request).hold(tenant, shown.ids, query.seen, query.wait)
    return _waited(_page_response(await _page(request, tenant, query)), query.wait)


@dataclass
class _Page:
    records: list[str]  # each record's JSON, encoded once for both the size and the body
    ids: list[str]
    next_cursor: str | None
    truncated: bool


async def _page(request: web.Request, tenant: str, query: ListQuery) -> _Page:
    before = _decode_cursor(query.cursor) if query.cursor else None
    ids = query.ids.split(",") if query.ids is not None else ()
    filters = {
        name: str(value)
        for name, value in (
            ("state", query.state),
            ("run_id", query.run_id),
            ("capability", query.capability),
            ("assignee", query.assignee),
        )
        if value is not None
    }
    page = _Page([], [], None, False)
    size, more = 0, False
    last: tuple[datetime, str] | None = before
    while len(page.records) < query.limit and not page.truncated:
        batch_size = min(query.limit - len(page.records), _READ_BATCH)
        async with request.app[API].store.read() as tx:
            rows = await tx.page_approvals(
                tenant, filters=filters, before=last, limit=batch_size + 1, ids=ids
            )
        more = len(rows) > batch_size
        for row in rows[:batch_size]:
            record = json.dumps(public_record(row))
            if page.records and size + len(record) > _PAGE_BYTES:
                page.truncated = more = True
                break
            page.records.append(record)
            page.ids.append(row.id)
            size += len(record)
            last = (row.created_at, row.id)
        if not more:
            break
    page.next_cursor = _encode_cursor(*last) if more and last is not None else None
    return page


def _page_response(page: _Page) -> web.Response:
    # The same text json.dumps would make of {"approvals", "next_cursor", "truncated"}.
    cursor = json.dumps(page.next_cursor)
    body = f'{{"approvals": [{", ".join(page.records)}], "next_cursor": {cursor}'
    body += ', "truncated": true}' if page.truncated else "}"
    return web.Response(text=body, content_type="application/json")


# An Idempotency-Key as the header's draft standard and Stripe use it: printable ASCII.
_IDEMPOTENCY_KEY = re.compile(r"[!-~]{1,255}")


def _lease(asked: str | None, default: timedelta) -> timedelta:
    # The body's model refused a lease over 24h; the config refuses a default over it.
    return parse_duration(asked) if asked else default


async def claim(request: web.Request) -> web.Response:
    tenant = _tenant(request)
    ctx = request.app[API]
    body = validate(ClaimBody, await _body(request, optional=True))
    lease = _lease(body.lease, ctx.claim_lease)
    key = request.headers.get("Idempotency-Key")
    if key is not None and not _IDEMPOTENCY_KEY.fullmatch(key):
        raise InvalidRequest(
            "Idempotency-Key must be 1-255 printable ASCII characters",
            fields=[{"field": "Idempotency-Key", "message": "1-255 printable ASCII characters"}],
        )
    claimed = await ctx.actions.claim(tenant, _approval_id(request), lease, key)
    approval = claimed.approval
    return _json_response(
        {
            "approval": public_record(approval),
            "claim_token": claimed.claim_token,
            "lease_until": utc_iso(approval.lease_until) if approval.lease_until else None,
            "idempotency_key": claimed.idempotency_key,
            # The call to run: an approver's revision when approved as edited.
            "tool": {"name": approval.tool_name, "arguments": approval.tool_args},
            "edited": approval.original_hash is not None,
            "original_hash": approval.original_hash,
            "step": approval.step,
            "resume": approval.resume,
            "preconditions": approval.preconditions,
        }
    )


async def renew(request: web.Request) -> web.Response:
    tenant = _tenant(request)
    ctx = request.app[API]
    body = validate(RenewBody, await _body(request))
    lease = _lease(body.lease, ctx.claim_lease)
    approval = await ctx.actions.renew(tenant, _approval_id(request), body.claim_token, lease)
    return _json_response(public_record(approval))


async def release(request: web.Request) -> web.Response:
    tenant = _tenant(request)
    body = validate(ReleaseBody, await _body(request))
    approval = await request.app[API].actions.release(
        tenant, _approval_id(request), body.claim_token
    )
    return _json_response(public_record(approval))


async def complete(request: web.Request) -> web.Response:
    tenant = _tenant(request)
    document = await _body(request)
    body = validate(CompleteBody, document)
    result = document.get("result")
    if len(canonical_json(result)) > MAX_RESULT_BYTES:
        raise RequestTooLarge(f"result is larger than {MAX_RESULT_BYTES} bytes; keep a reference")
    approval = await request.app[API].actions.complete(
        tenant, _approval_id(request), body.claim_token, body.outcome, result
    )
    return _json_response(public_record(approval))


async def supersede(request: web.Request) -> web.Response:
    tenant = _tenant(request)
    body = validate(SupersedeBody, await _body(request))
    approval = await request.app[API].actions.supersede(tenant, _approval_id(request), body.reason)
    return _json_response(public_record(approval))


async def cancel(request: web.Request) -> web.Response:
    tenant = _tenant(request)
    body = validate(CancelBody, await _body(request, optional=True))
    approval = await request.app[API].actions.cancel(tenant, _approval_id(request), body.reason)
    return _json_response(public_record(approval))


class RouteQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # The create body's capability (bot.intake.RequestBody).
    capability: Annotated[
        str, Field(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
    ]


async def route(request: web.Request) -> web.Response:
    """Which route a request of this tenant for `capability` would take, or null: lets an
    agent's setup (signoff-mcp check) find capabilities that would be refused `no_route`
    before a call is. Reads the configuration only; says no more than a record would."""
    tenant = _tenant(request)
    query = validate(RouteQuery, dict(request.query))
    try:
        found = request.app[API].directory.route_for(tenant, query.capability)
    except NoRoute:
        return _json_response({"capability": query.capability, "route": None})
    answer = {
        "capability": found.capability,
        "approvers": list(found.approvers),
        "required_approvals": found.required_approvals,
    }
    return _json_response({"capability": query.capability, "route": answer})


_OPENAPI = Path(__file__).with_name("openapi.json")


async def openapi(request: web.Request) -> web.Response:
    """The API's OpenAPI 3.1 description (bot/openapi.json), for clients and test tools."""
    return web.Response(body=_OPENAPI.read_bytes(), content_type="application/json")


def add_routes(app: web.Application, ctx: ApiContext) -> None:
    app[API] = ctx
    app.router.add_get("/v1/openapi.json", openapi)
    app.router.add_post("/v1/approvals", create)
    app.router.add_get("/v1/approvals", list_)
    app.router.add_get("/v1/approvals/{id}", get)
    app.router.add_post("/v1/approvals/{id}/claim", claim)
    app.router.add_post("/v1/approvals/{id}/renew", renew)
    app.router.add_post("/v1/approvals/{id}/release", release)
    app.router.add_post("/v1/approvals/{id}/complete", complete)
    app.router.add_post("/v1/approvals/{id}/supersede", supersede)
    app.router.add_post("/v1/approvals/{id}/cancel", cancel)
    app.router.add_post("/v1/approvals/{id}/embed", Minting(ctx, _tenant, _body, _approval_id).mint)
    app.router.add_get("/v1/routes/match", route)
