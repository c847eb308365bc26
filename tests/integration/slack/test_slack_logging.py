"""slack-sdk's own log lines: signoff gives its logger the level logging was set up with
when the channel starts (with its level unset, slack-sdk built every debug line of every
call, seen or not), so an operator who asks for DEBUG still gets them."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest

from bot.card import Card
from bot.chat_memory import ChatMemory
from bot.clock import FakeClock
from bot.delegations import Delegations
from bot.operator import Operator
from bot.routing import Directory
from bot.target import Target
from channels.slack.channel import SlackChannel
from channels.slack.config import SlackConfig
from store.repository import Store
from tests.fakes.slack import FakeSlack
from tests.support.samples import approval_record


def _channel(store: Store, directory: Directory, clock: FakeClock, base_url: str) -> SlackChannel:
    return SlackChannel(
        SlackConfig(api_base_url=base_url),
        directory=directory,
        operator=Operator(store, directory, clock),
        delegations=Delegations(store, directory, clock),
        memory=ChatMemory(store, clock),
        environ={"SLACK_BOT_TOKEN": "xoxb-test", "SLACK_SIGNING_SECRET": "s"},
    )


async def test_at_info_slack_sdk_builds_no_debug_line_while_the_channel_runs(
    store: Store, directory: Directory, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="slack_sdk")
    async with FakeSlack() as slack:
        channel = _channel(store, directory, clock, slack.base_url)
        await channel.start()
        try:
            # slack-sdk builds its debug lines when this level is DEBUG or lower (0, unset).
            assert channel.client.logger.level == logging.INFO
        finally:
            await channel.stop()


async def test_slack_sdk_request_lines_are_logged_when_debug_is_asked_for(
    store: Store, directory: Directory, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="slack_sdk")
    card = Card.from_approval(approval_record(), datetime(2026, 3, 2, 9, tzinfo=UTC), directory)
    async with FakeSlack() as slack:
        channel = _channel(store, directory, clock, slack.base_url)
        await channel.start()
        try:
            await channel.post_card(card, Target.parse("slack:C0FINANCE"))
        finally:
            await channel.stop()
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("slack_sdk")]
    sent = [line for line in lines if line.startswith("Sending a request")]
    assert any("chat.postMessage" in line for line in sent)
    assert channel.client.logger.level == logging.NOTSET  # given back at stop
