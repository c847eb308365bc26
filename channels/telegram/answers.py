"""Telegram's questions back to a person, and the answers they give.

A press that needs words (Reject's reason, Answer's reply) is followed by a message from the
bot that replies to the card with a ForceReply, remembered (bot.chat_memory) with who was
asked and for what, so the reply to it is read as that input to that card, and only from
that person. A question's option is named on its button by its place; the words of an
answer that are exactly one of a question's options (any case) choose it.
"""

from __future__ import annotations

from telegram import Bot, ForceReply, MaybeInaccessibleMessage, Message, ReplyParameters
from telegram.constants import ParseMode

from bot.chat_memory import ChatMemory
from channels.telegram import card as telegram_card
from store.records import CardMessage

PLACEHOLDERS = {"reject": "Reason, or skip", "answer": "Your answer"}


async def ask_for_reply(
    bot: Bot,
    memory: ChatMemory,
    card_message: MaybeInaccessibleMessage,
    card: CardMessage,
    user_id: int,
    first_name: str,
    action: str,
    text: str,
) -> None:
    """A ForceReply bound to the card: the answer to it is the input to `action`."""
    if card_message.chat.type != "private":
        # In a group, address the clicker: a selective ForceReply opens only for them.
        mention = telegram_card.escape(first_name)
        text = f'<a href="tg://user?id={user_id}">{mention}</a>, {text[0].lower()}{text[1:]}'
    prompt = await bot.send_message(
        chat_id=card_message.chat.id,
        text=text,
        parse_mode=ParseMode.HTML,
        reply_markup=ForceReply(selective=True, input_field_placeholder=PLACEHOLDERS[action]),
        reply_parameters=ReplyParameters(card_message.message_id),
        message_thread_id=topic(card_message),
    )
    await memory.ask(
        "telegram",
        str(prompt.chat.id),
        str(prompt.message_id),
        card,
        asked=str(user_id),
        action=action,
    )


async def options_of(memory: ChatMemory, approval_id: str) -> tuple[bool, list[str]]:
    """Whether the request is a question, and its options (none: answered in words)."""
    async with memory.store.read() as tx:
        row = await tx.get_approval(approval_id)
    if row is None:
        return False, []
    return row.kind == "question", [str(o) for o in (row.question or {}).get("options") or []]


async def answer_of(
    memory: ChatMemory, approval_id: str, words: str
) -> tuple[str | None, str | None]:
    """(text, option) for an answer in words: one of the question's options when the words
    are exactly it (any case), else the words (which a question with options refuses, in
    words naming them)."""
    _, options = await options_of(memory, approval_id)
    chosen = [o for o in options if o.casefold() == words.strip().casefold()]
    return (None, chosen[0]) if chosen else (words, None)


def topic(message: MaybeInaccessibleMessage) -> int | None:
    """The forum topic a message is in (None outside forums: a supergroup's reply threads
    also carry a message_thread_id, which is not a topic)."""
    if isinstance(message, Message) and message.is_topic_message:
        return message.message_thread_id
    return None
