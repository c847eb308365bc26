"""The transactional outbox: what a change causes outside the database.

A change states its effects as data (bot.effects); `jobs` turns them into jobs queued in the
change's own transaction, and is installed as bot.effects' outbox by importing this package;
the runner (`runner`) performs them later, from any replica, with retries: decision webhooks
(`webhooks`), chat cards and notices (`cards`), and what a delegation's start and end cause
(`delegations`). The handler table that maps each `JobKind` to its handler is built in one
place, `bot.bootstrap.outbox_handlers`.
"""

from bot.outbox import jobs as jobs  # installs the outbox in bot.effects (see above)
