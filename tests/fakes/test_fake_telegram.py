"""The fake Telegram against the real python-telegram-bot: wire format, parsing, errors, updates."""

from __future__ import annotations

import asyncio
import datetime as dtm
import json
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import aiohttp
import pytest
import telegram
from aiohttp import web
from telegram import (
    Bot,
    ForceReply,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    MessageEntity,
    ReplyParameters,
    Update,
)
from telegram.error import (
    BadRequest,
    Conflict,
    EndPointNotFound,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
)
from telegram.warnings import PTBDeprecationWarning

from tests.fakes.telegram import (
    RAW_TEXT,
    SECRET_HEADER,
    FakeTelegram,
    callback_query,
    group_chat,
    private_chat,
    text_message,
    user,
    webhook_body,
    webhook_headers,
)

ALICE = user(111, "Alice", username="alice_ng")
KEYBOARD = InlineKeyboardMarkup(
    [
        [
            InlineKeyboardButton("Approve", callback_data="approve:req-1"),
            InlineKeyboardButton("Open", url="https://example.com"),
        ]
    ]
)


@pytest.fixture
async def tg() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram(long_poll_cap=0.2) as fake:
        yield fake


@pytest.fixture
async def bot(tg: FakeTelegram) -> AsyncIterator[Bot]:
    async with Bot(tg.token, base_url=tg.base_url) as real:
        yield real


async def test_send_message_parses_html_and_echoes_only_inline_keyboards(
    tg: FakeTelegram, bot: Bot
) -> None:
    assert tg.calls_to("getMe", ok=True)  # Bot.initialize asks getMe
    assert (bot.id, bot.username) == (123456, "signoff_test_bot")

    html = "<b>Refund €120</b> to Zoë &amp; co 😀 <i>now</i>"
    sent = await bot.send_message(111, html, parse_mode="HTML", reply_markup=KEYBOARD)
    assert isinstance(sent, telegram.Message)
    assert sent.text == "Refund €120 to Zoë & co 😀 now"
    # Offsets are UTF-16 code units: the emoji counts two.
    assert sent.entities == (
        MessageEntity(MessageEntity.BOLD, 0, 11),
        MessageEntity(MessageEntity.ITALIC, 27, 3),
    )
    assert sent.parse_entity(sent.entities[1]) == "now"
    assert sent.from_user is not None and sent.from_user.id == bot.id and sent.from_user.is_bot
    assert (sent.chat.id, sent.chat.type) == (111, "private")
    assert sent.reply_markup is not None
    approve, link = sent.reply_markup.inline_keyboard[0]
    assert approve.callback_data == "approve:req-1"
    assert link.url == "https://example.com/"  # Telegram normalizes URLs

    call = tg.calls_to("sendMessage")[0]
    assert call.args["chat_id"] == 111  # form-encoded "111", recorded typed
    assert call.args["parse_mode"] == "HTML"
    assert call.args["reply_markup"]["inline_keyboard"][0][0]["callback_data"] == "approve:req-1"
    stored = tg.message(111, sent.message_id)
    assert stored is not None and stored[RAW_TEXT] == html
    assert stored["text"] == sent.text

    # ForceReply is accepted and not echoed; a legacy reply_to_message_id becomes a reply.
    asked = await bot.send_message(
        111,
        "Why?",
        reply_to_message_id=sent.message_id,
        reply_markup=ForceReply(input_field_placeholder="Reason"),
    )
    assert asked.reply_markup is None
    assert asked.reply_to_message is not None
    assert asked.reply_to_message.message_id == sent.message_id
    assert asked.reply_to_message.text == sent.text
    assert asked.message_id == sent.message_id + 1
    assert tg.calls_to("sendMessage")[1].args["reply_parameters"] == {"message_id": sent.message_id}
    assert tg.calls_to("sendMessage")[1].args["reply_markup"]["force_reply"] is True

    in_group = await bot.send_message(-1001234567890, "hi")
    assert (in_group.chat.type, in_group.message_id) == ("supergroup", 1)
    assert [m["message_id"] for m in tg.messages_in(111)] == [1, 2]


