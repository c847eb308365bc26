"""`signoff` commands as processes forked from one that has already imported signoff.

A command run as `python -m bot.cli` spends about a second of CPU importing the code before
it does anything; hundreds of such commands were minutes of the suite. Here one server
process per test process (multiprocessing's forkserver) imports the CLI and what its commands
load once, and forks a child per command. The child is a process of its own, as the command's
user would have: its own environment, working directory, standard streams on fresh file
descriptors, logging, exit status; several run at once for real. What it is not is a fresh
interpreter: tests of start-up (what `signoff` imports, how fast it answers) or of signals use
real subprocesses.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from functools import cache
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess

# What the commands import when they run, loaded once in the fork server.
PRELOAD = ["bot.cli", "bot.config", "bot.app", "bot.operator", "store.migrate", "store.repository"]


def command(args: Sequence[str], cwd: str, env: Mapping[str, str], out: str, err: str) -> None:
    """The child: become the command's process, run it, exit with its status."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    for fd, path in ((1, out), (2, err)):
        os.dup2(os.open(path, os.O_WRONLY | os.O_TRUNC), fd)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, closefd=False), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8")
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False), encoding="utf-8", line_buffering=True
    )
    from bot.cli import main

    code = main(list(args))
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)


@cache
def _context() -> ForkServerContext:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__, *PRELOAD])
    return context


# Tests start commands from several threads at once (asyncio.to_thread).
_starting = threading.Lock()


def start(
    args: Sequence[str], cwd: str, env: Mapping[str, str], out: str, err: str
) -> BaseProcess:
    process = _context().Process(
        target=command, args=(list(args), cwd, dict(env), out, err), daemon=True
    )
    with _starting:
        process.start()
    return process
