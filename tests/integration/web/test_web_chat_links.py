"""The web surface seen from the chat surfaces: with [web] configured, Slack and Telegram cards
link to the approval's page ("Open in browser"), and `/signoff web` (Slack) and `/web`
(Telegram) give the verified person who asked a sign-in link, privately, that opens their
inbox.

The card renderers are checked on their own; then one signoff server in this process runs
Slack, Telegram and the web together against the fake Slack and Telegram APIs (real
slack-bolt and python-telegram-bot code, signed and secret-carrying requests over HTTP), on
SQLite and PostgreSQL with a FakeClock: a request decided from the browser updates its Slack
and Telegram cards, which keep the link; the chat commands' links sign in once; a group chat
and an unlinked account get no link.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from bot.card import Card
from bot.clock import FakeClock
from bot.config import parse_config
from channels.slack import card as slack_card
from channels.telegram import card as telegram_card
from store.repository import Store
from tests.fakes import telegram as fake
from tests.fakes.slack import FakeSlack
from tests.fakes.slack_inbound import sign, slash_command_body
from tests.fakes.telegram import FakeTelegram
from tests.support.chat_server import API_KEY, PUBLIC_URL, ChatServer, serve
from tests.support.samples import RECORD_NOW, TEST_CONFIG, approval_record
from tests.support.slack_rig import CHANNEL, texts_in
from tests.support.slack_rig import SECRET as SLACK_SECRET
from tests.support.telegram_rig import ALICE, GROUP, STRANGER, TOKEN
from tests.support.telegram_rig import SECRET as TELEGRAM_SECRET
from tests.support.web_browser import Browser

_ids = itertools.count(900_000)
_LINK = re.compile(r"http://signoff\.example\.com/web/login/[A-Za-z0-9_-]+")


# -- the renderers ---------------------------------------------------------------------------------


def _card(**changes: Any) -> Card:
    return Card.from_approval(approval_record(**changes), RECORD_NOW)


def test_slack_cards_link_to_the_page_only_when_given_its_url() -> None:
    url = f"{PUBLIC_URL}/web/approvals/{approval_record().id}"
    for card in (_card(), _card(state="approved", decided_by="alice", decided_at=RECORD_NOW)):
        assert f"<{url}|Open in browser>" in texts_in(slack_card.blocks(card, url), "mrkdwn")
        assert not any("Open in browser" in t for t in texts_in(slack_card.blocks(card), "mrkdwn"))
    # Our own URL still goes through mrkdwn escaping.
    odd = slack_card.blocks(_card(), "http://x.example/a?b=1&c=<2>")
    assert "<http://x.example/a?b=1&amp;c=&lt;2&gt;|Open in browser>" in texts_in(odd, "mrkdwn")


def test_telegram_cards_link_to_the_page_above_the_hash() -> None:
    url = f"{PUBLIC_URL}/web/approvals/{approval_record().id}"
    text = telegram_card.html(_card(), url)
    lines = text.splitlines()
    assert lines[-1] == "<code>sha256:3f3f3f3f3f3f</code>"
    assert f'<a href="{url}">Open in browser</a>' in lines
    assert "Open in browser" not in telegram_card.html(_card())
    quoted = telegram_card.html(_card(), 'http://x.example/"><b>')
    assert '<a href="http://x.example/&quot;&gt;&lt;b&gt;">' in quoted


# -- Slack, Telegram and the web in one server -------------------------------------------------


@dataclass
class Rig(ChatServer):
    slack: FakeSlack
    tg: FakeTelegram
    browsers: list[Browser] = field(default_factory=list)

    def browser(self) -> Browser:
        browser = Browser(self.url)
        self.browsers.append(browser)
        return browser

    async def slash(self, user_id: str, text: str) -> str:
        """`/signoff TEXT` by `user_id`: what Slack shows them (the command's response)."""
        return str((await self.slash_response(user_id, text))["text"])

    async def slash_response(self, user_id: str, text: str) -> dict[str, Any]:
        """The command's whole response: a JSON message, or plain text (Slack's shorthand
        for {"text": ...}, shown to the caller alone)."""
        body = slash_command_body(user_id, text, channel_id=CHANNEL)
        headers = {"Content-Type": "application/x-www-form-urlencoded"} | sign(SLACK_SECRET, body)
        async with self.http.post(f"{self.url}/slack/events", data=body, headers=headers) as r:
            assert r.status == 200
            answer = await r.text()
        if r.content_type == "application/json":
            return dict(json.loads(answer))
        return {"text": answer}

    async def telegram(self, who: dict[str, Any], text: str, chat: dict[str, Any]) -> str:
        """`text` sent by `who` in `chat`; the bot's answer there."""
        update = fake.text_message(
            next(_ids), chat=chat, from_user=who, text=text, message_id=next(_ids)
        )
        headers = fake.webhook_headers(TELEGRAM_SECRET)
        async with self.http.post(
            f"{self.url}/telegram/webhook", json=update, headers=headers
        ) as response:
            assert response.status == 200
        answer = self.tg.calls_to("sendMessage", ok=True)[-1]
        assert answer.args["chat_id"] == chat["id"]
        return str(answer.args["text"])

    async def signs_in_as(self, link: str, name: str) -> Browser:
        browser = self.browser()
        inbox = await browser.sign_in(link)
        assert inbox.status == 200, inbox.html
        assert name in inbox.doc.find(classes="who").text
        return browser


Start = Callable[[Store], Awaitable[Rig]]


@pytest.fixture
async def rig(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Rig]:
    for name, value in {
        "SLACK_BOT_TOKEN": "xoxb-test",
        "SLACK_SIGNING_SECRET": SLACK_SECRET,
        "TELEGRAM_BOT_TOKEN": TOKEN,
        "TELEGRAM_WEBHOOK_SECRET": TELEGRAM_SECRET,
        "SIGNOFF_WEB_SECRET": "s" * 40,
        "LINKS_TEST_API_KEY": API_KEY,
    }.items():
        monkeypatch.setenv(name, value)
    cleanup: list[Callable[[], Awaitable[None]]] = []
    async with FakeSlack() as slack, FakeTelegram(TOKEN) as tg:
        data = copy.deepcopy(TEST_CONFIG)
        data["server"] = {"public_url": PUBLIC_URL}
        data["web"] = {}
        data["slack"] = {"api_base_url": slack.base_url}
        data["telegram"] = {"api_base_url": tg.base_url}
        data["tenants"][0]["api_key_env"] = "LINKS_TEST_API_KEY"
        data["routes"][0]["notify"] = [f"slack:{CHANNEL}", f"telegram:{GROUP}", "web"]
        config = parse_config(data)
        rig = await serve(Rig, config, store, clock, API_KEY, cleanup, slack=slack, tg=tg)
        yield rig
        for browser in rig.browsers:
            await browser.http.close()
        for close in reversed(cleanup):
            await close()


async def test_chat_cards_open_the_page_where_a_decision_updates_them(rig: Rig) -> None:
    record = await rig.create()
    await rig.drain()
    page_url = f"{PUBLIC_URL}/web/approvals/{record['id']}"
    [posted] = rig.slack.calls_to("chat.postMessage", ok=True)
    assert f"<{page_url}|Open in browser>" in texts_in(posted.args["blocks"], "mrkdwn")
    async with rig.store.read() as tx:
        messages = {m.channel: m for m in await tx.card_messages_for(record["id"])}
    assert sorted(messages) == ["slack", "telegram", "web"]
    telegram_id = int(messages["telegram"].message_id)
    card = rig.tg.message(GROUP, telegram_id)
    assert card is not None
    links = [e["url"] for e in card.get("entities", []) if e["type"] == "text_link"]
    assert links == [page_url]  # Telegram accepted the link as a link

    alice = await rig.signs_in_as(_LINK.search(await rig.slash("U0ALICE", "web"))[0], "Alice Ng")
    page = await alice.get(links[0])
    assert (await alice.decide(page, "approve")).status == 303
    await rig.drain()

    [updated] = rig.slack.calls_to("chat.update", ok=True)
    texts = texts_in(updated.args["blocks"], "mrkdwn")
    assert any("Approved" in t and "Alice Ng" in t for t in texts)
    assert f"<{page_url}|Open in browser>" in texts
    edited = rig.tg.message(GROUP, telegram_id)
    assert edited is not None and "Approved by Alice Ng" in edited["text"]
    assert "reply_markup" not in edited or not edited["reply_markup"]
    assert [e["url"] for e in edited.get("entities", []) if e["type"] == "text_link"] == [page_url]


async def test_slash_signoff_web_answers_the_caller_with_a_link_that_signs_in_once(
    rig: Rig,
) -> None:
    response = await rig.slash_response("U0BOB", "web")
    # Shown to the caller alone, and never unfurled (a preview would use the link up).
    assert response["response_type"] == "ephemeral"
    assert (response["unfurl_links"], response["unfurl_media"]) == (False, False)
    said = response["text"]
    assert "Your sign-in link for the signoff inbox, as Bob Stone" in said
    link = _LINK.search(said)
    assert link is not None
    # Only in the command's response, which Slack shows to the caller alone: nothing posted.
    assert rig.slack.calls_to("chat.postMessage") == []
    assert rig.slack.calls_to("chat.postEphemeral") == []
    await rig.signs_in_as(link[0], "Bob Stone")
    again = await rig.browser().sign_in(link[0])
    assert again.status == 410 and "already used" in again.alert

    refused = await rig.slash("U0NOBODY", "web")
    assert "Your Slack account (U0NOBODY) is not linked to a signoff principal" in refused
    assert _LINK.search(refused) is None
    assert "/signoff web" in await rig.slash("U0BOB", "help")


async def test_telegram_web_sends_a_link_only_in_a_private_chat(rig: Rig) -> None:
    said = await rig.telegram(ALICE, "/web", fake.private_chat(ALICE))
    sent = rig.tg.calls_to("sendMessage", ok=True)[-1]
    # No preview: Telegram's servers fetching the link would use it up.
    assert sent.args["link_preview_options"]["is_disabled"] is True
    link = _LINK.search(said)
    assert link is not None and "as Alice Ng" in said
    await rig.signs_in_as(link[0], "Alice Ng")

    group = fake.group_chat(GROUP)
    rig.tg.add_chat(group)
    in_group = await rig.telegram(ALICE, "/web", group)
    assert _LINK.search(in_group) is None
    assert "only in a private chat" in in_group and "message me directly" in in_group

    stranger = await rig.telegram(STRANGER, "/web", fake.private_chat(STRANGER))
    assert _LINK.search(stranger) is None
    assert "Your Telegram account (999) is not linked to a signoff principal" in stranger
    assert "/web sends a sign-in link" in await rig.telegram(
        ALICE, "/start", fake.private_chat(ALICE)
    )
