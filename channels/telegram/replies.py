"""How the Telegram channel speaks to the person in front of it: the callback answer to a
press (in the webhook's own answer when it can carry it), a plain reply to a message, a
card's buttons swapped in place, and what an anonymous admin is told. The channel and its
grant flow (channels/telegram/grants.py) both answer through a `Replies`, so the grant flow
never needs the channel."""

from __future__ import annotations

import logging

from telegram import (
    Bot,
    CallbackQuery,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    LinkPreviewOptions,
    Message,
    ReplyParameters,
)
from telegram.error import TelegramError

from bot.card import Card, card_for
from bot.chat_memory import ChatMemory
from bot.routing import Directory
from channels import conversation
from channels.telegram import answers as telegram_answers
from channels.telegram import card as telegram_card
from channels.telegram.transport import reply_in_answer

log = logging.getLogger("signoff.telegram")

_ANSWER_LIMIT = 200  # characters of a callback answer

# Said to an anonymous group admin (or someone posting as a channel): Telegram does not say who
# they are, so nobody can be linked to them; never suggest linking the stand-in account.
ANONYMOUS = (
    "You are posting anonymously (as the group or a channel), so signoff cannot tell who you "
    'are and nothing was decided. To decide, turn off "Remain anonymous" in your admin '
    "rights for this group (or post as yourself), then try again."
)

Rows = list[list[tuple[str, str]]]


class Replies:
    """Answers and replies through one bot, and the buttons a card has now (read through
    the chat memory's store and clock, by the directory's routes)."""

    def __init__(self, bot: Bot, memory: ChatMemory, directory: Directory) -> None:
        self.bot = bot
        self.memory = memory
        self.directory = directory

    def answerer(self, query: CallbackQuery) -> conversation.Tell:
        """Tell the presser in the callback answer; someone who may not decide at all gets
        it as an alert they must dismiss."""

        async def tell(text: str, *, firmly: bool = False) -> None:
            await self.answer(query, text, alert=firmly)

        return tell

    def replier(self, message: Message) -> conversation.Tell:
        async def tell(text: str, *, firmly: bool = False) -> None:
            await self.say(message, text)

        return tell

    async def answer(self, query: CallbackQuery, text: str | None, alert: bool = False) -> None:
        """Answer the callback query (Telegram shows a spinner until it is answered), in the
        webhook's answer when it can carry it."""
        if text is not None and len(text) > _ANSWER_LIMIT:
            text = text[: _ANSWER_LIMIT - 1] + "…"
        said = {"callback_query_id": query.id, "text": text, "show_alert": alert or None}
        if reply_in_answer("answerCallbackQuery", **said):
            return
        try:
            await query.answer(text=text, show_alert=alert)
        except TelegramError as exc:
            log.warning("could not answer Telegram callback %s: %s", query.id, exc)

    async def say(self, message: Message, text: str) -> None:
        """A plain-text reply (no parse mode: nothing in it is markup), without link
        previews: a preview fetched by Telegram's servers would open (and so use up) a
        single-use sign-in link before the person could."""
        try:
            await self.bot.send_message(
                chat_id=message.chat.id,
                text=text,
                reply_parameters=ReplyParameters(
                    message.message_id, allow_sending_without_reply=True
                ),
                link_preview_options=LinkPreviewOptions(is_disabled=True),
                # Stay in the forum topic even if the message answered is gone meanwhile.
                message_thread_id=telegram_answers.topic(message),
            )
        except TelegramError as exc:
            log.warning("could not reply in Telegram chat %s: %s", message.chat.id, exc)

    async def set_buttons(self, query: CallbackQuery, markup: InlineKeyboardMarkup | None) -> None:
        """Swap the buttons of the card pressed (the text stays as it is)."""
        try:
            await query.edit_message_reply_markup(reply_markup=markup)
        except TelegramError as exc:
            if "message is not modified" not in str(exc).casefold():
                log.warning("could not change the buttons of Telegram card: %s", exc)

    async def markup_now(self, approval_id: str) -> InlineKeyboardMarkup | None:
        """The buttons the card has as the approval stands now (None once decided)."""
        async with self.memory.store.read() as tx:
            approval = await tx.get_approval(approval_id)
        if approval is None:
            return None
        now = self.memory.clock.now()
        return markup(card_for(self.directory, approval, now))


def markup(card: Card) -> InlineKeyboardMarkup | None:
    """A card's buttons (None: it has none, or they are removed)."""
    rows = telegram_card.keyboard(card)
    return None if rows is None else keyboard(rows)


def keyboard(rows: Rows) -> InlineKeyboardMarkup:
    return InlineKeyboardMarkup(
        [[InlineKeyboardButton(label, callback_data=data) for label, data in row] for row in rows]
    )
