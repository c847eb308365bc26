"""The long-running commands: `serve`, `worker` and `demo`. Each loads the server only when
it starts, never when another command runs."""

from __future__ import annotations

import argparse
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bot.config import Config


def cmd_serve(config: Config, args: argparse.Namespace) -> int:
    """`signoff serve`: runs its own event loop, one per worker process."""
    from bot.server_processes import serve

    # One server process unless asked: measured on both databases, a second worker on the
    # same cores made clicks slower until one worker was saturated; the background process's
    # default is the database's (bot.server_processes.background_by_default).
    workers = 1 if args.workers is None else args.workers
    return serve(
        config,
        args.listen,
        workers=workers,
        telegram_polling=args.telegram_polling,
        background_process=args.background_process,
    )


def cmd_worker(config: Config, args: argparse.Namespace) -> int:
    """`signoff worker`: the outbox runner and the sweeper, no HTTP; runs its own event loop
    (uvloop where installed, bot.server.run_loop)."""
    from bot.server import run_loop, run_worker

    run_loop(run_worker(config))
    return 0


async def cmd_demo(config: Config, args: argparse.Namespace) -> None:
    """`signoff demo`: the real server on its own shipped config (bot/demo.toml) and a
    database of its own; the `config` of --config or $SIGNOFF_CONFIG is not used."""
    from bot.demo import run_demo  # only the demo reads its config and story

    if not args.verbose:
        # The links and the story are the output; the server's log would bury them.
        logging.getLogger().setLevel(logging.WARNING)
    await run_demo(args.listen, args.dir)
