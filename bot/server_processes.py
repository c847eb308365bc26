"""`signoff serve --workers N`: N server processes behind one listening socket.

One Python process runs on one core. The parent binds the port and brings the schema up to
date once, then forks N workers that inherit the bound socket (the kernel hands each new
connection to one of them) and each build their own application and database pool. The
workers share nothing else but the database, exactly as replicas on several hosts do, so
everything that makes replicas safe (conditional updates, the outbox's leases, the sweeper's
row locks) makes workers safe: every worker runs the outbox runner and the sweeper.

With `--background-process` the outbox runner and the sweeper run in one more process of
their own (what `signoff worker` runs), and the server processes only serve requests: a
click is then never queued behind card updates and webhooks on one core, and those go out
on another (measured in docs/benchmarks.md, "Background work in a process of its own").

The parent only supervises: it says it is listening once every worker serves; SIGTERM or
SIGINT is passed on to every worker, each drains as a lone `serve` does, and the parent
exits once all have. A worker that dies after it was serving is started again; one that
dies before (a database that refuses it, say) would only fail again, so the parent stops
all and exits 1. If the parent itself is killed, the kernel kills its workers
(PR_SET_PDEATHSIG): a `kill -9` of the server is a crash of the whole server, as with one
process.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import multiprocessing
import os
import signal
import socket
from multiprocessing.connection import wait
from typing import Any

from bot.api_keys import check_tenant_keys
from bot.config import Config
from bot.errors import ConfigError
from bot.server import (
    announce,
    check_config,
    event_loop,
    listening_sockets,
    prepare_schema,
    run_loop,
    run_server,
    run_worker,
)
from store.engine import normalize_url
from store.repository import Store

log = logging.getLogger("signoff.workers")

_PR_SET_PDEATHSIG = 1


def serve(
    config: Config,
    listen: str | None,
    *,
    workers: int,
    telegram_polling: bool = False,
    background_process: bool | None = None,
) -> int:
    """Run `serve` with `workers` server processes (and, with `background_process`, one
    for the outbox and the sweeper; None: `background_by_default`); returns the exit
    code."""
    if background_process is None:
        background_process = background_by_default(config, telegram_polling)
    if workers < 1:
        raise ConfigError(f"--workers must be at least 1, not {workers}")
    if workers > 1 and telegram_polling:
        raise ConfigError(
            "--telegram-polling fetches updates in one process only: use --workers 1, or "
            "Telegram's webhook (`signoff telegram set-webhook`) with several workers"
        )
    check_config(config, polling=telegram_polling)
    # What each worker would refuse while building its application, refused once, here.
    check_tenant_keys(config.directory())
    sockets = listening_sockets(listen or config.server.listen)
    try:
        if workers == 1 and not background_process:
            run_loop(run_server(config, polling=telegram_polling, sockets=sockets))
            return 0
        # Migrating once, here, spares N workers racing to upgrade one SQLite file. The
        # store is closed (its driver threads gone) before any fork.
        asyncio.run(_prepare(config))
        return _Supervisor(
            config, sockets, workers, background_process, polling=telegram_polling
        ).run()
    finally:
        for sock in sockets:
            sock.close()


def background_by_default(config: Config, polling: bool = False) -> bool:
    """Whether `serve` runs the background work in a process of its own unless told: on
    PostgreSQL when there is a second core for it, never on SQLite. Measured at 100
    decisions/s on 2 cores (docs/benchmarks.md, "Background work in a process of its
    own"): on PostgreSQL it made clicks and effects sooner on every path; on SQLite it made
    effects sooner but clicks wait for its writes on the one write lock (a process's own
    writes yield to its decisions, another's do not), in two runs of three by seconds."""
    if polling:
        return False
    postgres = normalize_url(config.database_url).startswith("postgresql")
    return postgres and (os.cpu_count() or 1) >= 2


async def _prepare(config: Config) -> None:
    store = Store.from_url(config.database_url)
    try:
        await prepare_schema(store)
    finally:
        await store.close()


class _Supervisor:
    def __init__(
        self,
        config: Config,
        sockets: list[socket.socket],
        workers: int,
        background_process: bool = False,
        *,
        polling: bool = False,
    ) -> None:
        self.config = config
        self.sockets = sockets
        self.count = workers
        # The slot past the server processes' runs the background work, when asked for.
        self.background_slot = workers if background_process else None
        self.polling = polling
        self.context = multiprocessing.get_context("fork")
        self.procs: dict[int, Any] = {}  # slot -> Process
        self.ready: dict[int, Any] = {}  # slot -> Event, set once its worker serves
        self.stopping = False

    def run(self) -> int:
        previous = {sig: signal.signal(sig, self._stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            slots = self.count + (self.background_slot is not None)
            for slot in range(slots):
                if self.stopping:
                    break
                self._start(slot)
            return self._watch()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _start(self, slot: int) -> None:
        ready = self.context.Event()
        background = slot == self.background_slot
        if background:
            target: Any = _background_main
            args: tuple[Any, ...] = (self.config, os.getpid(), ready)
        else:
            target = _worker_main
            background_here = self.background_slot is None
            args = (self.config, self.sockets, os.getpid(), ready, background_here, self.polling)
        proc = self.context.Process(
            target=target, args=args, name=f"signoff-worker-{slot}", daemon=False
        )
        proc.start()
        self.procs[slot], self.ready[slot] = proc, ready
        log.info(
            "worker %d started (pid %d)%s",
            slot,
            proc.pid,
            ": the outbox and the sweeper" if background else "",
        )
        if self.stopping:  # SIGTERM came while it was forked, before _stop could see it
            os.kill(proc.pid, signal.SIGTERM)

    def _stop(self, signum: int, _frame: Any) -> None:
        if not self.stopping:
            log.info("shutting down %d workers", len(self.procs))
        self.stopping = True
        for proc in self.procs.values():
            if proc.is_alive():
                os.kill(proc.pid, signal.SIGTERM)

    def _watch(self) -> int:
        code = 0
        announced = False
        while self.procs:
            # Until every worker serves, looked at often: "listening" is said only then.
            wait([p.sentinel for p in self.procs.values()], timeout=1.0 if announced else 0.05)
            if not (announced or self.stopping) and all(r.is_set() for r in self.ready.values()):
                announced = True
                announce(self.sockets)
                log.info(
                    "signoff serving with %d workers%s (event loop: %s)",
                    self.count,
                    "" if self.background_slot is None else " and a background process",
                    event_loop(),
                )
            for slot, proc in list(self.procs.items()):
                if proc.is_alive():
                    continue
                proc.join()
                del self.procs[slot]
                if self.stopping:
                    continue
                log.error("worker %d (pid %d) exited with %s", slot, proc.pid, proc.exitcode)
                if self.ready[slot].is_set():
                    self._start(slot)
                else:
                    log.error("worker %d died before serving: stopping the server", slot)
                    code = 1
                    self._stop(signal.SIGTERM, None)
        return code


def _worker_main(
    config: Config,
    sockets: list[socket.socket],
    parent: int,
    ready: Any,
    background: bool = True,
    polling: bool = False,
) -> None:
    _as_child(parent)
    run_loop(
        run_server(
            config,
            sockets=sockets,
            migrate=False,
            announce_port=False,
            on_ready=ready.set,
            background=background,
            polling=polling,
        )
    )


def _background_main(config: Config, parent: int, ready: Any) -> None:
    """The background process of `--background-process`: `signoff worker`'s work."""
    _as_child(parent)
    run_loop(run_worker(config, migrate=False, on_ready=ready.set))


def _as_child(parent: int) -> None:
    """A forked process of the server: dies with its parent, and leaves SIGTERM and SIGINT
    to the loop it runs (run_server and run_worker install their own handlers on it)."""
    _die_with_parent(parent)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)


def _die_with_parent(parent: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the parent's SIGTERM still reaches us
        return
    if os.getppid() != parent:  # the parent died before the call above took effect
        os._exit(1)
