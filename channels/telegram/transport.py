"""The python-telegram-bot `Application` inside signoff's aiohttp server: its lifetime, the
webhook that feeds it updates, and the Bot API calls the outbox makes through it.

`POST /telegram/webhook` checks Telegram's secret token in constant time, records the update
id (a redelivered update is acknowledged and not handled twice, whichever replica it lands
on), and hands the update to the application before Telegram gets its 200, so an
acknowledged update has been handled. What the handlers do with it is channels.telegram.channel's.

A handler may hand one Bot API call to the webhook's own answer (`reply_in_answer`): Telegram
runs a method named in the body of a webhook's 200 ("Making requests when getting updates"
in the Bot API), so answering a button press costs no request of its own. It is for calls
whose result nobody reads: Telegram never says whether such a call worked.

`polling=True` is the single-process development mode: PTB's Updater fetches updates with
getUpdates instead of Telegram calling the webhook.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import warnings
from collections.abc import Mapping
from contextvars import ContextVar
from datetime import timedelta
from typing import Any

from aiohttp import web
from telegram import Update
from telegram.error import BadRequest, ChatMigrated, Forbidden, RetryAfter, TelegramError
from telegram.ext import Application
from telegram.request import HTTPXRequest

from bot.chat_memory import ChatMemory
from bot.errors import ConfigError, DeliveryFailed, RetryLater, Undeliverable
from channels.answer_cap import cap_httpx_answer
from channels.telegram.config import TelegramConfig
from channels.telegram.setup import ALLOWED_UPDATES, credentials

log = logging.getLogger("signoff.telegram")

# PTB 22 warns on every flood-control error that `retry_after` will become a timedelta; the
# code below reads both forms, so the warning says nothing an operator can act on.
warnings.filterwarnings("ignore", message=".*`retry_after` will be of type", module="telegram")

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"

# The call the webhook's answer will carry, while a webhook update is being handled (an
# empty list: none yet); None outside one (polling, the outbox).
_ANSWER_CALL: ContextVar[list[dict[str, Any]] | None] = ContextVar(
    "signoff_telegram_answer_call", default=None
)


def reply_in_answer(method: str, **params: Any) -> bool:
    """Have Telegram run `method` with `params` (None values left out) as the answer to the
    update being handled, instead of calling it; False when the caller must call it itself:
    not inside a webhook update, or its answer carries another call already."""
    call = _ANSWER_CALL.get()
    if call is None or call:
        return False
    call.append({"method": method, **{k: v for k, v in params.items() if v is not None}})
    return True

# Refusals that would come back the same however often the call is made, by the words of
# Telegram's description (it has no error codes finer than 400 and 403), and the reason the
# outbox records for each. The job is dead at once; an operator who fixed the cause (unblocked,
# gave the bot its rights back, corrected the chat id) requeues it with `signoff outbox retry`.
PERMANENT = (
    ("chat not found", "chat_not_found"),
    ("bot was blocked by the user", "bot_blocked"),
    ("not enough rights", "not_enough_rights"),
    ("have no rights to send a message", "not_enough_rights"),
    ("chat_write_forbidden", "not_enough_rights"),
    ("bot was kicked", "bot_kicked"),
    ("bot is not a member", "bot_not_member"),
    ("user is deactivated", "user_deactivated"),
    ("bot can't initiate conversation", "not_started"),
    ("message thread not found", "thread_not_found"),
    ("topic_closed", "topic_closed"),
    ("topic_deleted", "thread_not_found"),
    ("message to edit not found", "message_not_found"),
)


class Migrated(DeliveryFailed):
    """The group was upgraded to a supergroup: its messages, ids unchanged, are now in the chat
    `new_chat_id`, and the old id refuses every call."""

    code = "telegram_chat_migrated"

    def __init__(self, old_chat_id: int | str | None, new_chat_id: int) -> None:
        super().__init__(
            f"Telegram group {old_chat_id} was upgraded to a supergroup; its new chat id is "
            f"{new_chat_id}"
        )
        self.old_chat_id = old_chat_id
        self.new_chat_id = new_chat_id


class TelegramBot:
    """`TelegramBot(config, memory)`: the application (add handlers to `.application`), and
    `handle` for the webhook route."""

    def __init__(
        self,
        config: TelegramConfig,
        memory: ChatMemory,
        environ: Mapping[str, str] = os.environ,
        *,
        polling: bool = False,
    ) -> None:
        token, self.secret = credentials(config, environ, webhook=not polling)
        self.memory = memory
        self.polling = polling
        # Short calls (a card post must end well inside its outbox lease), and answers read
        # no further than channels.answer_cap's cap.
        request = HTTPXRequest(
            connect_timeout=5,
            read_timeout=10,
            write_timeout=10,
            pool_timeout=5,
            httpx_kwargs={"event_hooks": {"response": [cap_httpx_answer]}},
        )
        builder = Application.builder().token(token).base_url(config.api_base_url).request(request)
        if not polling:
            builder = builder.updater(None)
        self.application = builder.build()
        self.bot = self.application.bot
        self._starting = asyncio.Lock()

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Called when the server starts. Telegram being unreachable must not keep the agent
        API down: the bot is initialised again on first use."""
        try:
            await self.started()
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

    async def started(self) -> None:
        """Initialise (getMe) and start the application once; concurrent callers wait."""
        if self.application.running:
            return
        async with self._starting:
            if not self.application.running:
                await self.application.initialize()
                await self.application.start()

    # -- the webhook ----------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.Response:
        """`POST /telegram/webhook`: one update from Telegram."""
        given = request.headers.get(SECRET_HEADER, "")
        # aiohttp keeps header bytes that are not UTF-8 as surrogates: encode them back.
        offered = given.encode("utf-8", "surrogateescape")
        if self.secret is None or not hmac.compare_digest(offered, self.secret.encode()):
            log.warning(
                "Telegram webhook call from %s refused: %s secret token",
                request.remote,
                "wrong" if given else "missing",
            )
            return _error(403, "forbidden", f"missing or wrong {SECRET_HEADER}")
        try:
            # Read as UTF-8 whatever charset the Content-Type names (Telegram sends UTF-8;
            # aiohttp's request.json() trusted the header, and a made-up charset was a 500).
            data = json.loads((await request.read()).decode("utf-8"))
        except (ValueError, RecursionError):  # RecursionError: nested past the parser's depth
            return _error(400, "malformed_json", "the body is not JSON Telegram would send")
        update_id = data.get("update_id") if isinstance(data, dict) else None
        if not isinstance(update_id, int) or isinstance(update_id, bool):
            return _error(400, "invalid_update", "an update needs an integer update_id")
        try:
            update = Update.de_json(data, self.bot)
        except Exception:
            log.exception("Telegram update %s could not be read", update_id)
            return _error(400, "invalid_update", "the update could not be read")
        try:
            await self.started()
        except TelegramError as exc:  # Telegram delivers again later
            log.warning("Telegram update %d not handled yet: %s", update_id, exc)
            return _error(503, "telegram_unavailable", "the bot is not initialised yet")
        # A database error here answers 503 (errors middleware): Telegram delivers again.
        if not await self.memory.first_delivery("telegram", str(update_id)):
            log.info("Telegram update %d was delivered again; handled once already", update_id)
            return web.Response()
        # The handlers run in this task (PTB's handlers block by default), so what they
        # hand to the answer is here when process_update returns.
        answer_call: list[dict[str, Any]] = []
        token = _ANSWER_CALL.set(answer_call)
        try:
            await self.application.process_update(update)
        finally:
            _ANSWER_CALL.reset(token)
        return web.json_response(answer_call[0]) if answer_call else web.Response()

    async def call(self, method: Any, **kwargs: Any) -> Any:
        """A Bot API call for the outbox, its failures said as the runner understands them:
        RetryLater for flood control (its wait honoured, no attempt used up beyond the one),
        Migrated for a group now living under another id, Undeliverable (with Telegram's
        reason) for a refusal that would never change, DeliveryFailed for everything else."""
        try:
            await self.started()
            return await method(**kwargs)
        except RetryAfter as exc:
            raise RetryLater("Telegram flood control", _seconds(exc)) from exc
        except ChatMigrated as exc:
            raise Migrated(kwargs.get("chat_id"), int(exc.new_chat_id)) from exc
        except (BadRequest, Forbidden) as exc:
            reason = permanent_reason(exc.message)
            if reason is not None:
                raise Undeliverable(
                    f"Telegram refused the call for good: {exc.message}", reason=reason
                ) from exc
            raise DeliveryFailed(f"Telegram refused the call: {exc.message}") from exc
        except TelegramError as exc:  # network, 5xx: try again later
            raise DeliveryFailed(f"Telegram call failed: {exc.message}") from exc


def permanent_reason(description: str) -> str | None:
    """The reason a refusal is permanent (`chat_not_found`, `bot_blocked`, ...), or None for
    one worth trying again."""
    said = description.casefold()
    return next((reason for words, reason in PERMANENT if words in said), None)


def _seconds(exc: RetryAfter) -> float:
    value = exc.retry_after
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status)
