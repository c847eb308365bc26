"""The web tests' rig (tests/support/web_inbox_rig.py): `start` starts signoff servers with
[web] on a loopback port (`await start(store)`), `rig` is one of them on the test's store,
driven by aiohttp clients standing in for browsers. The dashboard's and the grants page's
tests use the operator's rig of tests/support/web_rig.py as their `rig`, the edges' tests the
byte-for-byte rig of tests/support/edge_rig.py, the chat links' tests one server running
Slack, Telegram and the web together."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.clock import FakeClock
from store.repository import Store
from tests.support.web_inbox_rig import Rig, Start, starting


@pytest.fixture
async def start(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Start]:
    async with starting(clock, monkeypatch) as one:
        yield one


@pytest.fixture
async def rig(start: Start, store: Store) -> Rig:
    return await start(store)
