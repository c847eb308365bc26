"""The fake Telegram against the real python-telegram-bot: sending and editing messages, HTML
parsing, Telegram's validation and keyboards, and answers to button presses."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
import telegram
from telegram import (
    Bot,
    ForceReply,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    MessageEntity,
    ReplyParameters,
)
from telegram.error import BadRequest, Forbidden

from tests.fakes.telegram import (
    RAW_TEXT,
    FakeTelegram,
    group_chat,
    private_chat,
    text_message,
)
from tests.support.telegram_samples import ALICE, KEYBOARD


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
