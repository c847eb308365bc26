"""Connecting signoff to Telegram: the bot's credentials, and pointing Telegram at signoff
(`signoff telegram set-webhook`, which also sets the bot's command list, and
`delete-webhook`).

The webhook is registered once per deployment (from anywhere with the config and the two
variables), not by the server: the server only receives what this registers.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from telegram import Bot
from telegram.error import ChatMigrated, InvalidToken, TelegramError

from bot.errors import ConfigError, DeliveryFailed
from channels import conversation
from channels.telegram.config import TelegramConfig

# What the channel's handlers understand; Telegram sends nothing else (set-webhook says so).
ALLOWED_UPDATES = ("message", "callback_query")
_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")  # what setWebhook accepts as secret_token
# The commands the channel answers, as Telegram's clients offer them after "/".
COMMANDS = (
    ("help", "How to decide, and whom this account is linked to"),
    ("grants", "Your standing grants (Allow the same…), to revoke them"),
    ("delegate", "Hand your requests to someone: /delegate NAME [until WHEN] [SCOPE]"),
    ("delegations", "Your delegations"),
    ("revoke", "End a delegation: /revoke ID"),
    ("web", "A sign-in link to the web inbox (in a private chat)"),
)


def credentials(
    config: TelegramConfig, environ: Mapping[str, str] = os.environ, *, webhook: bool = True
) -> tuple[str, str | None]:
    """The bot token and (for the webhook) the secret token from the environment;
    ConfigError naming whichever variable is unset or unusable."""
    variables = [config.bot_token_env] + ([config.webhook_secret_env] if webhook else [])
    token, *rest = conversation.credentials(
        "telegram", variables, "the bot token (from BotFather) and a webhook secret", environ
    )
    secret = rest[0] if rest else ""
    if webhook and not _SECRET.fullmatch(secret):
        raise ConfigError(
            f"${config.webhook_secret_env}: Telegram accepts 1-256 characters of A-Z, a-z, "
            "0-9, _ and - as a webhook secret token"
        )
    return token, (secret if webhook else None)


async def set_webhook(config: TelegramConfig, url: str, *, drop_pending: bool = False) -> str:
    """Tell Telegram to deliver this bot's updates to `url` with our secret token, and only
    the kinds of update signoff handles; and set the commands its clients offer. Returns the
    bot's username."""
    token, secret = credentials(config)
    async with _setup_bot(token, config) as bot:
        await bot.set_webhook(
            url=url,
            secret_token=secret,
            allowed_updates=list(ALLOWED_UPDATES),
            drop_pending_updates=drop_pending,
        )
        await bot.set_my_commands(list(COMMANDS))
        return bot.username


async def delete_webhook(config: TelegramConfig) -> str:
    """Stop webhook delivery (updates wait at Telegram, for up to a day, until fetched)."""
    token, _ = credentials(config, webhook=False)
    async with _setup_bot(token, config) as bot:
        await bot.delete_webhook()
        return bot.username


async def migrated_chats(config: TelegramConfig, chat_ids: list[int]) -> dict[int, int]:
    """Which of these group chats Telegram says became a supergroup: old id -> new id. A
    notify target naming the old id still works (cards follow the migration), but the config
    should say the new one."""
    token, _ = credentials(config, webhook=False)
    moved: dict[int, int] = {}
    async with _setup_bot(token, config) as bot:
        for chat_id in chat_ids:
            try:
                await bot.get_chat(chat_id)
            except ChatMigrated as exc:
                moved[chat_id] = int(exc.new_chat_id)
            except TelegramError:
                continue  # not ours to judge here: posting says why, with the job's reason
    return moved


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
