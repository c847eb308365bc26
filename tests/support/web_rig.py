"""The web pages over real HTTP, as the dashboard and grants tests drive them: the real
application (bot.app.build_app with a [web] table, and an operator `olga`) on a loopback port,
people signed in with single-use links, and a small DOM to find a page's elements.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from html.parser import HTMLParser
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from bot.app import CHANNELS, build_app
from bot.clock import FakeClock
from bot.config import parse_config
from bot.intake import create_request
from bot.operator import Actor, Operator
from store.records import Approval
from store.repository import Store
from tests.support.samples import TEST_CONFIG, make_request

SECRET = "dashboard-test-secret-0123456789abcdef"
START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


# -- a small DOM, enough to find the contract's elements -------------------------------------


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    content: list[Node | str] = field(default_factory=list)

    @property
    def children(self) -> list[Node]:
        return [c for c in self.content if isinstance(c, Node)]

    def all(self, tag: str, **attrs: str) -> list[Node]:
        """Every descendant `tag` whose attributes include `attrs` (class_ for class,
        matched as one of its words; data_x for data-x)."""
        found = []
        for child in self.children:
            if child.tag == tag and all(_has(child, k, v) for k, v in attrs.items()):
                found.append(child)
            found.extend(child.all(tag, **attrs))
        return found

    def one(self, tag: str, **attrs: str) -> Node:
        [found] = self.all(tag, **attrs)
        return found

    @property
    def words(self) -> str:
        """The text inside, in document order, whitespace collapsed."""
        parts = [c if isinstance(c, str) else c.words for c in self.content]
        return " ".join(" ".join(parts).split())

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())


def _has(node: Node, key: str, value: str) -> bool:
    name = "class" if key == "class_" else key.replace("_", "-")
    if name == "class":
        return value in node.classes
    return node.attrs.get(name) == value


_VOID = {"meta", "link", "input", "br", "hr", "img"}


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.root = Node("#root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].content.append(node)
        if tag not in _VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].content.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].content.append(data)


def parse(html: str) -> Node:
    builder = _Builder()
    builder.feed(html)
    return builder.root


# -- the rig ---------------------------------------------------------------------------------


@dataclass
class Page:
    status: int
    html: str
    url: str

    @property
    def dom(self) -> Node:
        return parse(self.html)


@dataclass
class Browser:
    """One person's cookie jar against the server."""

    url: str
    http: aiohttp.ClientSession

    async def get(self, path: str) -> Page:
        async with self.http.get(self.url + path) as response:
            return Page(response.status, await response.text(), str(response.url))

    async def post(self, path: str, data: dict[str, str]) -> Page:
        async with self.http.post(self.url + path, data=data) as response:
            return Page(response.status, await response.text(), str(response.url))

    async def csrf(self) -> str:
        """The CSRF token of this session, as every page's sign-out form carries it (the
        refusal page a non-operator gets included)."""
        page = await self.get("/dashboard")
        return page.dom.one("form", class_="signout").one("input", name="csrf").attrs["value"]


@dataclass
class Rig:
    url: str
    store: Store
    clock: FakeClock
    app: web.Application
    cleanup: list[Callable[[], Awaitable[None]]]

    @property
    def directory(self) -> Any:
        return self.app[CHANNELS]["web"].directory

    async def browser(self, principal: str | None) -> Browser:
        """A fresh browser, signed in as `principal` through a single-use link (or not)."""
        http = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
        self.cleanup.append(http.close)
        if principal is not None:
            token = await self.app[CHANNELS]["web"].links.make(principal)
            # Opening the link shows a Continue button; pressing it (a POST) signs in.
            async with http.post(f"{self.url}/web/login/{token}", allow_redirects=False) as r:
                assert r.status == 303, await r.text()
        return Browser(self.url, http)

    async def create(self, **overrides: Any) -> Approval:
        created = await create_request(
            self.store, self.directory, self.clock, "acme", make_request(**overrides)
        )
        return created.approval

    async def decide(self, approval: Approval, who: str, via: str, action: str) -> None:
        operator = Operator(self.store, self.directory, self.clock)
        actor = Actor(who, via)
        if action == "approve":
            await operator.approve_shown(approval.id, approval.hash, actor)
        else:
            await operator.reject_shown(approval.id, approval.hash, actor, "not this one")


@asynccontextmanager
async def running(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Rig]:
    """The real application with `[web]` and an operator, olga, on a loopback port."""
    monkeypatch.setenv("SIGNOFF_WEB_SECRET", SECRET)
    raw = copy.deepcopy(TEST_CONFIG)
    raw["web"] = {}
    raw["principals"]["olga"] = {"name": "Olga Ops", "operator": True}
    config = parse_config(raw)
    clock.set(START)
    app = build_app(config, store, clock=clock, background=False)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    cleanup: list[Callable[[], Awaitable[None]]] = []
    yield Rig(f"http://127.0.0.1:{runner.addresses[0][1]}", store, clock, app, cleanup)
    for step in reversed(cleanup):
        await step()
    await runner.cleanup()
