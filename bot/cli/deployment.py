"""Setting a deployment up, with no database session of the CLI's own: `config check` (every
check `serve` makes at start), the Telegram webhook, and a new webhook secret."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING

from bot import logs, surfaces
from bot.cli.rendering import emit_json
from bot.errors import ConfigError

if TYPE_CHECKING:
    from bot.config import Config
    from channels.telegram.config import TelegramConfig

log = logging.getLogger("signoff.cli")


class _Counter(logging.Handler):
    """Counts the warnings logged while the checks run (they are printed as they come)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


async def cmd_config_check(config: Config, args: argparse.Namespace) -> int:
    """Every check `serve` makes when it starts, through the very functions it calls: a
    refusal there is a refusal here (exit 1); its warnings are printed on stderr."""
    from bot.api_keys import tenant_keys
    from bot.server import check_config, prepare_schema
    from store.engine import new_sqlite_file
    from store.repository import Store

    logs.setup("text", logging.WARNING)
    counter = _Counter()
    logging.getLogger().addHandler(counter)
    check_config(config)
    tenant_keys(config.directory())  # serve reads the API keys when it builds the app
    if (new := new_sqlite_file(config.database_url)) is not None:
        # Opening it would create it: a check leaves nothing behind.
        logging.getLogger("signoff.app").warning(
            "the SQLite database %s does not exist yet; serve creates it", new
        )
    else:
        store = Store.from_url(config.database_url)
        try:
            await prepare_schema(store, dry_run=True)
        finally:
            await store.close()
    for surface in surfaces.registered():  # what each surface asks its platform
        table = config.surface_table(surface.name)
        if table is not None and surface.probe is not None:
            await surface.probe(table, config)
    if args.show:
        emit_json(config.masked())
    warned = f", {counter.count} warning(s) above" if counter.count else ""
    print(f"config OK: serve would start{warned}", file=sys.stderr)
    return 0


def _telegram(config: Config) -> TelegramConfig:
    table = config.surface_table("telegram")
    if table is None:
        raise ConfigError(
            "the config has no [telegram] table; add one (docs/channels.md shows how)"
        )
    return table  # type: ignore[return-value]


async def cmd_telegram_set_webhook(config: Config, args: argparse.Namespace) -> int:
    from channels.telegram.setup import set_webhook  # only Telegram commands load PTB

    url = args.url or f"{config.server.public_url.rstrip('/')}/telegram/webhook"
    if not url.startswith("https://"):
        print(
            f"signoff: warning: Telegram only delivers to https:// URLs; {url} will be "
            "refused unless a local Bot API server is in between",
            file=sys.stderr,
        )
    bot = await set_webhook(_telegram(config), url, drop_pending=args.drop_pending_updates)
    print(f"Telegram delivers updates for @{bot} to {url} (with the secret token)")
    return 0


async def cmd_telegram_delete_webhook(config: Config, args: argparse.Namespace) -> int:
    from channels.telegram.setup import delete_webhook

    bot = await delete_webhook(_telegram(config))
    print(f"Telegram no longer delivers updates for @{bot} to a webhook")
    return 0


def cmd_webhook_secret() -> int:
    """32 random bytes in the `whsec_<base64>` form every Standard Webhooks library reads."""
    import base64
    import secrets

    print("whsec_" + base64.b64encode(secrets.token_bytes(32)).decode())
    return 0
