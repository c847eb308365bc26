"""`main`, what the `signoff` script calls: parse the command line, load the configuration,
run the command, and turn its failure into one line on stderr and an exit status (1 for an
expected failure, 2 for a usage error, 130 for Ctrl-C)."""

from __future__ import annotations

import asyncio
import gc
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from bot import logs
from bot.cli.context import EXIT_REFUSED, Context, Handler
from bot.cli.parser import build_parser
from bot.cli.processes import cmd_serve, cmd_worker
from bot.cli.rendering import safe
from bot.errors import SignoffError

if TYPE_CHECKING:
    import argparse

    from bot.config import Config


async def _run(config: Config, args: argparse.Namespace) -> int:
    from bot.clock import SystemClock
    from store.migrate import ready_to_use
    from store.repository import Store

    store = Store.from_url(config.database_url)
    try:
        if getattr(args, "check_schema", True) and (upgraded := await ready_to_use(store.engine)):
            # On stderr: stdout stays the command's own answer (`--json` included).
            before, after = upgraded
            said = f"signoff: upgraded the database schema from {before or 'empty'} to {after}"
            print(said, file=sys.stderr)
        ctx = Context(config, store, config.directory(), SystemClock())
        handler: Handler = args.handler
        return await handler(ctx, args)
    finally:
        await store.close()


def main(argv: Sequence[str] | None = None) -> int:
    try:
        try:
            return _main(argv)
        finally:
            # Flushed here, inside the try: when the reader has gone (`| head -1`) this is the
            # write that fails, not the interpreter's own flush at exit, which cannot be caught.
            sys.stdout.flush()
    except BrokenPipeError:
        # As Python's docs advise (signal module, "Note on SIGPIPE"): point stdout at
        # /dev/null so nothing tries to write to the closed pipe again, and end quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_REFUSED


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "standalone", None) is not None:  # needs no configuration
        return int(args.standalone())
    try:
        # Loading the config loads SQLAlchemy and pydantic: thousands of long-lived objects,
        # which the collector would otherwise scan over and over while they are made (about
        # 20 ms of `approvals list`). It is back on before any command starts.
        gc.disable()
        try:
            from bot.config import load_config

            config = load_config(args.config)
        finally:
            gc.enable()
        if getattr(args, "process", None) is not None:
            logs.setup(args.log_format)
            if args.process in (cmd_serve, cmd_worker):  # each runs its own event loop
                return int(args.process(config, args))
            asyncio.run(args.process(config, args))
            return 0
        if getattr(args, "offline", None) is not None:  # needs no database
            return asyncio.run(args.offline(config, args))
        if getattr(args, "log_format", None) is not None:
            # A decision made here is logged like the server's, for monitoring to see.
            logs.setup(args.log_format)
        return asyncio.run(_run(config, args))
    except SignoffError as exc:
        # Messages quote input (unknown keys, bad values): never let it drive the terminal.
        print(f"signoff: {safe(exc.message)}", file=sys.stderr)
        return EXIT_REFUSED
    except KeyboardInterrupt:
        return 130
