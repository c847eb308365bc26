"""The `[telegram]` table and Telegram's service accounts: read by the declaration
(channels/telegram/surface.py) and by the channel it builds, so they live apart from both and
import no Telegram SDK."""

from __future__ import annotations

from bot.config import EnvVar, Strict
from bot.validation import HttpUrl

# Accounts Telegram puts in `from` when nobody in particular sent a message: an anonymous group
# admin (GroupAnonymousBot), a post forwarded from a linked channel (Telegram), a message sent
# on behalf of a channel (Channel_Bot). Linking one to a principal would let everyone it
# stands for decide as that principal.
TELEGRAM_SERVICE_ACCOUNTS = {
    1087968824: "GroupAnonymousBot",
    777000: "Telegram",
    136817688: "Channel_Bot",
}


class TelegramConfig(Strict):
    bot_token_env: EnvVar = "TELEGRAM_BOT_TOKEN"
    webhook_secret_env: EnvVar = "TELEGRAM_WEBHOOK_SECRET"
    api_base_url: HttpUrl = "https://api.telegram.org/bot"
