"""`signoff` commands as processes forked from one that has already imported signoff.

A command run as `python -m bot.cli` spends one to two seconds of CPU importing the code
before it does anything; the suite's hundreds of commands and servers made that minutes. Here
one server process per test process (multiprocessing's forkserver) imports the CLI and what
its commands load once, and forks a child per command. The child is a process of its own, as
the command's user would have: its own pid, environment, working directory, standard streams
on fresh file descriptors, logging, signals and exit status; several run at once for real, and
`kill -9` kills it. What it is not is a fresh interpreter: tests of start-up (what `signoff`
imports, how fast it answers) exec `python -m bot.cli` instead.
"""

from __future__ import annotations

import atexit
import io
import multiprocessing
import multiprocessing.connection
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from functools import cache
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess

# What commands and servers import when they run, loaded once in the fork server.
PRELOAD = [
    "bot.cli",  # imports every module of the package; named here so the list says so
    "bot.cli.run",
    "bot.cli.parser",
    "bot.cli.context",
    "bot.cli.rendering",
    "bot.cli.approvals",
    "bot.cli.delegations",
    "bot.cli.operations",
    "bot.cli.deployment",
    "bot.cli.processes",
    "bot.config",
    "bot.app",
    "bot.server",
    "bot.operator",
    "bot.server_processes",
    "store.migrate",
    "store.repository",
    "channels.slack.channel",
    "channels.telegram.channel",
    "channels.web.channel",
]


def command(args: Sequence[str], cwd: str, env: Mapping[str, str], out: str, err: str) -> None:
    """The child: become the command's process, run it, exit with its status."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    for fd, path in ((1, out), (2, err)):
        os.dup2(os.open(path, os.O_WRONLY | os.O_APPEND), fd)
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


# Tests start and wait for commands from several threads at once (asyncio.to_thread). A
# process's exit status is read once, from a pipe, by whoever polls it first, and starting a
# process polls every other one (multiprocessing's cleanup of finished children): two threads
# polling one process at once leave the second with no status to read, which multiprocessing
# reports as exit code 255. So every start and every poll holds this lock.
_polling = threading.Lock()
_servers: list[BaseProcess] = []


def start(
    args: Sequence[str],
    cwd: str,
    env: Mapping[str, str],
    out: str,
    err: str,
    *,
    server: bool = False,
) -> BaseProcess:
    """Start `signoff ARGS` with stdout and stderr appended to the files `out` and `err`. A
    `server` may fork processes of its own (`serve --workers`); it is killed, if still
    running, when this process exits."""
    process = _context().Process(
        target=command, args=(list(args), cwd, dict(env), out, err), daemon=not server
    )
    with _polling:
        process.start()
        if server:
            _servers.append(process)
    return process


@atexit.register  # before multiprocessing's own exit handler, which would wait for them
def _kill_servers() -> None:
    for process in _servers:
        if exit_code(process) is None:
            process.kill()


def exit_code(process: BaseProcess, timeout: float | None = 0) -> int | None:
    """The process's exit code (negative: the signal that ended it), waiting up to `timeout`
    seconds for it to end (None: as long as it takes); None if it still runs."""
    if timeout != 0:
        multiprocessing.connection.wait([process.sentinel], timeout)
    with _polling:
        return process.exitcode


class ForkedProcess:
    """A forked command seen as `subprocess.Popen` shows a process: pid, poll, wait, signals
    and returncode (negative: the signal that ended it). Safe to use from several threads
    (a test and the thread reading the server's log)."""

    def __init__(self, process: BaseProcess) -> None:
        self.process = process
        assert process.pid is not None
        self.pid: int = process.pid

    @property
    def returncode(self) -> int | None:
        return self.poll()

    def poll(self) -> int | None:
        return exit_code(self.process)

    def wait(self, timeout: float | None = None) -> int:
        code = exit_code(self.process, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"signoff (pid {self.pid})", timeout or 0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)
