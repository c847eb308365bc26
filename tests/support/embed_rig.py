"""The embedded approval's rig: the real application (bot.app.build_app, no background tasks,
a FakeClock) with `[web] embed_origins` and the agent API's keys, on a loopback port; the
agent side through tests/support/api_server.py's `Api`, the frame's side as a browser without
cookies would fetch it, and what the database holds for the checks that nothing was written.
Used by tests/integration/web/test_embed.py.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from multidict import CIMultiDictProxy
from sqlalchemy import func, select

from bot.app import build_app
from bot.clock import FakeClock
from bot.config import parse_config
from store.embed_tokens import embed_tokens
from store.repository import Store
from store.schema import approval_events
from tests.support.api_server import ACME_KEY, GLOBEX_KEY, Api, Reply
from tests.support.samples import TEST_CONFIG
from tests.support.web_rig import Node, parse

PARENT = "https://partner.example"
ELSEWHERE = "https://elsewhere.example"
SECRET = "embed-test-secret-0123456789abcdef0123"


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
