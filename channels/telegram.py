"""Telegram: approval cards with inline buttons, decisions by button or by replying to a card.

A python-telegram-bot `Application` without its own server (no Updater) lives inside signoff's
aiohttp app: `POST /telegram/webhook` checks Telegram's secret token in constant time, records
the update id (a redelivered update is acknowledged and not handled twice, whichever replica
it lands on), and hands the update to the application, whose handlers decide through the
Operator before Telegram gets its 200. Every refusal is told to the human (a callback answer,
or a reply) and recorded in the approval's audit trail. Cards are posted and edited from the
outbox (bot.cards), so Telegram being down or rate limiting delays a card, never loses it.

`polling=True` is the single-process development mode: PTB's Updater fetches updates with
getUpdates instead of Telegram calling the webhook.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import re
import warnings
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from aiohttp import web
from telegram import (
    Bot,
    CallbackQuery,
    ForceReply,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    LinkPreviewOptions,
    MaybeInaccessibleMessage,
    Message,
    ReplyParameters,
    Update,
)
from telegram.constants import ParseMode
from telegram.error import BadRequest, InvalidToken, RetryAfter, TelegramError
from telegram.ext import (
    Application,
    CallbackQueryHandler,
    CommandHandler,
    ContextTypes,
    MessageHandler,
    filters,
)

from bot.config import TelegramConfig
from bot.delegations import Delegations, parse_delegate
from bot.errors import (
    ApprovalChanged,
    ConfigError,
    DeliveryFailed,
    NotAnApprover,
    NotFound,
    SignoffError,
)
from bot.inbound import Inbound
from bot.model import Card
from bot.operator import Actor, Decision, Operator
from bot.outbox import RetryLater
from bot.routing import Directory, Principal
from channels import telegram_card
from channels.base import MessageRef
from channels.refusals import refusal_text
from store.records import CardMessage

log = logging.getLogger("signoff.telegram")

# PTB 22 warns on every flood-control error that `retry_after` will become a timedelta; the
# code below reads both forms, so the warning says nothing an operator can act on.
warnings.filterwarnings("ignore", message=".*`retry_after` will be of type", module="telegram")

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
# What the handlers below understand; Telegram sends nothing else (set-webhook says so).
ALLOWED_UPDATES = ("message", "callback_query")
_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")  # what setWebhook accepts as secret_token
_ANSWER_LIMIT = 200  # characters of a callback answer


def credentials(
    config: TelegramConfig, environ: Mapping[str, str] = os.environ, *, webhook: bool = True
) -> tuple[str, str | None]:
    """The bot token and (for the webhook) the secret token from the environment;
    ConfigError naming whichever variable is unset or unusable."""
    token = environ.get(config.bot_token_env) or ""
    secret = environ.get(config.webhook_secret_env) or ""
    wanted = [(config.bot_token_env, token)] + (
        [(config.webhook_secret_env, secret)] if webhook else []
    )
    missing = [var for var, value in wanted if not value]
    if missing:
        raise ConfigError(
            f"[telegram] is configured but ${', $'.join(missing)} not set; set the bot token "
            "(from BotFather) and a webhook secret, or remove [telegram]"
        )
    if webhook and not _SECRET.fullmatch(secret):
        raise ConfigError(
            f"${config.webhook_secret_env}: Telegram accepts 1-256 characters of A-Z, a-z, "
            "0-9, _ and - as a webhook secret token"
        )
    return token, (secret if webhook else None)


class TelegramChannel:
    name = "telegram"

    def __init__(
        self,
        config: TelegramConfig,
        directory: Directory,
        operator: Operator,
        delegations: Delegations,
        inbound: Inbound,
        environ: Mapping[str, str] = os.environ,
        *,
        polling: bool = False,
    ) -> None:
        token, self.secret = credentials(config, environ, webhook=not polling)
        self.directory = directory
        self.operator = operator
        self.delegations = delegations
        self.inbound = inbound
        self.polling = polling
        builder = (
            Application.builder()
            .token(token)
            .base_url(config.api_base_url)
            # Short calls: a card post must end well inside its outbox lease.
            .connect_timeout(5)
            .read_timeout(10)
            .write_timeout(10)
            .pool_timeout(5)
        )
        if not polling:
            builder = builder.updater(None)
        self.application = builder.build()
        self.bot = self.application.bot
        self.application.add_handler(CallbackQueryHandler(self._on_button))
        self.application.add_handler(
            MessageHandler(filters.REPLY & filters.TEXT & ~filters.COMMAND, self._on_reply)
        )
        self.application.add_handler(
            CommandHandler(["delegate", "delegations", "revoke", "start", "help"], self._on_command)
        )
        self.application.add_error_handler(self._on_error)
        self._starting = asyncio.Lock()

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Called when the server starts. Telegram being unreachable must not keep the agent
        API down: the bot is initialised again on first use."""
        try:
            await self._started()
        except TelegramError as exc:
            if self.polling:
                raise ConfigError(f"Telegram polling cannot start: {exc}") from exc
            log.warning("Telegram is not reachable yet (%s); will retry on first use", exc)
            return
        if self.polling:
            assert self.application.updater is not None
            await self.application.updater.start_polling(allowed_updates=list(ALLOWED_UPDATES))
            log.info("Telegram polling started (development mode, one process only)")

    async def stop(self) -> None:
        updater = self.application.updater
        if updater is not None and updater.running:
            await updater.stop()
        if self.application.running:
            await self.application.stop()
        await self.application.shutdown()

    async def _started(self) -> None:
        """Initialise (getMe) and start the application once; concurrent callers wait."""
        if self.application.running:
            return
        async with self._starting:
            if not self.application.running:
                await self.application.initialize()
                await self.application.start()

    # -- inbound --------------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.Response:
        """`POST /telegram/webhook`: one update from Telegram."""
        given = request.headers.get(SECRET_HEADER, "")
        if self.secret is None or not hmac.compare_digest(given.encode(), self.secret.encode()):
            log.warning(
                "Telegram webhook call from %s refused: %s secret token",
                request.remote,
                "wrong" if given else "missing",
            )
            return _error(403, "forbidden", f"missing or wrong {SECRET_HEADER}")
        try:
            data = await request.json()
        except ValueError:
            return _error(400, "malformed_json", "the body is not JSON")
        update_id = data.get("update_id") if isinstance(data, dict) else None
        if not isinstance(update_id, int) or isinstance(update_id, bool):
            return _error(400, "invalid_update", "an update needs an integer update_id")
        try:
            update = Update.de_json(data, self.bot)
        except Exception:
            log.exception("Telegram update %s could not be read", update_id)
            return _error(400, "invalid_update", "the update could not be read")
        try:
            await self._started()
        except TelegramError as exc:  # Telegram delivers again later
            log.warning("Telegram update %d not handled yet: %s", update_id, exc)
            return _error(503, "telegram_unavailable", "the bot is not initialised yet")
        # A database error here answers 503 (errors middleware): Telegram delivers again.
        if not await self.inbound.first_delivery("telegram", str(update_id)):
            log.info("Telegram update %d was delivered again; handled once already", update_id)
            return web.Response()
        await self.application.process_update(update)
        return web.Response()

    async def _on_button(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        query = update.callback_query
        assert query is not None
        async with self._failures_told(query, None):
            await self._button(query)

    async def _button(self, query: CallbackQuery) -> None:
        pressed = telegram_card.parse_callback(query.data)
        if pressed is None:
            await self._answer(query, "This button was not made by signoff.")
            return
        # Older than 48 hours, the message comes as an InaccessibleMessage: still with its
        # chat and id, which is all the card lookup needs.
        message = query.message
        card = await self._card_of(message)
        user_id = query.from_user.id
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
            await self._record(target, self._label(user_id), pressed.action, error)
            await self._answer(query, error.message, alert=True)
            return
        actor = await self._actor(user_id, card, pressed.action, query=query)
        if actor is None:
            return
        if pressed.action == "approve":
            try:
                decision = await self.operator.approve_shown(
                    card.approval_id, card.shown_hash, actor
                )
            except SignoffError as error:
                await self._refuse_button(query, card, actor.label, "approve", error)
                return
            await self._answer(query, _approved(decision))
            return
        try:  # refuse now rather than after the reason has been typed
            await self.operator.precheck(card.approval_id, card.shown_hash, actor, "reject")
        except SignoffError as error:
            await self._refuse_button(query, card, actor.label, "reject", error)
            return
        await self._answer(query, None)
        assert message is not None  # _card_of found a card for it
        await self._ask_reason(message, card, query.from_user.id, query.from_user.first_name)

    async def _ask_reason(
        self,
        card_message: MaybeInaccessibleMessage,
        card: CardMessage,
        user_id: int,
        first_name: str,
    ) -> None:
        """A ForceReply bound to the card: the answer to it is the reason (or `skip`)."""
        text = telegram_card.reason_prompt(card.shown_hash)
        if card_message.chat.type != "private":
            # In a group, address the clicker: a selective ForceReply opens only for them.
            mention = telegram_card.escape(first_name)
            text = f'<a href="tg://user?id={user_id}">{mention}</a>, {text[0].lower()}{text[1:]}'
        prompt = await self.bot.send_message(
            chat_id=card_message.chat.id,
            text=text,
            parse_mode=ParseMode.HTML,
            reply_markup=ForceReply(selective=True, input_field_placeholder="Reason, or skip"),
            reply_parameters=ReplyParameters(card_message.message_id),
        )
        await self.inbound.ask(
            "telegram",
            str(prompt.chat.id),
            str(prompt.message_id),
            card,
            asked=str(user_id),
            action="reject",
        )

    async def _on_reply(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.message
        if message is None or message.reply_to_message is None or message.from_user is None:
            return
        async with self._failures_told(None, message):
            await self._reply(message, message.reply_to_message)

    async def _reply(self, message: Message, replied: Message) -> None:
        chat, text = str(message.chat.id), message.text or ""
        card = await self.inbound.card_at("telegram", chat, str(replied.message_id))
        to: str | None = None
        if card is not None:
            parsed = telegram_card.parse_reply(text)
            if parsed is None:
                await self._say(message, telegram_card.HELP)
                return
            action, note, to = parsed.action, parsed.note, parsed.to
        else:
            asked = await self.inbound.prompt_at("telegram", chat, str(replied.message_id))
            if asked is None:
                if replied.from_user is not None and replied.from_user.id == self.bot.id:
                    # One of our other messages (a notice, an answer, a question pruned
                    # after a week): say where a decision goes instead of staying silent.
                    await self._say(message, f"Nothing was decided. {telegram_card.HELP}")
                return  # a reply to someone else's message is not ours to read
            prompt, card = asked
            if str(message.from_user.id) != prompt.asked:  # type: ignore[union-attr]
                await self._say(
                    message, "That question was for someone else; reply to the card itself."
                )
                return
            action = "reject"
            note = None if text.strip().casefold() == "skip" else text.strip() or None
        actor = await self._actor(message.from_user.id, card, action, message=message)  # type: ignore[union-attr]
        if actor is None:
            return
        try:
            if action == "delegate":
                assert to is not None
                handed = await self.operator.delegate(card.approval_id, actor, to, note)
                done = f"Handed to {self.directory.describe(handed.approval.assignee)}."
            elif action == "approve":
                done = _approved(
                    await self.operator.approve_shown(
                        card.approval_id, card.shown_hash, actor, note
                    )
                )
            else:
                await self.operator.reject_shown(card.approval_id, card.shown_hash, actor, note)
                done = "Rejected."
        except SignoffError as error:
            await self._record(card.approval_id, actor.label, action, error)
            await self._say(message, refusal_text(error, self.directory))
            return
        await self._say(message, done)

    # -- commands: /delegate, /delegations, /revoke ---------------------------------------------

    async def _on_command(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.message
        if message is None or message.from_user is None or not message.text:
            return
        async with self._failures_told(None, message):
            command = message.text.split()[0].lstrip("/").split("@")[0].casefold()
            principal = self.directory.principal_for_telegram(message.from_user.id)
            if command in ("start", "help"):
                await self._say(message, self._welcome(message.from_user.id, principal))
                return
            if principal is None:
                await self._say(
                    message,
                    f"Your Telegram account ({message.from_user.id}) is not linked to a signoff "
                    "principal; an administrator can add it to your [principals.NAME] entry.",
                )
                return
            try:
                text = await self._command(command, principal.key, list(context.args or []))
            except SignoffError as error:
                text = error.message
            await self._say(message, text)

    def _welcome(self, user_id: int, principal: Principal | None) -> str:
        """/start (which a person must send before the bot may message them) and /help."""
        if principal is None:
            return (
                f"Your Telegram account ({user_id}) is not linked to a signoff principal yet; "
                f"an administrator can add telegram = {user_id} to your [principals.NAME] entry."
            )
        return (
            f"Linked to signoff as {principal.name} ({principal.key}): approval requests for "
            f"you arrive here. {telegram_card.HELP} Away? /delegate NAME [until WHEN] [SCOPE]; "
            "/delegations lists yours, /revoke ID ends one."
        )

    async def _command(self, command: str, caller: str, words: list[str]) -> str:
        if command == "delegate":
            asked = parse_delegate(words, self.operator.clock.now())
            delegation = await self.delegations.create(
                caller,
                asked.to.lstrip("@"),
                created_by=f"telegram:{caller}",
                starts_at=asked.starts_at,
                ends_at=asked.ends_at,
                scope=asked.scope,
            )
            return f"Delegation {delegation.id}: {self.delegations.describe(delegation)}."
        if command == "delegations":
            mine = await self.delegations.involving(caller)
            if not mine:
                return "No active or scheduled delegations for you."
            return "\n".join(f"{d.id}: {self.delegations.describe(d)}" for d in mine)
        # revoke
        if not words:
            return "Which one? /revoke ID (the ids are in /delegations)."
        try:
            revoked = await self.delegations.revoke_own(words[0], caller, by=f"telegram:{caller}")
        except NotFound:
            return f"You have no delegation {words[0]} to revoke; see /delegations."
        return f"Revoked: {self.delegations.describe(revoked)}."

    async def _on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        log.error("Telegram update could not be handled", exc_info=context.error)

    # -- helpers for the handlers ---------------------------------------------------------------

    async def _card_of(self, message: MaybeInaccessibleMessage | None) -> CardMessage | None:
        if message is None:  # an inline-mode message: never one of our cards
            return None
        return await self.inbound.card_at("telegram", str(message.chat.id), str(message.message_id))

    def _label(self, user_id: int) -> str:
        principal = self.directory.principal_for_telegram(user_id)
        return f"telegram:{principal.key if principal else user_id}"

    async def _actor(
        self,
        user_id: int,
        card: CardMessage,
        action: str,
        *,
        query: CallbackQuery | None = None,
        message: Message | None = None,
    ) -> Actor | None:
        """The verified principal behind a Telegram user id; a user who is no principal is
        refused (and audited) here."""
        principal = self.directory.principal_for_telegram(user_id)
        if principal is not None:
            return Actor(principal.key, "telegram")
        error = NotAnApprover(
            f"Your Telegram account ({user_id}) is not linked to a signoff principal, so it "
            f"cannot decide; an administrator can add telegram = {user_id} to your "
            "[principals.NAME] entry."
        )
        await self._record(card.approval_id, f"telegram:{user_id}", action, error)
        if query is not None:
            await self._answer(query, error.message, alert=True)
        elif message is not None:
            await self._say(message, error.message)
        return None

    async def _refuse_button(
        self,
        query: CallbackQuery,
        card: CardMessage,
        actor_label: str,
        action: str,
        error: SignoffError,
    ) -> None:
        await self._record(card.approval_id, actor_label, action, error)
        await self._answer(
            query, refusal_text(error, self.directory), alert=isinstance(error, NotAnApprover)
        )

    async def _record(
        self, approval_id: str, actor_label: str, action: str, error: SignoffError
    ) -> None:
        try:
            await self.operator.record_refusal(approval_id, actor_label, action, error)
        except Exception:  # the human still hears why; the failure is for the operator
            log.exception("could not record the refusal on %s", approval_id)

    async def _answer(self, query: CallbackQuery, text: str | None, alert: bool = False) -> None:
        """Answer the callback query (Telegram shows a spinner until it is answered)."""
        if text is not None and len(text) > _ANSWER_LIMIT:
            text = text[: _ANSWER_LIMIT - 1] + "…"
        try:
            await query.answer(text=text, show_alert=alert)
        except TelegramError as exc:
            log.warning("could not answer Telegram callback %s: %s", query.id, exc)

    async def _say(self, message: Message, text: str) -> None:
        """A plain-text reply (no parse mode: nothing in it is markup)."""
        try:
            await self.bot.send_message(
                chat_id=message.chat.id,
                text=text,
                reply_parameters=ReplyParameters(
                    message.message_id, allow_sending_without_reply=True
                ),
            )
        except TelegramError as exc:
            log.warning("could not reply in Telegram chat %s: %s", message.chat.id, exc)

    @asynccontextmanager
    async def _failures_told(
        self, query: CallbackQuery | None, message: Message | None
    ) -> AsyncIterator[None]:
        """Whatever goes wrong, the human hears that nothing was decided, not silence."""
        try:
            yield
        except Exception:
            log.exception("Telegram interaction failed")
            text = "Something went wrong and nothing was decided; please try again."
            if query is not None:
                await self._answer(query, text)
            elif message is not None:
                await self._say(message, text)

    # -- outbound (called by the outbox) --------------------------------------------------------

    def _chat(self, target: str) -> int:
        """The chat id to send to: the target's own, or a principal's private chat."""
        where = target.partition(":")[2]
        if where.startswith("@"):
            principal = self.directory.principals.get(where[1:])
            if principal is None or principal.telegram is None:
                raise DeliveryFailed(f"principal {where[1:]!r} has no Telegram user id configured")
            return principal.telegram
        return int(where)

    async def send_notice(self, target: str, text: str) -> None:
        await self._call(self.bot.send_message, chat_id=self._chat(target), text=text)

    async def post_card(self, card: Card, target: str) -> MessageRef:
        chat_id = self._chat(target)
        sent = await self._call(
            self.bot.send_message,
            chat_id=chat_id,
            text=telegram_card.html(card),
            parse_mode=ParseMode.HTML,
            reply_markup=_markup(card),
            link_preview_options=LinkPreviewOptions(is_disabled=True),
        )
        return MessageRef("telegram", str(sent.chat.id), str(sent.message_id))

    async def update_card(self, ref: MessageRef, card: Card) -> None:
        try:
            await self._call(
                self.bot.edit_message_text,
                chat_id=int(ref.address),
                message_id=int(ref.message_id),
                text=telegram_card.html(card),
                parse_mode=ParseMode.HTML,
                reply_markup=_markup(card),  # None removes the buttons
                link_preview_options=LinkPreviewOptions(is_disabled=True),
            )
        except DeliveryFailed as exc:
            if "message is not modified" in str(exc).casefold():
                return  # already shows this state: an update delivered twice
            raise

    async def _call(self, method: Any, **kwargs: Any) -> Any:
        try:
            await self._started()
            return await method(**kwargs)
        except RetryAfter as exc:
            raise RetryLater("Telegram flood control", _seconds(exc)) from exc
        except BadRequest as exc:
            raise DeliveryFailed(f"Telegram refused the call: {exc.message}") from exc
        except TelegramError as exc:  # network, 5xx, blocked by the user: try again later
            raise DeliveryFailed(f"Telegram call failed: {exc.message}") from exc


def _approved(decision: Decision) -> str:
    """What an approver hears: approved, or their vote counted towards a quorum."""
    if decision.event.type != "voted":
        return "Approved."
    votes = len(decision.event.data.get("votes") or [])
    needed = decision.approval.required_approvals
    return f"Your approval is recorded: {votes} of {needed}; the request waits for the rest."


def _markup(card: Card) -> InlineKeyboardMarkup | None:
    rows = telegram_card.keyboard(card)
    if rows is None:
        return None
    return InlineKeyboardMarkup(
        [[InlineKeyboardButton(label, callback_data=data) for label, data in row] for row in rows]
    )


def _seconds(exc: RetryAfter) -> float:
    value = exc.retry_after
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status)


# -- setup (signoff telegram set-webhook | delete-webhook) --------------------------------------


async def set_webhook(config: TelegramConfig, url: str, *, drop_pending: bool = False) -> str:
    """Tell Telegram to deliver this bot's updates to `url` with our secret token, and only
    the kinds of update signoff handles. Returns the bot's username."""
    token, secret = credentials(config)
    async with _setup_bot(token, config) as bot:
        await bot.set_webhook(
            url=url,
            secret_token=secret,
            allowed_updates=list(ALLOWED_UPDATES),
            drop_pending_updates=drop_pending,
        )
        return bot.username


async def delete_webhook(config: TelegramConfig) -> str:
    """Stop webhook delivery (updates wait at Telegram, for up to a day, until fetched)."""
    token, _ = credentials(config, webhook=False)
    async with _setup_bot(token, config) as bot:
        await bot.delete_webhook()
        return bot.username


@asynccontextmanager
async def _setup_bot(token: str, config: TelegramConfig) -> AsyncIterator[Bot]:
    try:
        async with Bot(token, base_url=config.api_base_url) as bot:  # getMe checks the token
            yield bot
    except InvalidToken as exc:
        raise ConfigError(
            f"Telegram rejected the bot token in ${config.bot_token_env}; copy it again "
            "from BotFather"
        ) from exc
    except TelegramError as exc:
        raise DeliveryFailed(f"Telegram refused: {exc.message}") from exc
