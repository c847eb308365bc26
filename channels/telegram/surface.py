"""Telegram's declaration to the core (bot.surfaces): its `[telegram]` table, its notify
targets (`telegram:CHAT_ID`, `telegram:CHAT_ID/TOPIC_ID`, `telegram:dm`), a principal's
Telegram user id and the service accounts refused as one, its startup check and its channel.

Light on purpose: it imports no Telegram SDK, so every command can read the registry; PTB is
loaded by the factory and the check, which run only when `[telegram]` is configured.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from bot.config import Config
from bot.errors import ConfigError, SignoffError
from bot.surfaces import Services, StartupCheck, Surface
from channels.telegram.config import TELEGRAM_SERVICE_ACCOUNTS, TelegramConfig
from store.engine import normalize_url

if TYPE_CHECKING:
    from channels.base import Channel

log = logging.getLogger("signoff.cli")


def _service_account(account: int) -> str | None:
    if account not in TELEGRAM_SERVICE_ACCOUNTS:
        return None
    return (
        f"{account} is Telegram's {TELEGRAM_SERVICE_ACCOUNTS[account]} account, which stands "
        "for anyone posting anonymously, not one person; use the person's own user id "
        "and ask them to turn off anonymity (Remain anonymous) in the group to decide"
    )


def _build(services: Services) -> Channel:
    from channels.telegram.channel import TelegramChannel  # only deployments with Telegram load PTB

    return TelegramChannel(
        services.table,
        services.directory,
        services.operator,
        services.delegations,
        services.memory,
        polling=services.polling,
        web=services.channel("web"),  # type: ignore[arg-type]
    )


async def _stale_chats(table: TelegramConfig, config: Config) -> None:
    """Warn about a `telegram:CHAT_ID` notify target whose group Telegram has upgraded to a
    supergroup (asking Telegram; serve only finds out when a card is refused)."""
    from channels.telegram.setup import migrated_chats  # only Telegram deployments load PTB

    chats = sorted(
        {
            int(target.chat)
            for route in config.directory().routes
            for target in route.notify
            if target.surface == "telegram" and target.chat.lstrip("-").isdigit()
        }
    )
    if not chats:
        return
    try:
        moved = await migrated_chats(table, chats)
    except SignoffError as exc:
        log.warning("could not ask Telegram about the configured chats: %s", exc.message)
        return
    for old, new in moved.items():
        log.warning(
            "notify target telegram:%s is stale: that group became the supergroup %s; cards "
            "follow it, but write telegram:%s in the config",
            old,
            new,
            new,
        )


def _check(table: TelegramConfig | None, options: StartupCheck) -> None:
    if options.polling:
        if table is None:
            raise ConfigError("--telegram-polling needs a [telegram] table in the config")
        if not normalize_url(options.database_url).startswith("sqlite"):
            raise ConfigError(
                "--telegram-polling is a development mode for one process on SQLite: replicas "
                "sharing a PostgreSQL database would each poll the same bot, and Telegram "
                "hands an update to only one of them (the others get 409 Conflict). Use the "
                "webhook (`signoff telegram set-webhook`) instead."
            )
    if table is not None:
        from channels.telegram.setup import credentials

        credentials(table, webhook=not options.polling)


SURFACE = Surface(
    name="telegram",
    where="in Telegram",
    config=TelegramConfig,
    factory=_build,
    target_forms=(
        "telegram:CHAT_ID",
        "telegram:CHAT_ID/TOPIC_ID",
        "telegram:dm",
    ),
    target_pattern=r"dm|-?\d+|-100\d+/\d+",
    # A Telegram user id (positive; negative ids are group chats, not people).
    account=Annotated[int, Field(gt=0)],
    refuse_account=_service_account,
    check=_check,
    probe=_stale_chats,
)