@pytest.mark.parametrize(
    ("html", "text", "entities"),
    [
        ("a & b > c", "a & b > c", []),  # Telegram keeps a bare & or > as text
        ("&lt;b&gt; &#x1F600;&#33;", "<b> 😀!", []),
        (
            '<a href="https://example.com">site</a> <s>old</s> <u>new</u>',
            "site old new",
            [
                {"offset": 0, "length": 4, "type": "text_link", "url": "https://example.com/"},
                {"offset": 5, "length": 3, "type": "strikethrough"},
                {"offset": 9, "length": 3, "type": "underline"},
            ],
        ),
        (
            '<pre><code class="language-python">x = 1</code></pre>',
            "x = 1",
            [{"offset": 0, "length": 5, "type": "pre", "language": "python"}],
        ),
        (
            '<span class="tg-spoiler">s</span><tg-spoiler>t</tg-spoiler>',
            "st",
            [{"offset": 0, "length": 2, "type": "spoiler"}],  # adjacent ones merge
        ),
        (
            "<b>a <code>c</code> d</b>",
            "a c d",
            [
                {"offset": 0, "length": 2, "type": "bold"},
                {"offset": 2, "length": 1, "type": "code"},
                {"offset": 3, "length": 2, "type": "bold"},
            ],
        ),
        (
            "<blockquote expandable>quote</blockquote>",
            "quote",
            [{"offset": 0, "length": 5, "type": "expandable_blockquote"}],
        ),
        ("  <b>x</b> \n ", "x", [{"offset": 0, "length": 1, "type": "bold"}]),
        (
            "/start see https://example.com/a, @alice_ng",
            "/start see https://example.com/a, @alice_ng",
            [
                {"offset": 0, "length": 6, "type": "bot_command"},
                {"offset": 11, "length": 21, "type": "url"},
                {"offset": 34, "length": 9, "type": "mention"},
            ],
        ),
    ],
)
async def test_html_is_parsed_as_telegram_parses_it(
    tg: FakeTelegram, bot: Bot, html: str, text: str, entities: list[dict[str, Any]]
) -> None:
    sent = await bot.send_message(111, html, parse_mode="HTML")
    assert sent.text == text
    answered = tg.calls_to("sendMessage")[-1].response
    assert answered is not None
    assert answered["result"].get("entities", []) == entities


@pytest.mark.parametrize(
    ("html", "description"),
    [
        ("<b>unclosed", 'Can\'t find end tag corresponding to start tag "b"'),
        ("1 < 2", 'Unsupported start tag "" at byte offset 2'),
        ("<script>x</script>", 'Unsupported start tag "script" at byte offset 0'),
        ("€ <x>y</x>", 'Unsupported start tag "x" at byte offset 4'),  # bytes, not characters
        ("<b><i>t</b></i>", 'Unmatched end tag at byte offset 7, expected "</i>", found "</b>"'),
        ("x</b>", "Unexpected end tag at byte offset 1"),
        ('<span class="x">y</span>', 'Tag "span" must have class "tg-spoiler" at byte offset 0'),
    ],
)
async def test_bad_html_is_refused_with_telegrams_words(
    tg: FakeTelegram, bot: Bot, html: str, description: str
) -> None:
    with pytest.raises(BadRequest) as refused:
        await bot.send_message(111, html, parse_mode="HTML")
    call = tg.calls_to("sendMessage")[-1]
    assert (call.status, call.error) == (400, f"Bad Request: can't parse entities: {description}")
    # PTB drops "Bad Request: " and applies str.capitalize(), lowering everything else.
    assert refused.value.message == f"Can't parse entities: {description}".capitalize()
    assert "can't parse entities" in refused.value.message.lower()


async def test_message_validation(tg: FakeTelegram, bot: Bot) -> None:
    refusals = [
        (bot.send_message(111, ""), "Message text is empty"),
        (bot.send_message(111, " \n "), "Text must be non-empty"),
        (bot.send_message(111, "<b></b>", parse_mode="HTML"), "Text must be non-empty"),
        (bot.send_message(111, "x" * 4097), "Message is too long"),
        (bot.send_message(0, "hi"), "Chat not found"),
        (bot.send_message("no_at_sign", "hi"), "Chat not found"),
        (bot.send_message(111, "*hi*", parse_mode="MarkdownV2"), "does not implement"),
        (bot.send_message(111, "hi", parse_mode="Nope"), "Unsupported parse_mode"),
        (
            bot.send_message(111, "hi", reply_parameters=ReplyParameters(999)),
            "Message to be replied not found",
        ),
    ]
    for attempt, message in refusals:
        with pytest.raises(BadRequest) as refused:
            await attempt
        assert message in refused.value.message
    assert (await bot.send_message(111, "😀" * 2048)).text == "😀" * 2048  # 4096 UTF-16 units
    with pytest.raises(BadRequest, match="Message is too long"):
        await bot.send_message(111, "😀" * 2048 + "x")

    kept = await bot.send_message(
        111, "hi", reply_parameters=ReplyParameters(999, allow_sending_without_reply=True)
    )
    assert kept.reply_to_message is None

    tg.block(222)
    with pytest.raises(Forbidden) as blocked:
        await bot.send_message(222, "hi")
    # PTB strips only "Bad Request: " (and "Error: "): a 403 keeps its prefix and case.
    assert blocked.value.message == "Forbidden: bot was blocked by the user"
    assert tg.calls_to("sendMessage")[-1].error == "Forbidden: bot was blocked by the user"
    tg.unblock(222)
    assert (await bot.send_message(222, "hi")).chat.id == 222

    tg.add_chat(group_chat(-1009, "Announcements", "channel", username="news"))
    post = await bot.send_message("@news", "launch")
    assert post.chat.id == -1009 and post.sender_chat is not None and post.from_user is None


