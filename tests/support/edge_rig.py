"""A signoff server with every surface on ([web], [slack], [telegram]) for the tests of what
unauthenticated or hostile requests meet, spoken to over raw sockets: an HTTP client library
would refuse to send most of the bytes these tests send.
"""

from __future__ import annotations

import asyncio
import copy
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy import select

from bot.clock import FakeClock
from bot.config import parse_config
from bot.durations import parse_duration
from bot.signin import SignInLinks
from store.repository import Store
from store.schema import ALL_TABLES
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram
from tests.support.chat_server import API_KEY, PUBLIC_URL, ChatServer, serve
from tests.support.samples import TEST_CONFIG
from tests.support.slack_rig import CHANNEL as SLACK_CHANNEL
from tests.support.slack_rig import SECRET as SLACK_SECRET
from tests.support.telegram_rig import GROUP as TG_GROUP
from tests.support.telegram_rig import SECRET as TG_SECRET
from tests.support.telegram_rig import TOKEN as TG_TOKEN

WEB_SECRET = "w" * 40
FORM = b"application/x-www-form-urlencoded"


@dataclass
class Reply:
    status: int
    body: bytes
    headers: dict[bytes, bytes] = field(default_factory=dict)  # names lower-cased


@dataclass
class Rig(ChatServer):
    links: SignInLinks
    slack: FakeSlack
    tg: FakeTelegram

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    async def raw(
        self,
        method: bytes,
        path: bytes,
        headers: Sequence[tuple[bytes, bytes]] = (),
        body: bytes = b"",
    ) -> Reply:
        """One HTTP/1.1 request written byte for byte; the status and body of the answer."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            head = [
                method + b" " + path + b" HTTP/1.1",
                b"Host: 127.0.0.1:%d" % self.port,
                b"Connection: close",
                b"Content-Length: %d" % len(body),
                *(name + b": " + value for name, value in headers),
            ]
            writer.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
            answer = await asyncio.wait_for(reader.read(), 10)
        finally:
            writer.close()
        match = re.match(rb"HTTP/1\.[01] (\d{3})", answer)
        assert match, f"no HTTP answer: {answer[:200]!r}"
        head, _, body = answer.partition(b"\r\n\r\n")
        fields = (line.partition(b":") for line in head.split(b"\r\n")[1:])
        headers = {name.strip().lower(): value.strip() for name, _, value in fields}
        return Reply(int(match.group(1)), body, headers)

    async def snapshot(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of every table: what "nothing written" compares."""
        found = {}
        async with self.store.engine.connect() as conn:
            for table in ALL_TABLES:
                rows = (await conn.execute(select(table))).all()
                found[table.name] = sorted(tuple(map(repr, row)) for row in rows)
        return found

    async def signed_in(self, principal: str = "alice") -> tuple[bytes, str]:
        """A real session (its Cookie header value) and its CSRF token."""
        link = f"{self.url}/web/login/{await self.links.make(principal)}"
        async with self.http.post(link, allow_redirects=False) as response:
            assert response.status == 303
            cookie = b"signoff_session=" + response.cookies["signoff_session"].value.encode()
        page = await self.raw(b"GET", b"/web/inbox", [(b"Cookie", cookie)])
        assert page.status == 200
        [csrf] = re.findall(rb'name="csrf" value="([^"]+)"', page.body)[:1]
        return cookie, csrf.decode()


def _config(slack: FakeSlack, tg: FakeTelegram) -> dict[str, Any]:
    config = copy.deepcopy(TEST_CONFIG)
    config["server"] = {"public_url": PUBLIC_URL}
    config["web"] = {"link_ttl": "15m", "session_idle": "8h"}
    config["slack"] = {"api_base_url": slack.base_url}
    config["telegram"] = {"api_base_url": tg.base_url}
    config["tenants"][0]["api_key_env"] = "HOSTILE_TEST_API_KEY"
    config["principals"]["alice"]["operator"] = True
    config["routes"][0]["notify"] = [f"slack:{SLACK_CHANNEL}", f"telegram:{TG_GROUP}", "web"]
    return config


@asynccontextmanager
async def running(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Rig]:
    """The server on a loopback port, with the fake Slack and Telegram behind it."""
    monkeypatch.setenv("SIGNOFF_WEB_SECRET", WEB_SECRET)
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-test")
    monkeypatch.setenv("SLACK_SIGNING_SECRET", SLACK_SECRET)
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TG_TOKEN)
    monkeypatch.setenv("TELEGRAM_WEBHOOK_SECRET", TG_SECRET)
    monkeypatch.setenv("HOSTILE_TEST_API_KEY", API_KEY)
    cleanup: list[Callable[[], Awaitable[None]]] = []
    async with FakeSlack() as slack, FakeTelegram(TG_TOKEN) as tg:
        config = parse_config(_config(slack, tg))
        links = SignInLinks(store, config.directory(), clock, parse_duration("15m"))
        try:
            yield await serve(
                Rig, config, store, clock, API_KEY, cleanup, links=links, slack=slack, tg=tg
            )
        finally:
            for close in reversed(cleanup):
                await close()
