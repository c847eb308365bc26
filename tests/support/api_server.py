"""The agent API rig: the real application (`build_app`, no background tasks, a FakeClock) on
a loopback port with two tenants, acme and globex, and an aiohttp client that speaks to it as
an agent does, and the checks the API tests make of its answers. The `serve` and `api` fixtures
that start it are in tests/integration/conftest.py. Used by the API tests and the metrics refresh
tests.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDictProxy

from bot.clock import FakeClock
from bot.config import Config
from bot.operator import Actor, Operator
from bot.routing import Directory
from store.repository import Store
from tests.support.samples import request_body

ACME_KEY = "acme-test-key-9f2c41"
GLOBEX_KEY = "globex-test-key-07be3d"
ALICE = Actor("alice", "cli")
NO_BODY = object()  # `Api.call` sends no body (not even `null`)
HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclass
class Reply:
    status: int
    body: Any
    headers: CIMultiDictProxy[str]


@dataclass
class Api:
    url: str
    http: aiohttp.ClientSession
    store: Store
    clock: FakeClock
    directory: Directory
    config: Config
    # The application itself, for a test that reaches a service inside it (the create gate).
    app: web.Application | None = None

    async def call(
        self,
        method: str,
        path: str,
        body: Any = NO_BODY,
        *,
        key: str | None = ACME_KEY,
        data: Any = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        sent = dict(headers or {})
        if key is not None:
            sent["Authorization"] = f"Bearer {key}"
        if body is not NO_BODY:
            data = json.dumps(body).encode()
            sent.setdefault("Content-Type", "application/json")
        async with self.http.request(method, self.url + path, data=data, headers=sent) as resp:
            raw = await resp.read()
            parsed: Any = raw.decode()
            if resp.content_type == "application/json":
                parsed = json.loads(raw)
            return Reply(resp.status, parsed, resp.headers)

    async def create(self, key: str = ACME_KEY, **overrides: Any) -> dict[str, Any]:
        reply = await self.call("POST", "/v1/approvals", request_body(**overrides), key=key)
        assert reply.status == 201, reply.body
        return reply.body

    async def get(self, approval_id: str, key: str = ACME_KEY) -> dict[str, Any]:
        reply = await self.call("GET", f"/v1/approvals/{approval_id}", key=key)
        assert reply.status == 200, reply.body
        return reply.body

    async def approve(self, record: dict[str, Any]) -> None:
        operator = Operator(self.store, self.directory, self.clock)
        await operator.approve_shown(record["id"], record["hash"], ALICE)

    async def approved(self, **overrides: Any) -> dict[str, Any]:
        record = await self.create(**overrides)
        await self.approve(record)
        return record

    async def claim(self, approval_id: str, body: Any = NO_BODY) -> Reply:
        return await self.call("POST", f"/v1/approvals/{approval_id}/claim", body)

    async def snapshot(self) -> tuple[list[tuple[str, str, int]], int]:
        """Every approval's (id, state, version) and the number of outbox jobs."""
        async with self.store.read() as tx:
            rows = await tx.list_approvals(limit=1000)
            jobs = await tx.outbox_jobs()
        return sorted((a.id, a.state, a.version) for a in rows), len(jobs)


Serve = Callable[..., Awaitable[Api]]


async def listing(api: Api, query: str = "", key: str = ACME_KEY) -> dict[str, Any]:
    """`GET /v1/approvals` with `query` ("?state=pending"); the page, checked for its shape."""
    reply = await api.call("GET", f"/v1/approvals{query}", key=key)
    assert reply.status == 200, reply.body
    assert set(reply.body) == {"approvals", "next_cursor"}
    return reply.body


def assert_error(reply: Reply, status: int, code: str) -> dict[str, Any]:
    """The reply is the API's error shape with this status and code; returns the error."""
    assert reply.status == status, reply.body
    assert reply.headers["Content-Type"].startswith("application/json"), reply.headers
    assert isinstance(reply.body, dict) and set(reply.body) == {"error"}, reply.body
    error = reply.body["error"]
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"].strip(), error
    return error


def error_fields(error: dict[str, Any]) -> list[str]:
    return [f["field"] for f in error.get("fields", [])]
