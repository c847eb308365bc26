"""Process management: what `signoff serve` and `signoff worker` do around the application
(bot.app) and the background work (bot.bootstrap): the checks before anything touches the
database, the listening sockets, the schema, signals and a graceful stop.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import socket
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any, TypeVar

from aiohttp import web

from bot import surfaces
from bot.app import build_app
from bot.bootstrap import bootstrap, channels_running
from bot.config import Config
from bot.errors import ConfigError
from bot.health import serve_metrics
from bot.outbox.webhooks import secret_problem
from bot.surfaces import StartupCheck
from store.engine import is_sqlite
from store.migrate import (
    current_revision,
    ensure_current,
    head_revision,
    known_revisions,
    ready_to_use,
)
from store.repository import Store

log = logging.getLogger("signoff.app")


def check_channels(config: Config, *, polling: bool = False) -> None:
    """Refuse a channel whose credentials are missing before anything touches the database:
    each registered surface checks its own table (bot.surfaces)."""
    options = StartupCheck(polling=polling, database_url=config.database_url)
    for surface in surfaces.registered():
        surface.check(config.surface_table(surface.name), options)


def check_webhook_secrets(config: Config, environ: Mapping[str, str] = os.environ) -> None:
    """Warn (in the log) about a tenant with a webhook_url whose webhooks cannot be signed:
    each would fail, since unsigned webhooks are never sent, until its variable is fixed."""
    for tenant in config.directory().tenants.values():
        if tenant.webhook_url is None:
            continue
        if not tenant.webhook_secret_env:
            log.warning(
                "tenant %s has a webhook_url but no webhook_secret_env: its decision webhooks "
                "will fail (unsigned webhooks are never sent)",
                tenant.name,
            )
        for variable in tenant.webhook_secret_env:
            secret = environ.get(variable)
            problem = "it is not set" if not secret else secret_problem(secret)
            if problem is not None:
                log.warning(
                    "tenant %s: $%s: %s; its decision webhooks will fail until it is fixed",
                    tenant.name,
                    variable,
                    problem,
                )


def check_config(config: Config, *, polling: bool = False) -> None:
    """What `serve` and `worker` (and `config check`) check before touching the database:
    refuses (ConfigError) what could not run, warns in the log about what would run degraded."""
    check_channels(config, polling=polling)
    check_webhook_secrets(config)
    if not config.tenants:
        log.warning(
            "no [[tenants]] in the config: the agent API accepts no key, so no agent can ask "
            "for an approval (docs/reference.md, [[tenants]])"
        )


def listening_sockets(listen: str) -> list[socket.socket]:
    """HOST:PORT bound and listening now, before anything else starts, so that a port in use
    stops `serve` with one line instead of after its background tasks began."""
    host, _, port_text = listen.rpartition(":")
    port = int(port_text)
    try:
        found = socket.getaddrinfo(
            host.strip("[]") or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise ConfigError(f"cannot listen on {listen}: {exc.strerror}") from None
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(found):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            # As asyncio's create_server: a restart need not wait out TIME_WAIT (a port that
            # another process listens on is still refused).
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(sockets) > 1:  # every address on the port the first got
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sock.bind(address)
            sock.listen(128)
            sock.setblocking(False)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        reason = exc.strerror or str(exc)
        raise ConfigError(f"cannot listen on {listen}: {reason[:1].lower()}{reason[1:]}") from None
    return sockets


async def prepare_schema(store: Store, *, dry_run: bool = False) -> None:
    """The embedded default (SQLite) upgrades itself; a shared PostgreSQL database is upgraded
    deliberately, with `signoff db upgrade`, and an old one is refused here. `dry_run` (for
    `config check`) changes nothing: it says what serve would upgrade."""
    current = await current_revision(store.engine)
    if current is not None and current not in known_revisions():
        log.warning(
            "schema %s is newer than this signoff (%s); not migrating", current, head_revision()
        )
    elif is_sqlite(store.engine) and dry_run:
        if current != head_revision():
            log.warning(
                "schema %s is behind %s: serve upgrades it when it starts (or run "
                "`signoff db upgrade`)",
                current or "empty",
                head_revision(),
            )
    elif dry_run:
        await ensure_current(store.engine)
    elif upgraded := await ready_to_use(store.engine):  # as every CLI command does
        log.info("schema upgraded from %s to %s", upgraded[0] or "empty", upgraded[1])


T = TypeVar("T")


def event_loop() -> str:
    """The event loop `serve` and `worker` run on: uvloop where it is installed (a
    dependency on Linux), asyncio's own elsewhere."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    return "uvloop"


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run a long-lived process's coroutine on `event_loop()`: uvloop spends about a tenth
    less CPU per click and answers far sooner when the server is saturated (issue 27)."""
    if event_loop() == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(main)
    return asyncio.run(main)


def _signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)


async def run_server(
    config: Config,
    listen: str | None = None,
    *,
    polling: bool = False,
    sockets: list[socket.socket] | None = None,
    migrate: bool = True,
    announce_port: bool = True,
    on_ready: Callable[[], None] | None = None,
    background: bool = True,
) -> None:
    """`signoff serve`: the application on HOST:PORT until SIGTERM or SIGINT, then a graceful
    stop: no new connections, in-flight requests finish, claimed outbox jobs are released.

    `polling`: a surface that can fetch its updates instead of serving a webhook does
    (`--telegram-polling`; one process). `sockets` already bound (by `serve --workers`, whose
    processes share them) replace `listen` (and stay open: they are the caller's); a worker
    of `serve --workers` neither migrates nor announces the port, its parent did both once.
    Without `background` the outbox runner and the sweeper are left to another process
    (`serve --background-process`)."""
    owned = sockets is None
    if owned:
        check_config(config, polling=polling)
    sockets = listening_sockets(listen or config.server.listen) if owned else sockets
    store = Store.from_url(config.database_url)
    try:
        if migrate:
            await prepare_schema(store)
        app = build_app(config, store, polling=polling, background=background)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=5.0)
        # Starts the channels and the background tasks: only once the port is ours.
        await runner.setup()
        for sock in sockets:
            await web.SockSite(runner, sock).start()
        stop = asyncio.Event()
        _signals(stop)
        # What exists now (modules, the app, SQLAlchemy's and pydantic's tables) lives as long
        # as the process: out of the collector's sight, a full collection scans what requests
        # made, not all of it (it paused every request in flight for 40-80 ms).
        gc.collect()
        gc.freeze()
        if announce_port:
            announce(sockets)
        if on_ready is not None:
            on_ready()
        await stop.wait()
        log.info("shutting down")
        await runner.cleanup()
    finally:
        if owned:
            for sock in sockets:
                sock.close()
        await store.close()


def announce(sockets: Iterable[socket.socket]) -> None:
    for sock in sockets:
        host, port = sock.getsockname()[:2]
        # Tests and scripts read the bound port from this line (listen = "HOST:0").
        log.info("signoff listening on http://%s:%d (event loop: %s)", host, port, _running())


def _running() -> str:
    """The running loop's kind, as the startup line says it."""
    try:
        module = type(asyncio.get_running_loop()).__module__
    except RuntimeError:  # no loop here (serve --workers' supervisor): its workers' loop
        return event_loop()
    return "uvloop" if module.startswith("uvloop") else "asyncio"


async def run_worker(
    config: Config, *, migrate: bool = True, on_ready: Callable[[], None] | None = None
) -> None:
    """`signoff worker`: the outbox runner and the sweeper, without the HTTP server (also the
    background process of `serve --background-process`, whose parent migrated already)."""
    check_config(config)
    store = Store.from_url(config.database_url)
    try:
        if migrate:
            await prepare_schema(store)
        core = bootstrap(config, store)
        work = core.background()
        stop = asyncio.Event()
        _signals(stop)
        # Bound before any background task starts, so a port in use stops the worker at once.
        monitor = await serve_metrics(config.worker.metrics_listen, store, core.clock, core.metrics)
        try:
            async with channels_running(core.channels):
                await work.start()
                log.info("signoff worker running (event loop: %s)", _running())
                if on_ready is not None:
                    on_ready()
                await stop.wait()
                log.info("shutting down")
                await work.stop()
        finally:
            if monitor is not None:
                await monitor.cleanup()
    finally:
        await store.close()