async def test_inline_keyboards_are_checked(tg: FakeTelegram, bot: Bot) -> None:
    def buttons(*row: InlineKeyboardButton) -> InlineKeyboardMarkup:
        return InlineKeyboardMarkup([list(row)])

    fits = "é" * 32  # 64 bytes of UTF-8
    sent = await bot.send_message(
        111, "x", reply_markup=buttons(InlineKeyboardButton("a", callback_data=fits))
    )
    assert sent.reply_markup is not None
    assert sent.reply_markup.inline_keyboard[0][0].callback_data == fits

    with pytest.raises(BadRequest) as too_long:
        await bot.send_message(
            111, "x", reply_markup=buttons(InlineKeyboardButton("a", callback_data=fits + "a"))
        )
    assert tg.calls_to("sendMessage")[-1].error == "Bad Request: BUTTON_DATA_INVALID"
    assert too_long.value.message == "Button_data_invalid"  # PTB's capitalize() at work

    async with aiohttp.ClientSession() as http:
        text_only = {"inline_keyboard": [[{"text": "no action"}]]}
        resp = await http.post(
            tg.api_url + "/sendMessage",
            data={"chat_id": "111", "text": "x", "reply_markup": json.dumps(text_only)},
        )
        assert resp.status == 400
        assert (await resp.json())["description"] == (
            "Bad Request: can't parse inline keyboard button: Text buttons are unallowed in the "
            "inline keyboard"
        )
        resp = await http.post(
            tg.api_url + "/sendMessage",
            data={"chat_id": "111", "text": "x", "reply_markup": "{not json"},
        )
        assert (await resp.json())["description"] == (
            "Bad Request: can't parse reply keyboard markup JSON object"
        )
    with pytest.raises(BadRequest):
        await bot.send_message(
            111, "x", reply_markup=buttons(InlineKeyboardButton("a", url="nope"))
        )
    assert tg.calls_to("sendMessage")[-1].error == (
        "Bad Request: inline keyboard button URL 'nope' is invalid: Wrong HTTP URL"
    )


async def test_edits_follow_telegrams_rules(tg: FakeTelegram, bot: Bot) -> None:
    sent = await bot.send_message(111, "<b>Pending</b>", parse_mode="HTML", reply_markup=KEYBOARD)
    identical = bot.edit_message_text(
        "<b>Pending</b>", 111, sent.message_id, parse_mode="HTML", reply_markup=KEYBOARD
    )
    with pytest.raises(BadRequest) as unchanged:
        await identical
    assert unchanged.value.message.startswith("Message is not modified: specified new message")
    assert tg.calls_to("editMessageText")[-1].error is not None
    assert tg.calls_to("editMessageText")[-1].error.startswith(
        "Bad Request: message is not modified: specified new message content and reply markup"
    )

    # The same text without bold is new content; no reply_markup removes the keyboard.
    edited = await bot.edit_message_text("Pending", 111, sent.message_id)
    assert isinstance(edited, telegram.Message)
    assert edited.text == "Pending" and edited.entities == () and edited.reply_markup is None
    assert edited.edit_date is not None
    stored = tg.message(111, sent.message_id)
    assert stored is not None and "reply_markup" not in stored and stored[RAW_TEXT] == "Pending"
    with pytest.raises(BadRequest, match="Message is not modified"):
        await bot.edit_message_text("Pending", 111, sent.message_id)

    again = await bot.edit_message_reply_markup(111, sent.message_id, reply_markup=KEYBOARD)
    assert isinstance(again, telegram.Message) and again.reply_markup is not None
    with pytest.raises(BadRequest, match="Message is not modified"):
        await bot.edit_message_reply_markup(111, sent.message_id, reply_markup=KEYBOARD)
    cleared = await bot.edit_message_reply_markup(111, sent.message_id)
    assert isinstance(cleared, telegram.Message) and cleared.reply_markup is None

    with pytest.raises(BadRequest, match="Message to edit not found"):
        await bot.edit_message_text("x", 111, 999)
    with pytest.raises(BadRequest, match="Inline keyboard expected"):
        await bot.edit_message_text("x", 111, sent.message_id, reply_markup=ForceReply())  # type: ignore[arg-type]

    inbound = text_message(
        tg.next_update_id(),
        chat=private_chat(ALICE),
        from_user=ALICE,
        text="hi",
        message_id=tg.next_message_id(111),
    )
    tg.push_update(inbound)
    with pytest.raises(BadRequest, match="Message can't be edited"):
        await bot.edit_message_text("x", 111, inbound["message"]["message_id"])


