"""Telegram: approval cards with inline buttons, decisions by button or by replying to a card.

The updates arrive through channels.telegram.transport (the webhook, or polling in development);
the handlers here map the Telegram user to a principal and decide through the shared chat
logic (channels.conversation) before Telegram gets its 200. Every refusal is told to the
human (a callback answer, or a reply) and recorded in the approval's audit trail. Cards are
posted and edited from the outbox (bot.outbox.cards), so Telegram being down or rate limiting
delays a card, never loses it.

What is said back (callback answers, replies, a card's buttons) goes through
channels/telegram/replies.py, which the grant flow (channels/telegram/grants.py) is handed
too: the parts take what they need, and never import this module.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from aiohttp import web
from telegram import (
    CallbackQuery,
    LinkPreviewOptions,
    MaybeInaccessibleMessage,
    Message,
    ReplyParameters,
    Update,
)
from telegram.constants import ParseMode
from telegram.ext import (
    CallbackQueryHandler,
    CommandHandler,
    ContextTypes,
    MessageHandler,
    filters,
)

from bot.card import Card, confirms
from bot.chat_memory import ChatMemory
from bot.delegations import Delegations
from bot.errors import ApprovalChanged, DeliveryFailed, NotAnApprover
from bot.operator import Actor, Operator
from bot.routing import Directory, Principal
from bot.target import Target
from channels import conversation
from channels.base import MessageRef
from channels.conversation import Conversation, Surface
from channels.telegram import answers as telegram_answers
from channels.telegram import card as telegram_card
from channels.telegram import migration as telegram_migration
from channels.telegram.config import TELEGRAM_SERVICE_ACCOUNTS, TelegramConfig
from channels.telegram.grants import TelegramGrants
from channels.telegram.replies import ANONYMOUS, Replies, keyboard, markup
from channels.telegram.transport import Migrated, TelegramBot
from channels.web import inbox as web_inbox
from store.records import CardMessage

if TYPE_CHECKING:
    from channels.web.site import Site as WebSite

log = logging.getLogger("signoff.telegram")

SURFACE = Surface("telegram", "Telegram", "/", quote_ids=False, backticks=False)

MEDIA = (
    "Nothing was decided: a decision is read from a text reply, not from the caption of a "
    f"photo or file. {telegram_card.HELP}"
)


class TelegramChannel:
    name = "telegram"

    def __init__(
        self,
        config: TelegramConfig,
        directory: Directory,
        operator: Operator,
        delegations: Delegations,
        memory: ChatMemory,
        environ: Mapping[str, str] = os.environ,
        *,
        polling: bool = False,
        web: WebSite | None = None,
    ) -> None:
        """`web`, when [web] is configured: cards link to the approval's page, and `/web`
        sends a sign-in link."""
        self.web = web
        self.transport = TelegramBot(config, memory, environ, polling=polling)
        self.directory = directory
        self.chat = Conversation(SURFACE, directory, operator, delegations)
        self.memory = memory
        self.bot = self.transport.bot
        self.replies = Replies(self.bot, memory, directory)
        application = self.transport.application
        # Its Revoke presses and /grants are matched before the channel's own handlers.
        self.grants = TelegramGrants(self.replies, self.chat, application)
        application.add_handler(CallbackQueryHandler(self._on_button))
        # A photo or document with a caption is answered too (with help), never decided on.
        application.add_handler(
            MessageHandler(
                filters.REPLY & (filters.TEXT | filters.CAPTION) & ~filters.COMMAND,
                self._on_reply,
            )
        )
        application.add_handler(MessageHandler(filters.StatusUpdate.MIGRATE, self._on_migrate))
        application.add_handler(
            CommandHandler(
                ["delegate", "delegations", "revoke", "start", "help", "web"], self._on_command
            )
        )
        application.add_error_handler(self._on_error)

    # The transport runs PTB's application; the webhook is routed to it unless it polls.

    async def start(self) -> None:
        await self.transport.start()

    async def stop(self) -> None:
        await self.transport.stop()

    def add_routes(self, app: web.Application) -> None:
        if not self.transport.polling:
            app.router.add_post("/telegram/webhook", self.transport.handle)

    # -- inbound: button presses, replies, commands --------------------------------------------

    async def _on_button(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        query = update.callback_query
        assert query is not None
        async with self.chat.failures_told(self.replies.answerer(query)):
            await self._button(query)

    async def _button(self, query: CallbackQuery) -> None:
        pressed = telegram_card.parse_callback(query.data)
        if pressed is None:
            await self.replies.answer(query, "This button was not made by signoff.")
            return
        # Older than 48 hours, the message comes as an InaccessibleMessage: still with its
        # chat and id, which is all the card lookup needs.
        message = query.message
        card = await self._card_of(message)
        if card is None and message is not None:
            card = await self._adopt(message, pressed)
        user_id = query.from_user.id
        principal = self.directory.principal_for("telegram", user_id)
        if (
            card is None
            or card.approval_id != pressed.approval_id
            or not card.shown_hash.startswith(pressed.short_hash)
        ):
            # Someone sent callback data that does not belong to the card it came from.
            error = ApprovalChanged(
                "This button does not match the card it is on, so nothing was decided."
            )
            target = card.approval_id if card is not None else pressed.approval_id
            await self.chat.record(
                target, self.chat.label(principal, user_id), pressed.action, error
            )
            await self.replies.answer(query, error.message, alert=True)
            return
        if pressed.step == "cancel":
            # Back from "Confirm approve / Cancel" to the card's own buttons; decides nothing.
            await self.replies.set_buttons(query, await self.replies.markup_now(card.approval_id))
            await self.replies.answer(query, "Cancelled; nothing was decided.")
            return
        if user_id in TELEGRAM_SERVICE_ACCOUNTS:
            await self._refuse_anonymous(
                card.approval_id, pressed.action, self.replies.answerer(query)
            )
            return
        actor = await self.chat.identify(principal, user_id, card.approval_id, pressed.action)
        if actor is None:
            await self.replies.answer(query, self.chat.unlinked(user_id), alert=True)
            return
        if pressed.action == "answer":
            await self._answer_pressed(query, card, actor, pressed)
            return
        if pressed.action == "allow":  # "Allow the same…": channels/telegram/grants.py
            await self.grants.pressed(query, card, actor, pressed)
            return
        if pressed.action == "approve" and pressed.step == "press" and await self._confirms(card):
            # The route asks for a confirmation: Approve only turns the buttons into "Confirm
            # approve / Cancel" (refused at once if the press could not decide anyway).
            if await self.chat.precheck(
                card.approval_id, card.shown_hash, actor, "approve", self.replies.answerer(query)
            ):
                rows = telegram_card.confirm_keyboard(pressed)
                await self.replies.set_buttons(query, keyboard(rows))
                await self.replies.answer(query, telegram_card.confirm_prompt(card.shown_hash))
            return
        if pressed.action == "approve":
            done = await self.chat.decide(
                "approve", card.approval_id, card.shown_hash, actor, self.replies.answerer(query)
            )
            if done is not None:
                await self.replies.answer(query, done)
            return
        # Refuse now rather than after the reason has been typed.
        if await self.chat.precheck(
            card.approval_id, card.shown_hash, actor, "reject", self.replies.answerer(query)
        ):
            await self.replies.answer(query, None)
            assert message is not None  # _card_of found a card for it
            prompt = telegram_card.reason_prompt(card.shown_hash)
            await self._ask(query, message, card, "reject", prompt)

    async def _answer_pressed(
        self, query: CallbackQuery, card: CardMessage, actor: Actor, pressed: telegram_card.Pressed
    ) -> None:
        """A question's option answers at once; Answer asks for the words in a reply (after
        the same check as Reject: who may reject may answer instead)."""
        tell = self.replies.answerer(query)
        question, options = await telegram_answers.options_of(self.memory, card.approval_id)
        if pressed.option is not None:
            if pressed.option >= len(options):
                await self.replies.answer(query, "This button was not made by signoff.", alert=True)
                return
            option = options[pressed.option]
            done = await self.chat.answer(
                card.approval_id, card.shown_hash, actor, tell, option=option
            )
            if done is not None:
                await self.replies.answer(query, done)
        elif await self.chat.precheck(
            card.approval_id, card.shown_hash, actor, "reject", tell, recorded_as="answer"
        ):
            await self.replies.answer(query, None)
            prompt = telegram_card.answer_prompt(card.shown_hash, question)
            await self._ask(query, query.message, card, "answer", prompt)  # type: ignore[arg-type]

    async def _ask(
        self,
        query: CallbackQuery,
        message: MaybeInaccessibleMessage,
        card: CardMessage,
        action: str,
        prompt: str,
    ) -> None:
        who = query.from_user
        await telegram_answers.ask_for_reply(
            self.bot, self.memory, message, card, who.id, who.first_name, action, prompt
        )

    async def _on_reply(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.message
        if message is None or message.reply_to_message is None or message.from_user is None:
            return
        async with self.chat.failures_told(self.replies.replier(message)):
            await self._reply(message, message.reply_to_message)

    async def _reply(self, message: Message, replied: Message) -> None:
        chat, text = str(message.chat.id), message.text or ""
        user_id = message.from_user.id  # type: ignore[union-attr]
        # A photo or document: its caption is no decision (and no reason), whatever it says.
        media = message.text is None
        anonymous = message.sender_chat is not None or user_id in TELEGRAM_SERVICE_ACCOUNTS
        card = await self.memory.card_at("telegram", chat, str(replied.message_id))
        to: str | None = None
        if card is not None:
            parsed = None if media else telegram_card.parse_reply(text)
            if parsed is None:
                await self.replies.say(message, MEDIA if media else telegram_card.HELP)
                return
            action, note, to = parsed.action, parsed.note, parsed.to
        else:
            asked = await self.memory.prompt_at("telegram", chat, str(replied.message_id))
            if asked is None:
                if _topic_root(message, replied):
                    # In a forum topic, every message that replies to nothing in particular
                    # "replies" to the topic's root, which the bot may have opened: it is
                    # conversation, not an answer to us.
                    return
                if replied.from_user is not None and replied.from_user.id == self.bot.id:
                    # One of our other messages (a notice, an answer, a question pruned
                    # after a week): say where a decision goes instead of staying silent.
                    await self.replies.say(message, f"Nothing was decided. {telegram_card.HELP}")
                return  # a reply to someone else's message is not ours to read
            prompt, card = asked
            if media:
                await self.replies.say(message, MEDIA)
                return
            if anonymous:
                await self._refuse_anonymous(
                    card.approval_id, "reject", self.replies.replier(message)
                )
                return
            if str(user_id) != prompt.asked:
                await self.replies.say(
                    message, "That question was for someone else; reply to the card itself."
                )
                return
            action = "answer" if prompt.action == "answer" else "reject"
            skip = action == "reject" and text.strip().casefold() == "skip"
            note = None if skip else text.strip() or None
        if anonymous:
            await self._refuse_anonymous(card.approval_id, action, self.replies.replier(message))
            return
        principal = self.directory.principal_for("telegram", user_id)
        actor = await self.chat.identify(principal, user_id, card.approval_id, action)
        if actor is None:
            await self.replies.say(message, self.chat.unlinked(user_id))
            return
        if action == "answer":
            words, option = await telegram_answers.answer_of(
                self.memory, card.approval_id, note or ""
            )
            done = await self.chat.answer(
                card.approval_id,
                card.shown_hash,
                actor,
                self.replies.replier(message),
                text=words,
                option=option,
            )
        else:
            done = await self.chat.decide(
                action,
                card.approval_id,
                card.shown_hash,
                actor,
                self.replies.replier(message),
                note=note,
                to=to,
            )
        if done is not None:
            await self.replies.say(message, done)

    # -- commands: /delegate, /delegations, /revoke, /start, /help -------------------------------

    async def _on_command(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.message
        if message is None or message.from_user is None or not message.text:
            return
        async with self.chat.failures_told(self.replies.replier(message)):
            command = message.text.split()[0].lstrip("/").split("@")[0].casefold()
            user_id = message.from_user.id
            if message.sender_chat is not None or user_id in TELEGRAM_SERVICE_ACCOUNTS:
                await self.replies.say(message, ANONYMOUS)
                return
            principal = self.directory.principal_for("telegram", user_id)
            if command in ("start", "help"):
                text = self._welcome(user_id, principal)
                if principal is not None and message.chat.type == "private":
                    await self._after_start(principal)
            elif command == "web":
                text = await self._sign_in_link(message, principal)
            else:
                text = await self.chat.command(
                    command, principal, user_id, list(context.args or [])
                )
            await self.replies.say(message, text)

    async def _sign_in_link(self, message: Message, principal: Principal | None) -> str:
        """`/web`: a fresh sign-in link for the verified person who asked, only in their
        private chat with the bot (in a group, everyone would see it)."""
        user_id = message.from_user.id  # type: ignore[union-attr]
        if principal is None:
            return self.chat.unlinked(user_id, deciding=False)
        if self.web is None:
            return "The web inbox is not set up on this signoff."
        if message.chat.type != "private":
            return (
                "Sign-in links are sent only in a private chat: message me directly and send "
                "/web there."
            )
        return await web_inbox.sign_in_text(self.web, principal)

    def _welcome(self, user_id: int, principal: Principal | None) -> str:
        """/start (which a person must send before the bot may message them) and /help."""
        if principal is None:
            return self.chat.unlinked(user_id, deciding=False)
        return (
            f"Linked to signoff as {principal.name} ({principal.key}): approval requests for "
            f"you arrive here. {telegram_card.HELP} Away? /delegate NAME [until WHEN] [SCOPE]; "
            "/delegations lists yours, /revoke ID ends one. /grants lists your standing grants."
            + (" /web sends a sign-in link to your inbox in the browser." if self.web else "")
        )

    async def _after_start(self, principal: Principal) -> None:
        """Pressing Start opens the private chat: the cards Telegram refused to deliver before
        (`not_started`: a bot may not write first) go out now, if still pending."""
        target = str(Target.personal("telegram", principal.key))
        await self.memory.requeue_refused_cards(target, "can't initiate conversation")

    async def _refuse_anonymous(
        self, approval_id: str, action: str, tell: conversation.Tell
    ) -> None:
        """Refuse an anonymous admin (recorded on the request), telling them how to decide."""
        await self.chat.record(approval_id, "telegram:anonymous", action, NotAnApprover(ANONYMOUS))
        await tell(ANONYMOUS, firmly=True)

    # -- a group upgraded to a supergroup ---------------------------------------------------------

    async def _on_migrate(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """Telegram's service messages for a group upgraded to a supergroup: one in the old
        group (`migrate_to_chat_id`), one in the new (`migrate_from_chat_id`). The cards
        follow at once, so presses in the new chat find them."""
        message = update.message
        if message is None:
            return
        if message.migrate_to_chat_id is not None:
            await self._moved(message.chat.id, message.migrate_to_chat_id, announce=True)
        elif message.migrate_from_chat_id is not None:
            await self._moved(message.migrate_from_chat_id, message.chat.id)

    async def _moved(self, old: int | str | None, new: int, *, announce: bool = False) -> None:
        await telegram_migration.moved(self.memory, self.directory, old, new, announce=announce)

    async def _on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        log.error("Telegram update could not be handled", exc_info=context.error)

    # -- helpers for the handlers ---------------------------------------------------------------

    async def _adopt(
        self, message: MaybeInaccessibleMessage, pressed: telegram_card.Pressed
    ) -> CardMessage | None:
        """A press on a message of ours that card_messages does not know (a card sent just
        before a crash, its record never written): if the message is ours and ends with the
        short hash its button names, the core records it as that approval's card
        (ChatMemory.adopt_card). None for anything else (refused as not matching)."""
        if isinstance(message, Message) and (
            message.from_user is None
            or message.from_user.id != self.bot.id
            or (message.text or "").splitlines()[-1:] != [f"sha256:{pressed.short_hash}"]
        ):
            return None
        chat, message_id = str(message.chat.id), str(message.message_id)
        card = await self.memory.adopt_card(
            "telegram", chat, message_id, pressed.approval_id, pressed.short_hash
        )
        if card is None:
            return None
        log.warning(
            "a Telegram card of %s that was never recorded (message %s in chat %s) was "
            "pressed; recorded now",
            card.approval_id,
            message.message_id,
            message.chat.id,
            extra={"approval_id": card.approval_id},
        )
        return card

    async def _confirms(self, card: CardMessage) -> bool:
        async with self.memory.store.read() as tx:
            approval = await tx.get_approval(card.approval_id)
        return approval is not None and confirms(self.directory, approval)

    async def _card_of(self, message: MaybeInaccessibleMessage | None) -> CardMessage | None:
        if message is None:  # an inline-mode message: never one of our cards
            return None
        return await self.memory.card_at("telegram", str(message.chat.id), str(message.message_id))

    # -- outbound (called by the outbox) --------------------------------------------------------

    def _chat(self, target: Target) -> int:
        """The chat id to send to: the target's own, or a principal's private chat."""
        user = self.chat.account_of(target)
        return int(user if user is not None else target.chat)

    async def send_notice(self, target: Target, text: str) -> None:
        await self.transport.call(self.bot.send_message, chat_id=self._chat(target), text=text)

    async def send_reply(self, ref: MessageRef, text: str) -> None:
        """Plain text as a reply to the card (in the card's forum topic, if it is in one)."""
        await self.transport.call(
            self.bot.send_message,
            chat_id=int(ref.address),
            text=text,
            reply_parameters=ReplyParameters(int(ref.message_id), allow_sending_without_reply=True),
        )

    async def post_card(self, card: Card, target: Target) -> MessageRef:
        chat_id = self._chat(target)
        content = {
            "text": telegram_card.html(card, self._page(card)),
            "parse_mode": ParseMode.HTML,
            "reply_markup": markup(card),
            "link_preview_options": LinkPreviewOptions(is_disabled=True),
            # `telegram:CHAT_ID/THREAD_ID`: into that topic of a forum supergroup.
            "message_thread_id": target.thread,
        }
        try:
            sent = await self.transport.call(self.bot.send_message, chat_id=chat_id, **content)
        except Migrated as exc:
            # A configured group that became a supergroup: post where it lives now (and say
            # that the config names the old id).
            await self._moved(chat_id, exc.new_chat_id, announce=True)
            sent = await self.transport.call(
                self.bot.send_message, chat_id=exc.new_chat_id, **content
            )
        return MessageRef("telegram", str(sent.chat.id), str(sent.message_id))

    async def update_card(self, ref: MessageRef, card: Card) -> None:
        content = {
            "message_id": int(ref.message_id),
            "text": telegram_card.html(card, self._page(card)),
            "parse_mode": ParseMode.HTML,
            "reply_markup": markup(card),  # None removes the buttons
            "link_preview_options": LinkPreviewOptions(is_disabled=True),
        }
        try:
            try:
                await self.transport.call(
                    self.bot.edit_message_text, chat_id=int(ref.address), **content
                )
            except Migrated as exc:
                # The group's messages kept their ids in the supergroup: move the records
                # (so presses there find their cards) and edit it there.
                await self._moved(ref.address, exc.new_chat_id)
                await self.transport.call(
                    self.bot.edit_message_text, chat_id=exc.new_chat_id, **content
                )
        except DeliveryFailed as exc:
            if "message is not modified" in str(exc).casefold():
                return  # already shows this state: an update delivered twice
            raise

    def _page(self, card: Card) -> str | None:
        """The approval's page on the web surface, if there is one."""
        return self.web.approval_url(card.approval_id) if self.web is not None else None


def _topic_root(message: Message, replied: Message) -> bool:
    """Whether `replied` is the root of the forum topic `message` was written in."""
    if replied.forum_topic_created is not None:
        return True
    return bool(message.is_topic_message) and replied.message_id == message.message_thread_id
