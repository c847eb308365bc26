"""The embedded approval's rig: the real application (bot.app.build_app, no background tasks,
a FakeClock) with `[web] embed_origins` and the agent API's keys, on a loopback port; the
agent side through tests/support/api_server.py's `Api`, the frame's side as a browser without
cookies would fetch it, and what the database holds for the checks that nothing was written.
Used by tests/integration/web/test_embed.py; and, for tests/browser/test_embed.py, a fresh
PostgreSQL database and the audit trail read on either database from a thread.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import asyncpg
import pytest
from aiohttp import web
from multidict import CIMultiDictProxy
from sqlalchemy import func, select
from sqlalchemy.engine import make_url

from bot.app import build_app
from bot.clock import FakeClock
from bot.config import parse_config
from store.embed_tokens import embed_tokens
from store.engine import normalize_url
from store.repository import Store
from store.schema import approval_events
from tests.support.api_server import ACME_KEY, GLOBEX_KEY, Api, Reply
from tests.support.databases import admin, migrate
from tests.support.samples import TEST_CONFIG
from tests.support.web_rig import Node, parse

PARENT = "https://partner.example"
ELSEWHERE = "https://elsewhere.example"
SECRET = "embed-test-secret-0123456789abcdef0123"
T = TypeVar("T")


@dataclass
class Frame:
    """One answer of `/embed/<token>`, as the iframe gets it."""

    status: int
    html: str
    headers: CIMultiDictProxy[str]

    @property
    def dom(self) -> Node:
        return parse(self.html)

    @property
    def body(self) -> Node:
        return self.dom.one("body")

    @property
    def event(self) -> str:
        """What the page tells its parent first (static/embed.js): loaded, decided, error."""
        return self.body.attrs["data-event"]

    @property
    def code(self) -> str:
        return self.body.attrs.get("data-code", "")

    @property
    def parents(self) -> list[str]:
        """The origins the page posts its messages to."""
        parents: list[str] = json.loads(self.body.attrs["data-parents"])
        return parents

    @property
    def frame_ancestors(self) -> str:
        policy = self.headers["Content-Security-Policy"]
        [ancestors] = [p.strip() for p in policy.split(";") if "frame-ancestors" in p]
        return ancestors.removeprefix("frame-ancestors ").strip()

    def form(self, action: str) -> dict[str, str]:
        """The fields of the page's Approve or Reject form."""
        form = self.dom.one("form", class_=action)
        return {i.attrs["name"]: i.attrs.get("value", "") for i in form.all("input")}


@dataclass
class EmbedRig:
    api: Api
    http: aiohttp.ClientSession

    @property
    def url(self) -> str:
        return self.api.url

    async def mint(self, approval_id: str, key: str = ACME_KEY, **body: Any) -> Reply:
        sent = {"person": "alice", "parent_origin": PARENT} | body
        sent = {k: v for k, v in sent.items() if v is not None}
        return await self.api.call("POST", f"/v1/approvals/{approval_id}/embed", sent, key=key)

    async def token(self, approval_id: str, **body: Any) -> str:
        reply = await self.mint(approval_id, **body)
        assert reply.status == 201, reply.body
        token: str = reply.body["token"]
        return token

    async def frame(self, token: str) -> Frame:
        async with self.http.get(f"{self.url}/embed/{token}") as response:
            return Frame(response.status, await response.text(), response.headers)

    async def post(
        self, token: str, form: dict[str, str], *, site: str | None = "same-origin"
    ) -> Frame:
        """POST the frame's form, with the Sec-Fetch-Site a browser sends from the frame."""
        headers = {"Sec-Fetch-Site": site} if site is not None else {}
        async with self.http.post(
            f"{self.url}/embed/{token}", data=form, headers=headers
        ) as response:
            return Frame(response.status, await response.text(), response.headers)

    async def written(self) -> tuple[Any, ...]:
        """What a refusal must leave as it was: every approval's (id, state, version, audit
        position), the audit events and the embed tokens (with their use)."""
        async with self.api.store.read() as tx:
            rows = await tx.list_approvals(limit=1000)
            events = await tx.conn.execute(select(func.count()).select_from(approval_events))
            tokens = await tx.conn.execute(
                select(embed_tokens.c.token_hash, embed_tokens.c.used_at).order_by(
                    embed_tokens.c.token_hash
                )
            )
            return (
                sorted((a.id, a.state, a.version, a.audit_seq) for a in rows),
                events.scalar_one(),
                [tuple(r) for r in tokens.all()],
            )


