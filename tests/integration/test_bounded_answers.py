"""A chat platform's answer is read no further than a cap: an endpoint that answers
megabytes (a wrong api_base_url, a proxy's error page, a hostile server) fails the call, as
any failed call does, instead of growing the server's memory by its size."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp import web

from bot.card import Card
from bot.chat_memory import ChatMemory
from bot.clock import FakeClock
from bot.delegations import Delegations
from bot.errors import DeliveryFailed
from bot.operator import Operator
from bot.routing import Directory
from bot.target import Target
from channels.answer_cap import ANSWER_LIMIT
from channels.slack.channel import SlackChannel
from channels.slack.config import SlackConfig
from channels.telegram.channel import TelegramChannel
from channels.telegram.config import TelegramConfig
from store.repository import Store
from tests.support.samples import approval_record

HUGE = ANSWER_LIMIT + 1024 * 1024


@pytest.fixture
async def huge_answers() -> AsyncIterator[str]:
    """Answers getMe like Telegram; every other call with more than the cap (chunked, so no
    Content-Length gives it away)."""

    async def answer(request: web.Request) -> web.StreamResponse:
        await request.read()
        if request.path.endswith("/getMe"):
            me = {"id": 1, "is_bot": True, "first_name": "signoff", "username": "signoff_bot"}
            return web.json_response({"ok": True, "result": me})
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(b'{"ok": true, "pad": "')
        for _ in range(HUGE // 65536):
            await response.write(b"x" * 65536)
        await response.write(b'"}')
        return response

    app = web.Application()
    app.router.add_route("POST", "/{tail:.*}", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


def _card(directory: Directory) -> Card:
    return Card.from_approval(approval_record(), datetime(2026, 3, 2, 9, tzinfo=UTC), directory)


def _parts(store: Store, directory: Directory, clock: FakeClock) -> dict[str, Any]:
    return {
        "directory": directory,
        "operator": Operator(store, directory, clock),
        "delegations": Delegations(store, directory, clock),
    }


async def test_slack_answers_past_the_cap_fail_the_call(
    huge_answers: str, store: Store, directory: Directory, clock: FakeClock
) -> None:
    environ = {"SLACK_BOT_TOKEN": "xoxb-test", "SLACK_SIGNING_SECRET": "s"}
    channel = SlackChannel(
        SlackConfig(api_base_url=f"{huge_answers}/api/"),
        **_parts(store, directory, clock),
        memory=ChatMemory(store, clock),
        environ=environ,
    )
    await channel.start()
    try:
        with pytest.raises(DeliveryFailed, match="answered more than"):
            await channel.post_card(_card(directory), Target.parse("slack:C0FINANCE"))
    finally:
        await channel.stop()


async def test_telegram_answers_past_the_cap_fail_the_call(
    huge_answers: str, store: Store, directory: Directory, clock: FakeClock
) -> None:
    environ = {"TELEGRAM_BOT_TOKEN": "1:token", "TELEGRAM_WEBHOOK_SECRET": "secret"}
    channel = TelegramChannel(
        TelegramConfig(api_base_url=f"{huge_answers}/bot"),
        **_parts(store, directory, clock),
        memory=ChatMemory(store, clock),
        environ=environ,
    )
    await channel.start()
    try:
        with pytest.raises(DeliveryFailed, match="answered more than"):
            await channel.post_card(_card(directory), Target.parse("telegram:-100123"))
    finally:
        await channel.stop()
