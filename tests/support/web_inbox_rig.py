"""The web inbox tests' rig (test_web_inbox.py, test_web_approval_page.py): one signoff
server in the test's process (tests/support/chat_server.py) with [web] and the `web` notify
target, the sign-in links `signoff web login --as` prints, and a browser per person
(tests/support/web_browser.py).
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pytest

from bot.clock import FakeClock
from bot.config import parse_config
from bot.durations import parse_duration
from bot.signin import SignInLinks
from store.repository import Store
from tests.support.chat_server import API_KEY, PUBLIC_URL, ChatServer, serve
from tests.support.samples import TEST_CONFIG
from tests.support.web_browser import Browser

GLOBEX_KEY = "globex-key"
SECRET = "w" * 40


@dataclass
class Rig(ChatServer):
    links: SignInLinks
    browsers: list[Browser] = field(default_factory=list)

    async def create_for(self, key: str, **overrides: Any) -> dict[str, Any]:
        """A request through the agent API with another tenant's key."""
        async with self.http.post(
            f"{self.url}/v1/approvals",
            json=overrides,
            headers={"Authorization": f"Bearer {key}"},
        ) as response:
            assert response.status == 201, await response.text()
            return await response.json()

    async def link(self, principal: str) -> str:
        """A sign-in link, as `signoff web login --as` prints it."""
        return self.links.url(PUBLIC_URL, await self.links.make(principal))

    def browser(self) -> Browser:
        browser = Browser(self.url)
        self.browsers.append(browser)
        return browser

    async def signed_in(self, principal: str) -> Browser:
        browser = self.browser()
        page = await browser.sign_in(await self.link(principal))
        assert page.status == 200 and urlsplit(page.url).path == "/web/inbox", page.html
        return browser

    async def outbox_kinds(self, approval_id: str) -> list[str]:
        async with self.store.read() as tx:
            return [job.kind for job in await tx.outbox_jobs(approval_id=approval_id)]


def _config() -> dict[str, Any]:
    config = copy.deepcopy(TEST_CONFIG)
    config["server"] = {"public_url": PUBLIC_URL}
    config["web"] = {"link_ttl": "15m", "session_idle": "8h"}
    config["tenants"][0]["api_key_env"] = "WEB_TEST_API_KEY"
    config["tenants"][1]["api_key_env"] = "WEB_TEST_GLOBEX_KEY"
    config["principals"]["erin"] = {"name": "Erin Outsider"}
    config["principals"]["olga"] = {"name": "Olga Ops", "operator": True}
    config["routes"][0]["notify"] = ["web"]
    return config


Start = Callable[[Store], Awaitable[Rig]]


@asynccontextmanager
async def starting(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Start]:
    """The body of the web tests' `start` fixture (tests/integration/web/conftest.py): a
    function that starts a signoff server with [web] on a store; every server started stops,
    and every browser it gave closes, on the way out."""
    monkeypatch.setenv("SIGNOFF_WEB_SECRET", SECRET)
    monkeypatch.setenv("WEB_TEST_API_KEY", API_KEY)
    monkeypatch.setenv("WEB_TEST_GLOBEX_KEY", GLOBEX_KEY)
    cleanup: list[Callable[[], Awaitable[None]]] = []
    rigs: list[Rig] = []

    async def one(store: Store) -> Rig:
        config = parse_config(_config())
        directory = config.directory()
        links = SignInLinks(store, directory, clock, parse_duration("15m"))
        rig = await serve(Rig, config, store, clock, API_KEY, cleanup, links=links)
        rigs.append(rig)
        return rig

    yield one
    for rig in rigs:
        for browser in rig.browsers:
            await browser.http.close()
    for close in reversed(cleanup):
        await close()
