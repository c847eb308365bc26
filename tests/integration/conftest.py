"""Fixtures more than one integration test module uses. A surface's own rig (its `start` and
`rig`) is in the conftest.py of its folder: slack/, telegram/, web/."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from bot.app import build_app
from bot.clock import FakeClock
from bot.config import parse_config
from bot.routing import Directory
from store.repository import Store
from tests.support import slack_rig, telegram_rig
from tests.support.api_server import ACME_KEY, GLOBEX_KEY, Api, Serve
from tests.support.samples import TEST_CONFIG
from tests.support.webhook_rig import Receiver, serving

# -- the agent API on a loopback port (tests/support/api_server.py) --------------------------------


@pytest.fixture
async def serve(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Serve]:
    """Start the real application on a loopback port; keyword arguments go to [server]."""
    monkeypatch.setenv("SIGNOFF_TEST_ACME_KEY", ACME_KEY)
    monkeypatch.setenv("SIGNOFF_TEST_GLOBEX_KEY", GLOBEX_KEY)
    runners: list[web.AppRunner] = []
    sessions: list[aiohttp.ClientSession] = []

    async def start(**server: Any) -> Api:
        tenants = [
            {**TEST_CONFIG["tenants"][0], "api_key_env": "SIGNOFF_TEST_ACME_KEY"},
            {**TEST_CONFIG["tenants"][1], "api_key_env": "SIGNOFF_TEST_GLOBEX_KEY"},
        ]
        # The create gate's lateness test stays out of tests about other things: a loaded
        # machine running late must not turn their concurrent creates into 429s (the gate's
        # own tests set it, tests/integration/test_admission.py).
        server = {"create_lag_limit": 10, **server}
        config = parse_config({**TEST_CONFIG, "tenants": tenants, "server": server})
        app = build_app(config, store, clock=clock, background=False)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        runners.append(runner)
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        http = aiohttp.ClientSession()
        sessions.append(http)
        return Api(f"http://{host}:{port}", http, store, clock, config.directory(), config, app)

    yield start
    for http in sessions:
        await http.close()
    for runner in runners:
        await runner.cleanup()


@pytest.fixture
async def api(serve: Serve) -> Api:
    return await serve()


# -- a webhook receiver on loopback and a tenant that sends to it (tests/support/webhook_rig.py) --


# Shadowed in test_outbox_endpoints.py, whose receiver needs a hanging and a healthy path.
@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with serving() as hooks:
        yield hooks


@pytest.fixture
def hooked(receiver: Receiver) -> Directory:
    config = copy.deepcopy(TEST_CONFIG)
    config["tenants"][0] = {
        "name": "acme",
        "webhook_url": receiver.url,
        "webhook_secret_env": "ACME_SECRET",
        # The tests' receivers, callbacks included, listen on loopback.
        "allow_private_callbacks": True,
    }
    return parse_config(config).directory()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as http:
        yield http


# -- signoff wired to the fake Slack and the fake Bot API (tests/support/slack_rig.py, ...) ------
#
# Each folder's conftest.py names its own `start` (slack/, telegram/); the tests beside them
# that drive a chat too (test_confirm.py, test_admission.py) ask for these by name.


@pytest.fixture
async def start_slack(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[slack_rig.Start]:
    """Start signoff servers wired to one fake Slack: `await start_slack(store, **options)`."""
    async with slack_rig.starting(clock, monkeypatch) as start:
        yield start


@pytest.fixture
async def start_telegram(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[telegram_rig.Start]:
    """Start signoff servers wired to one fake Bot API: `await start_telegram(store, notify)`."""
    async with telegram_rig.starting(clock, monkeypatch) as start:
        yield start
