"""Reminders before expiry, end to end on both databases with a FakeClock: real slack-sdk /
slack-bolt and python-telegram-bot code against the fake APIs.

Proves: a route's `remind_before` nudges the assignees once, that long before the request
expires, judged by the sweeper on the injected clock: nothing before the moment; at it, the
sweeper queues the reminder, and the outbox sends a reply in the Slack card's thread (and
a reply to the Telegram card) plus a direct message to each assignee with an account there,
naming the deadline. Never a second card, never a second reminder (a second sweep, two
sweepers racing); a request decided first gets none; `remind_before` must be shorter than
`approval_ttl`.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest

from bot.clock import FakeClock
from bot.config import parse_config
from bot.errors import ConfigError
from bot.sweeper import Sweeper
from store.repository import Store
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram
from tests.support.chat_server import API_KEY, ChatServer, serve
from tests.support.samples import TEST_CONFIG
from tests.support.slack_rig import CHANNEL
from tests.support.slack_rig import SECRET as SLACK_SECRET
from tests.support.telegram_rig import GROUP, TOKEN
from tests.support.telegram_rig import SECRET as TELEGRAM_SECRET


@dataclass
class Rig(ChatServer):
    slack: FakeSlack
    tg: FakeTelegram

    def sweeper(self) -> Sweeper:
        return Sweeper(self.store, self.directory, self.clock)

    async def reminder_jobs(self, approval_id: str) -> list[Any]:
        async with self.store.read() as tx:
            return [
                j for j in await tx.outbox_jobs(approval_id=approval_id) if j.kind == "reminder"
            ]


def _config(slack: FakeSlack, tg: FakeTelegram, notify: list[str] | None) -> dict[str, Any]:
    config = copy.deepcopy(TEST_CONFIG)
    config["tenants"][0]["api_key_env"] = "REMINDER_TEST_API_KEY"
    config["slack"] = {"api_base_url": slack.base_url}
    config["telegram"] = {"api_base_url": tg.base_url}
    route = config["routes"][0]  # payments.*: group finance (alice, bob, sam)
    route["notify"] = notify or [f"slack:{CHANNEL}", f"telegram:{GROUP}"]
    route["approval_ttl"] = "24h"
    route["remind_before"] = "4h"
    route["escalation"] = []
    return config


Start = Callable[..., Awaitable[Rig]]


@pytest.fixture
async def start(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Start]:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-test")
    monkeypatch.setenv("SLACK_SIGNING_SECRET", SLACK_SECRET)
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TOKEN)
    monkeypatch.setenv("TELEGRAM_WEBHOOK_SECRET", TELEGRAM_SECRET)
    monkeypatch.setenv("REMINDER_TEST_API_KEY", API_KEY)
    cleanup: list[Callable[[], Awaitable[None]]] = []
    async with FakeSlack() as slack, FakeTelegram(TOKEN) as tg:

        async def one(notify: list[str] | None = None) -> Rig:
            config = parse_config(_config(slack, tg, notify))
            return await serve(Rig, config, store, clock, API_KEY, cleanup, slack=slack, tg=tg)

        yield one
        for close in reversed(cleanup):
            await close()


@pytest.fixture
async def rig(start: Start) -> Rig:
    return await start()


async def test_the_assignees_are_reminded_once_in_the_cards_threads_and_by_dm(rig: Rig) -> None:
    record = await rig.create()
    await rig.drain()
    [slack_card] = rig.slack.calls_to("chat.postMessage", ok=True)
    [tg_card] = rig.tg.calls_to("sendMessage", ok=True)
    async with rig.store.read() as tx:
        cards = {m.channel: m for m in await tx.card_messages_for(record["id"])}

    rig.clock.advance(timedelta(hours=19, minutes=59))
    assert (await rig.sweeper().sweep()).reminded == 0
    assert await rig.reminder_jobs(record["id"]) == []

    rig.clock.advance(timedelta(minutes=1))  # 20 h in: 4 h before the deadline
    assert (await rig.sweeper().sweep()).reminded == 1
    await rig.drain()

    # Slack: one reply in the card's thread, one DM each to alice and bob (sam has no
    # account); no second card.
    posts = rig.slack.calls_to("chat.postMessage", ok=True)
    assert [p for p in posts if p.args.get("blocks")] == [slack_card]
    [thread] = [p for p in posts if p.args.get("thread_ts")]
    assert (thread.args["channel"], thread.args["thread_ts"]) == (
        CHANNEL,
        cards["slack"].message_id,
    )
    expires = datetime.fromisoformat(record["expires_at"].replace("Z", "+00:00"))
    deadline = f"expires at {expires:%Y-%m-%d %H:%M} UTC (in 4 h)"
    assert "Reminder" in thread.args["text"] and "group finance" in thread.args["text"]
    assert deadline in thread.args["text"]
    opened = sorted(c.args["users"] for c in rig.slack.calls_to("conversations.open", ok=True))
    assert opened == ["U0ALICE", "U0BOB"]
    dms = [p for p in posts if p is not slack_card and p is not thread]
    assert len(dms) == 2
    for dm in dms:
        assert "Refund €120.00 to Zoë" in dm.args["text"] and deadline in dm.args["text"]

    # Telegram: a reply to the card in the group, and a DM each to alice (111) and bob (222).
    sent = rig.tg.calls_to("sendMessage", ok=True)
    assert [s for s in sent if "reply_markup" in s.args] == [tg_card]
    [reply] = [s for s in sent if s.args.get("reply_parameters")]
    assert reply.args["chat_id"] == GROUP
    assert str(cards["telegram"].message_id) in str(reply.args["reply_parameters"])
    assert deadline in reply.args["text"]
    assert sorted(s.args["chat_id"] for s in sent if s not in (tg_card, reply)) == [111, 222]

    # Once: a later sweep, and the outbox again, send nothing more.
    before = (len(rig.slack.calls), len(rig.tg.calls))
    rig.clock.advance(timedelta(hours=1))
    assert (await rig.sweeper().sweep()).reminded == 0
    await rig.drain()
    assert (len(rig.slack.calls), len(rig.tg.calls)) == before
    assert (await rig.state(record["id"])).state == "pending"


async def test_two_sweepers_racing_remind_once(rig: Rig) -> None:
    record = await rig.create()
    await rig.drain()
    rig.clock.advance(timedelta(hours=20))
    reports = await asyncio.gather(*(rig.sweeper().sweep() for _ in range(4)))
    assert sum(r.reminded for r in reports) == 1
    jobs = await rig.reminder_jobs(record["id"])
    # Two card replies (Slack, Telegram), two DMs on each surface.
    assert len(jobs) == 6


async def test_a_request_decided_before_its_reminder_gets_none(rig: Rig) -> None:
    record = await rig.create()
    await rig.drain()
    rig.clock.advance(timedelta(hours=20))
    assert (await rig.sweeper().sweep()).reminded == 1
    # Cancelled before the outbox ran: the queued reminders go out as nothing.
    async with rig.store.write() as tx:
        row = await tx.lock_approval(record["id"])
        assert row is not None
        await tx.update_approval(
            row.id,
            expect_states=["pending"],
            expect_version=row.version,
            values={"state": "cancelled"},
        )
    before = (len(rig.slack.calls), len(rig.tg.calls))
    await rig.drain()
    assert (len(rig.slack.calls), len(rig.tg.calls)) == before
    assert {j.state for j in await rig.reminder_jobs(record["id"])} == {"done"}


async def test_a_request_whose_ttl_is_shorter_than_remind_before_is_not_reminded(
    rig: Rig,
) -> None:
    record = await rig.create(approval_ttl="3h")
    rig.clock.advance(timedelta(hours=2, minutes=59))
    assert (await rig.sweeper().sweep()).reminded == 0
    assert await rig.reminder_jobs(record["id"]) == []


async def test_a_card_in_direct_messages_gets_the_reply_there_and_no_second_message(
    start: Start,
) -> None:
    rig = await start(["slack:dm", "telegram:dm"])
    record = await rig.create()
    await rig.drain()
    slack_cards = rig.slack.calls_to("chat.postMessage", ok=True)
    tg_cards = rig.tg.calls_to("sendMessage", ok=True)
    assert len(slack_cards) == len(tg_cards) == 2  # alice and bob; sam has no account
    rig.clock.advance(timedelta(hours=20))
    assert (await rig.sweeper().sweep()).reminded == 1
    await rig.drain()
    replies = rig.slack.calls_to("chat.postMessage", ok=True)[2:]
    assert sorted(r.args["thread_ts"] for r in replies) == sorted(
        c.response["ts"]  # type: ignore[index]
        for c in slack_cards
    )
    tg_replies = rig.tg.calls_to("sendMessage", ok=True)[2:]
    assert sorted(r.args["chat_id"] for r in tg_replies) == [111, 222]
    assert all(r.args.get("reply_parameters") for r in tg_replies)
    assert len(await rig.reminder_jobs(record["id"])) == 4


def test_remind_before_must_be_shorter_than_approval_ttl() -> None:
    config = copy.deepcopy(TEST_CONFIG)
    config["routes"][0] |= {"approval_ttl": "4h", "remind_before": "4h"}
    with pytest.raises((ConfigError, ValueError), match="remind_before"):
        parse_config(config)