async def test_callback_queries_are_answered_once(tg: FakeTelegram, bot: Bot) -> None:
    assert await bot.answer_callback_query("4000000001", text="Approved")
    assert tg.callback_answer("4000000001") == {
        "callback_query_id": "4000000001",
        "text": "Approved",
    }
    with pytest.raises(BadRequest, match="Query is too old"):
        await bot.answer_callback_query("4000000001")
    with pytest.raises(BadRequest, match="Message_too_long"):
        await bot.answer_callback_query("4000000002", text="x" * 201)


async def test_rate_limit_raises_retry_after(
    tg: FakeTelegram, bot: Bot, monkeypatch: pytest.MonkeyPatch
) -> None:
    tg.rate_limit_next("sendMessage")
    # PTB 22 warns that retry_after will become a timedelta, already while building the error.
    with pytest.warns(PTBDeprecationWarning), pytest.raises(RetryAfter) as limited:
        await bot.send_message(111, "hi")
    with pytest.warns(PTBDeprecationWarning):
        assert limited.value.retry_after == 3
    call = tg.calls_to("sendMessage")[0]
    assert (call.status, call.error) == (429, "Too Many Requests: retry after 3")
    assert call.response == {
        "ok": False,
        "error_code": 429,
        "description": "Too Many Requests: retry after 3",
        "parameters": {"retry_after": 3},
    }

    monkeypatch.setenv("PTB_TIMEDELTA", "true")
    tg.rate_limit_next(retry_after=7)  # any method
    with pytest.raises(RetryAfter) as limited_again:
        await bot.get_webhook_info()
    assert limited_again.value.retry_after == dtm.timedelta(seconds=7)

    tg.rate_limit_next("sendMessage", retry_after=1)
    async with aiohttp.ClientSession() as http:
        resp = await http.post(tg.api_url + "/sendMessage", data={"chat_id": "1", "text": "x"})
        assert (resp.status, resp.headers["Retry-After"]) == (429, "1")
    assert (await bot.send_message(111, "hi")).text == "hi"


async def test_server_errors_raise_network_error(tg: FakeTelegram, bot: Bot) -> None:
    tg.fail_next("sendMessage", times=2)
    for _ in range(2):
        with pytest.raises(NetworkError) as failed:
            await bot.send_message(111, "hi")
        assert not isinstance(failed.value, BadRequest)
        assert failed.value.message.startswith("Bad Gateway (502). Parsing the server response")
    assert (await bot.send_message(111, "hi")).text == "hi"
    assert [c.status for c in tg.calls_to("sendMessage")] == [502, 502, 200]
    assert [c.error for c in tg.calls_to("sendMessage")][:2] == ["http_502", "http_502"]
    assert len(tg.calls_to("sendMessage", ok=True)) == 1

    tg.fail_next(status=503)
    with pytest.raises(NetworkError, match="Service Unavailable"):
        await bot.get_me()


async def test_tokens_and_methods(tg: FakeTelegram) -> None:
    with pytest.raises(InvalidToken) as rejected:
        async with Bot("123456:WRONG", base_url=tg.base_url):
            pass
    assert "was rejected by the server" in rejected.value.message
    assert isinstance(rejected.value.__cause__, InvalidToken)
    assert rejected.value.__cause__.message == "Unauthorized"

    async with aiohttp.ClientSession() as http:
        resp = await http.get(f"{tg.base_url}123456:WRONG/getMe")
        assert resp.status == 401
        assert await resp.json() == {"ok": False, "error_code": 401, "description": "Unauthorized"}
        resp = await http.get(f"{tg.base_url}not-a-token/getMe")
        assert (resp.status, (await resp.json())["description"]) == (404, "Not Found")
        resp = await http.post(tg.api_url + "/noSuchMethod")
        assert (resp.status, (await resp.json())["description"]) == (404, "Not Found")
        # Method names are case-insensitive; JSON bodies and query strings work too.
        resp = await http.post(tg.api_url + "/SENDMESSAGE", json={"chat_id": 111, "text": "json"})
        assert (await resp.json())["result"]["text"] == "json"
        resp = await http.get(tg.api_url + "/sendmessage?chat_id=111&text=query")
        assert (await resp.json())["result"]["text"] == "query"
    assert [c.args["text"] for c in tg.calls_to("sendMessage")] == ["json", "query"]

    async with Bot(tg.token, base_url=tg.base_url) as bot:
        with pytest.raises(EndPointNotFound):
            await bot.do_api_request("noSuchMethod")
        assert await bot.set_my_commands([("approve", "Approve a request")])
        assert [c.command for c in await bot.get_my_commands()] == ["approve"]
        assert tg.commands() == [{"command": "approve", "description": "Approve a request"}]
        assert await bot.delete_my_commands()
        assert tg.commands() == []
        assert await bot.log_out() and await bot.close()


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
