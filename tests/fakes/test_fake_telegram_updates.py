"""The fake Telegram against the real python-telegram-bot: updates by getUpdates and its long
polls, webhooks, and the fake on a thread of its own for plain HTTP clients."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from telegram import Bot, MessageEntity, Update
from telegram.error import BadRequest, Conflict

from tests.fakes.telegram import (
    RAW_TEXT,
    SECRET_HEADER,
    FakeTelegram,
    callback_query,
    group_chat,
    private_chat,
    text_message,
    webhook_body,
    webhook_headers,
)
from tests.support.telegram_samples import ALICE, KEYBOARD


async def test_get_updates_answers_pushed_updates_as_ptb_parses_them(
    tg: FakeTelegram, bot: Bot
) -> None:
    card = await bot.send_message(111, "<b>Refund?</b>", parse_mode="HTML", reply_markup=KEYBOARD)
    shown = tg.message(111, card.message_id)
    assert shown is not None
    first = tg.push_update(
        text_message(
            tg.next_update_id(),
            chat=private_chat(ALICE),
            from_user=ALICE,
            text="because the customer asked twice",
            message_id=tg.next_message_id(111),
            reply_to=shown,
        )
    )
    assert RAW_TEXT not in first["message"]["reply_to_message"]
    tg.push_update(
        callback_query(tg.next_update_id(), from_user=ALICE, message=shown, data="approve:req-1")
    )
    tg.push_update(
        text_message(
            tg.next_update_id(),
            chat=private_chat(ALICE),
            from_user=ALICE,
            text="/start",
            message_id=tg.next_message_id(111),
        )
    )

    updates = await bot.get_updates(limit=2)
    assert len(updates) == 2 and all(isinstance(u, Update) for u in updates)
    reply, click = updates
    assert reply.message is not None and reply.message.reply_to_message is not None
    assert reply.message.reply_to_message.message_id == card.message_id
    assert reply.message.reply_to_message.text == "Refund?"
    assert reply.message.from_user is not None and reply.message.from_user.id == 111
    assert reply.message.message_id == card.message_id + 1
    assert click.callback_query is not None
    assert click.callback_query.data == "approve:req-1"
    assert click.callback_query.from_user.id == 111
    assert click.callback_query.message is not None
    assert click.callback_query.message.message_id == card.message_id
    assert await click.callback_query.answer("Approved")  # PTB answers through the fake
    assert tg.callback_answer(click.callback_query.id) is not None

    # The same updates again until confirmed by a higher offset.
    again = await bot.get_updates(offset=click.update_id)
    assert [u.update_id for u in again] == [click.update_id, click.update_id + 1]
    last = (await bot.get_updates(offset=click.update_id + 1))[0]
    assert last.message is not None and last.message.text == "/start"
    assert last.message.entities == (MessageEntity(MessageEntity.BOT_COMMAND, 0, 6),)
    assert await bot.get_updates(offset=last.update_id + 1) == ()
    assert tg.pending_updates == []
    # A message the user sent is kept, so the bot can reply to it.
    assert tg.message(111, last.message.message_id) is not None
    answer = await bot.send_message(111, "hello", reply_to_message_id=last.message.message_id)
    assert answer.reply_to_message is not None and answer.reply_to_message.text == "/start"

    # The builders' output is what Update.de_json accepts, unchanged.
    group = group_chat(-1001, "Finance")
    raw = text_message(5, chat=group, from_user=ALICE, text="hi @signoff_test_bot", message_id=9)
    parsed = Update.de_json(raw, bot)
    assert parsed.message is not None and parsed.message.chat.title == "Finance"
    assert parsed.message.entities[0].type == MessageEntity.MENTION
    assert parsed.message.api_kwargs == {}


async def test_get_updates_long_polls(tg: FakeTelegram, bot: Bot) -> None:
    async def push_soon() -> None:
        await asyncio.sleep(0.05)
        tg.push_update(
            text_message(
                tg.next_update_id(),
                chat=private_chat(ALICE),
                from_user=ALICE,
                text="hi",
                message_id=1,
            )
        )

    pusher = asyncio.create_task(push_soon())
    woken = await bot.get_updates(timeout=10)
    await pusher
    assert len(woken) == 1  # woken by the push, not ended empty by the 0.2 s cap
    started = time.monotonic()
    assert await bot.get_updates(offset=woken[0].update_id + 1, timeout=10) == ()
    assert 0.15 < time.monotonic() - started < 5  # capped at long_poll_cap (0.2 s here)


async def test_a_second_long_poll_ends_the_first(bot: Bot) -> None:
    """As a second bot instance would; and setWebhook ends a poll too. The polls here may
    wait up to 5 s, so a slow machine cannot end them by timeout first."""
    async with FakeTelegram(long_poll_cap=5.0) as tg, aiohttp.ClientSession() as http:
        url = tg.api_url + "/getUpdates"
        older = asyncio.create_task(http.post(url, data={"timeout": "5"}))
        await asyncio.sleep(0.2)  # the long poll is waiting (it would wait 5 s)
        newer = await http.post(url, data={"timeout": "0"})
        assert (await newer.json())["result"] == []  # an immediate answer ends nothing
        newest = asyncio.create_task(http.post(url, data={"timeout": "5"}))
        ended = await older
        assert ended.status == 409
        assert (await ended.json())["description"] == (
            "Conflict: terminated by other getUpdates request; make sure that only one bot "
            "instance is running"
        )
        await asyncio.sleep(0.2)  # the newest poll is waiting
        async with Bot(tg.token, base_url=tg.base_url) as other:
            assert await other.set_webhook("https://bot.example.com/hook")
        ended = await newest
        assert (await ended.json())["description"] == "Conflict: terminated by setWebhook request"
        assert tg.calls_to("getUpdates", ok=False)[0].status == 409


async def test_webhooks(tg: FakeTelegram, bot: Bot) -> None:
    received: list[tuple[dict[str, str], bytes]] = []
    answers: list[web.Response] = []

    async def hook(request: web.Request) -> web.Response:
        received.append((dict(request.headers), await request.read()))
        return answers.pop(0) if answers else web.Response()

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    hook_url = f"http://127.0.0.1:{runner.addresses[0][1]}/hook"
    try:
        with pytest.raises(BadRequest) as bad_secret:
            await bot.set_webhook(hook_url, secret_token="has space")
        assert bad_secret.value.message == "Secret token contains unallowed characters"
        with pytest.raises(BadRequest, match="Secret token is too long"):
            await bot.set_webhook(hook_url, secret_token="s" * 257)
        with pytest.raises(RuntimeError, match="no webhook"):
            await tg.deliver({"update_id": 1})

        assert await bot.set_webhook(
            hook_url,
            secret_token="s3cr3t_-TOKEN",
            allowed_updates=["message", "callback_query"],
            max_connections=5,
        )
        call = tg.calls_to("setWebhook")[-1]
        assert call.args["allowed_updates"] == ["message", "callback_query"]
        assert call.response is not None and call.response["description"] == "Webhook was set"
        assert await bot.set_webhook(
            hook_url,
            secret_token="s3cr3t_-TOKEN",
            allowed_updates=["message", "callback_query"],
            max_connections=5,
        )
        assert tg.calls_to("setWebhook")[-1].response["description"] == "Webhook is already set"  # type: ignore[index]
        assert tg.webhook is not None and tg.webhook["secret_token"] == "s3cr3t_-TOKEN"

        info = await bot.get_webhook_info()
        assert info.url == hook_url and info.pending_update_count == 0
        assert info.max_connections == 5 and info.ip_address == "127.0.0.1"
        assert info.allowed_updates == ("message", "callback_query")
        with pytest.raises(Conflict) as conflict:
            await bot.get_updates()
        assert conflict.value.message == (
            "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to "
            "delete the webhook first"
        )

        update = text_message(
            tg.next_update_id(), chat=private_chat(ALICE), from_user=ALICE, text="Zoë", message_id=1
        )
        assert await tg.deliver(update) == 200
        headers, body = received[-1]
        assert headers[SECRET_HEADER] == "s3cr3t_-TOKEN"
        assert headers["Content-Type"] == "application/json"
        assert json.loads(body) == update and "Zoë".encode() in body
        assert body == webhook_body(update)
        assert webhook_headers("s3cr3t_-TOKEN") == {
            "Content-Type": "application/json",
            SECRET_HEADER: "s3cr3t_-TOKEN",
        }
        assert webhook_headers(None) == {"Content-Type": "application/json"}

        # Telegram executes a method given as the webhook's answer.
        answers.append(web.json_response({"method": "sendMessage", "chat_id": 111, "text": "ok"}))
        assert await tg.deliver(update) == 200
        assert tg.calls_to("sendMessage")[-1].args == {"chat_id": 111, "text": "ok"}

        answers.append(web.Response(status=500))
        assert await tg.deliver(update) == 500
        info = await bot.get_webhook_info()
        assert (
            info.last_error_message == "Wrong response from the webhook: 500 Internal Server Error"
        )
        assert info.last_error_date is not None

        assert await bot.delete_webhook(drop_pending_updates=True)
        assert tg.calls_to("deleteWebhook")[-1].response["description"] == "Webhook was deleted"  # type: ignore[index]
        assert tg.webhook is None and await bot.get_updates() == ()
    finally:
        await runner.cleanup()

    # Updates of types left out by allowed_updates are never queued.
    tg.push_update({"update_id": 1, "message_reaction": {}})
    assert tg.pending_updates == []


def test_in_thread_serves_plain_http_clients() -> None:
    with FakeTelegram.in_thread() as tg:
        with urllib.request.urlopen(tg.api_url + "/getMe", timeout=5) as resp:
            me = json.load(resp)
        assert me["ok"] is True
        assert me["result"] == {
            "id": 123456,
            "is_bot": True,
            "first_name": "Signoff",
            "username": "signoff_test_bot",
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
            "can_connect_to_business": False,
            "has_main_web_app": False,
        }
        form = urllib.parse.urlencode({"chat_id": 111, "text": "<i>hi</i>", "parse_mode": "HTML"})
        with urllib.request.urlopen(tg.api_url + "/sendMessage", form.encode(), timeout=5) as resp:
            sent = json.load(resp)["result"]
        assert sent["entities"] == [{"offset": 0, "length": 2, "type": "italic"}]
        call = tg.wait_for_sync("sendMessage", timeout=2)
        assert call.args["parse_mode"] == "HTML"
        with pytest.raises(TimeoutError):
            tg.wait_for_sync("editMessageText", timeout=0.05)

        # A webhook served by a plain thread gets updates from deliver_sync.
        seen: list[tuple[str | None, bytes]] = []

        class Hook(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                seen.append((self.headers[SECRET_HEADER], self.rfile.read(length)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            hook = f"http://127.0.0.1:{server.server_port}/hook"
            form = urllib.parse.urlencode({"url": hook, "secret_token": "abc"}).encode()
            with urllib.request.urlopen(tg.api_url + "/setWebhook", form, timeout=5) as resp:
                assert json.load(resp)["description"] == "Webhook was set"
            update = callback_query(
                tg.next_update_id(),
                from_user=ALICE,
                message=tg.message(111, sent["message_id"]) or {},
                data="approve:req-1",
            )
            assert tg.deliver_sync(update) == 200
            assert seen == [("abc", webhook_body(update))]
        finally:
            server.shutdown()
            server.server_close()