@asynccontextmanager
async def embedding(
    store: Store,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    *,
    origins: tuple[str, ...] = (PARENT,),
) -> AsyncIterator[EmbedRig]:
    """The application with `[web] embed_origins = origins` and acme's and globex's keys."""
    monkeypatch.setenv("SIGNOFF_WEB_SECRET", SECRET)
    monkeypatch.setenv("SIGNOFF_TEST_ACME_KEY", ACME_KEY)
    monkeypatch.setenv("SIGNOFF_TEST_GLOBEX_KEY", GLOBEX_KEY)
    raw = copy.deepcopy(TEST_CONFIG)
    raw["tenants"][0]["api_key_env"] = "SIGNOFF_TEST_ACME_KEY"
    raw["tenants"][1]["api_key_env"] = "SIGNOFF_TEST_GLOBEX_KEY"
    raw["web"] = {"embed_origins": list(origins)}
    raw["server"] = {"create_lag_limit": 10}
    config = parse_config(raw)
    app = build_app(config, store, clock=clock, background=False)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    url = f"http://{host}:{port}"
    async with aiohttp.ClientSession() as api_http, aiohttp.ClientSession() as frames:
        api = Api(url, api_http, store, clock, config.directory(), config, app)
        try:
            yield EmbedRig(api, frames)
        finally:
            await runner.cleanup()


# -- the browser tests' databases (tests/browser/test_embed.py) ------------------------------------
#
# The browser tests run no asyncio in the main thread while Chromium is open (Playwright's sync
# API holds its loop there: tests/browser/conftest.py), so what they ask of a database runs in
# a thread of its own.

POSTGRES_ENV = "SIGNOFF_TEST_POSTGRES_URL"
LOCAL_POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"


def in_thread(work: Callable[[], Awaitable[T]]) -> T:
    """`asyncio.run(work())` in a thread of its own; its result, or its exception."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = asyncio.run(work())
        except BaseException as exc:  # handed to the caller
            box["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value


@contextmanager
def postgres_database() -> Iterator[str]:
    """A new, migrated PostgreSQL database for one test, dropped after it; skips (fails under
    CI=true) when no server answers, as the suite's PostgreSQL fixtures do."""
    admin_url = os.environ.get(POSTGRES_ENV) or LOCAL_POSTGRES
    name = f"signoff_embed_{uuid.uuid4().hex[:12]}"
    try:
        in_thread(lambda: admin(admin_url, f"CREATE DATABASE {name}"))
    except (OSError, asyncpg.PostgresError) as exc:
        message = f"cannot connect to PostgreSQL at {admin_url}: {exc}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    url = normalize_url(
        make_url(normalize_url(admin_url)).set(database=name).render_as_string(False)
    )
    try:
        in_thread(lambda: migrate(url))
        yield url
    finally:
        in_thread(lambda: admin(admin_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


def audit_events(database_url: str, approval_id: str) -> list[tuple[str, str | None]]:
    """The approval's audit events, oldest first, as (type, actor), read on either database."""

    async def read() -> list[tuple[str, str | None]]:
        store = Store.from_url(database_url)
        try:
            async with store.read() as tx:
                return [(e.type, e.actor) for e in await tx.events_for(approval_id)]
        finally:
            await store.close()

    return in_thread(read)
