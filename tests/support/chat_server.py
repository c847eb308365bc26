"""A signoff server in the test's own process for the chat channel tests (Slack, Telegram):
the real application on a loopback port with a FakeClock, and an outbox the test drives by
hand with every chat job (cards, notices, delegation edges), so a test says when cards go out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
import pytest
from aiohttp import web

from bot.app import CORE, build_app
from bot.clock import FakeClock
from bot.config import Config
from bot.outbox.jobs import JobKind
from bot.outbox.runner import OutboxRunner, OutboxSettings
from bot.routing import Directory
from store.repository import Store
from tests.support.samples import request_body

Cleanup = list[Callable[[], Awaitable[None]]]
S = TypeVar("S", bound="ChatServer")
# The acme tenant's API key: each rig's config reads it from an environment variable of its own.
API_KEY = "acme-key"

# A test's changes to the config's dict, made last, before it is parsed.
Configure = Callable[[dict[str, Any]], None]

# The web surface beside a chat surface (its links on the cards, the Slack Home's): the public
# URL plain HTTP, as the tests talk to loopback (https would make the cookie Secure).
PUBLIC_URL = "http://signoff.example.com"
WEB_SECRET = "s" * 40


def with_web(data: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Serve [web] at PUBLIC_URL beside the chat surface of the config's dict `data`."""
    monkeypatch.setenv("SIGNOFF_WEB_SECRET", WEB_SECRET)
    data["server"] = {"public_url": PUBLIC_URL}
    data["web"] = {}


@dataclass
class ChatServer:
    url: str
    http: aiohttp.ClientSession
    store: Store
    clock: FakeClock
    directory: Directory
    runner: OutboxRunner
    api_key: str
    # The server's channels by name (the Slack App Home tests wait on its Home refreshes).
    channels: Mapping[str, Any] = field(default_factory=dict, kw_only=True)
    # The application itself, for a test that reaches a service inside it (the create gate).
    app: web.Application | None = field(default=None, kw_only=True)

    async def create(self, **overrides: Any) -> dict[str, Any]:
        """A request through the agent API; the created record."""
        async with self.http.post(
            f"{self.url}/v1/approvals",
            json=request_body(**overrides),
            headers={"Authorization": f"Bearer {self.api_key}"},
        ) as response:
            assert response.status == 201, await response.text()
            return await response.json()

    async def drain(self, *, homes: bool = True) -> None:
        """Run the outbox until nothing is due; then, unless told not to, wait for the Slack
        App Homes its jobs made due (published in the background, after the jobs)."""
        while await self.runner.run_once():
            pass
        home = getattr(self.channels.get("slack"), "home", None)
        if homes and home is not None:
            async with asyncio.timeout(30):
                await home.settled()

    async def state(self, approval_id: str) -> Any:
        async with self.store.read() as tx:
            return await tx.get_approval(approval_id)

    async def events(self, approval_id: str) -> list[Any]:
        async with self.store.read() as tx:
            return await tx.events_for(approval_id)


async def serve(
    kind: type[S],
    config: Config,
    store: Store,
    clock: FakeClock,
    api_key: str,
    cleanup: Cleanup,
    **extra: Any,
) -> S:
    """Start the application for `config` on 127.0.0.1 and return a `kind` (a ChatServer with
    the `extra` fields of a channel's test); `cleanup` gets what stops it."""
    app = build_app(config, store, clock=clock, background=False)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    http = aiohttp.ClientSession()
    cleanup.extend([runner.cleanup, http.close])
    core = app[CORE]  # the server's own services: one directory, one set of channels
    # Every chat job; webhooks stay queued, where the tests look for them.
    chat_jobs = [kind for kind in JobKind if kind != JobKind.WEBHOOK]
    handlers = core.handlers(kinds=chat_jobs)
    outbox = OutboxRunner(store, handlers, clock, OutboxSettings(), rand=lambda: 1.0)
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    return kind(
        url,
        http,
        store,
        clock,
        core.directory,
        outbox,
        api_key,
        channels=core.channels,
        app=app,
        **extra,
    )
