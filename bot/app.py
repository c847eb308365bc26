"""Assembles the aiohttp application from config: the agent API, health, readiness and
metrics, and the background work (outbox runner, sweeper) that runs beside them.

This is the one place that knows every channel; channels plug in here as they arrive.
`signoff serve` runs `build_app` behind a TCP site; `signoff worker` runs `Background` alone.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import socket
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web

from bot.agent_actions import AgentActions
from bot.api import ApiContext, add_routes, errors_middleware, tenant_keys
from bot.clock import Clock, SystemClock
from bot.config import Config
from bot.delegations import Delegations
from bot.durations import parse_duration
from bot.errors import ConfigError
from bot.inbound import Inbound
from bot.metrics import CONTENT_TYPE, Metrics
from bot.operator import Operator
from bot.outbox.cards import CardJobs
from bot.outbox.delegations import DelegationJobs
from bot.outbox.jobs import JobKind
from bot.outbox.reminders import ReminderJobs
from bot.outbox.runner import Handler, OutboxRunner, OutboxSettings
from bot.outbox.webhooks import WebhookSender, secret_problem
from bot.routing import Directory
from bot.sweeper import Sweeper
from store.engine import is_sqlite, normalize_url
from store.migrate import (
    current_revision,
    ensure_current,
    head_revision,
    known_revisions,
    upgrade,
)
from store.repository import Store

if TYPE_CHECKING:  # bot/ never imports a channel at run time unless it is configured
    from channels.web import WebChannel

log = logging.getLogger("signoff.app")

# In-flight jobs get this long to finish on shutdown before they are cancelled and released.
_DRAIN_SECONDS = 3.0


def outbox_settings(config: Config) -> OutboxSettings:
    o = config.outbox
    return OutboxSettings(
        lease=parse_duration(o.lease),
        max_attempts=o.max_attempts,
        backoff_base=parse_duration(o.backoff_base),
        backoff_max=parse_duration(o.backoff_max),
        batch=o.batch,
        concurrency=o.concurrency,
        poll_interval=o.poll_interval,
        keep_done=parse_duration(o.keep_done),
        per_destination=o.per_destination,
        per_tenant=o.per_tenant,
        busy_lag=o.busy_lag,
        busy_concurrency=o.busy_concurrency,
        settle_window=o.settle_window,
        probe_wait=o.webhook_timeout,
    )


def outbox_handlers(
    store: Store,
    directory: Directory,
    clock: Clock,
    channels: Mapping[str, Any],
    session: aiohttp.ClientSession | None = None,
    *,
    kinds: Iterable[JobKind] = tuple(JobKind),
    webhook_timeout: float = 10.0,
    metrics: Metrics | None = None,
) -> dict[JobKind, Handler]:
    """The one handler table: which function performs each kind of outbox job. The server,
    the worker, the test servers and the benchmarks all run their outbox with it; one that
    performs only some kinds (a test that watches webhooks queue rather than go out) names
    them in `kinds`, and the rest stay queued. Webhooks need the HTTP `session`."""
    kinds = tuple(kinds)
    cards = CardJobs(store, directory, clock, channels)
    delegations = DelegationJobs(Delegations(store, directory, clock))
    table: dict[JobKind, Handler] = {
        JobKind.POST_CARD: cards.post,
        JobKind.UPDATE_CARD: cards.update,
        JobKind.NOTICE: cards.notice,
        JobKind.DELEGATION_STARTED: delegations.on_started,
        JobKind.DELEGATION_ENDED: delegations.on_ended,
        JobKind.REMINDER: ReminderJobs(store, directory, clock, channels).remind,
    }
    if session is not None:
        table[JobKind.WEBHOOK] = WebhookSender(
            session, directory, clock, timeout=webhook_timeout, metrics=metrics
        )
    elif JobKind.WEBHOOK in kinds:
        raise ValueError("webhook jobs need an HTTP session; pass one, or leave them out of kinds")
    return {kind: table[kind] for kind in kinds}


def build_channels(
    config: Config,
    store: Store,
    directory: Directory,
    clock: Clock,
    metrics: Metrics,
    *,
    telegram_polling: bool = False,
) -> dict[str, Any]:
    """The chat channels the config turns on, by name (the prefix of their notify targets)."""
    channels: dict[str, Any] = {}
    operator = Operator(store, directory, clock, metrics)
    delegations = Delegations(store, directory, clock)
    web: WebChannel | None = None
    if config.web is not None:
        from channels.web import WebChannel  # only deployments with [web] load Jinja2

        # Made first: chat cards link to its pages and chat commands send its sign-in links.
        web = WebChannel(
            config.web,
            str(config.server.public_url),
            store,
            directory,
            clock,
            operator,
            delegations,
        )
    if config.slack is not None:
        from channels.slack import SlackChannel  # only deployments with Slack load Bolt

        channels["slack"] = SlackChannel(
            config.slack, directory, operator, delegations, Inbound(store, clock), web=web
        )
    if config.telegram is not None:
        from channels.telegram import TelegramChannel  # only deployments with Telegram load PTB

        channels["telegram"] = TelegramChannel(
            config.telegram,
            directory,
            operator,
            delegations,
            Inbound(store, clock),
            polling=telegram_polling,
            web=web,
        )
    if web is not None:
        channels["web"] = web
    return channels


@asynccontextmanager
async def channels_running(channels: dict[str, Any]) -> AsyncIterator[None]:
    """Start the channels with a lifetime of their own (Telegram's); stop them, last first."""
    started: list[Any] = []
    try:
        for channel in channels.values():
            if hasattr(channel, "start"):
                await channel.start()
                started.append(channel)
        yield
    finally:
        for channel in reversed(started):
            try:
                await channel.stop()
            except Exception:
                log.exception("stopping the %s channel failed", channel.name)


@dataclass
class Background:
    """The outbox runner and the sweeper as tasks, started and stopped together."""

    config: Config
    store: Store
    directory: Directory
    clock: Clock
    metrics: Metrics
    channels: dict[str, Any] = field(default_factory=dict)
    runner: OutboxRunner | None = None
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self._session = aiohttp.ClientSession()
        handlers = outbox_handlers(
            self.store,
            self.directory,
            self.clock,
            self.channels,
            self._session,
            webhook_timeout=self.config.outbox.webhook_timeout,
            metrics=self.metrics,
        )
        self.runner = OutboxRunner(
            self.store,
            handlers,
            self.clock,
            outbox_settings(self.config),
            metrics=self.metrics,
        )
        sweeper = Sweeper(
            self.store,
            self.directory,
            self.clock,
            batch=self.config.sweeper.batch,
            metrics=self.metrics,
        )
        self._tasks = [
            asyncio.create_task(self.runner.run(self._stop, _DRAIN_SECONDS), name="outbox"),
            asyncio.create_task(
                sweeper.run(self.config.sweeper.interval, self._stop), name="sweeper"
            ),
        ]
        log.info("outbox runner %s and sweeper started", self.runner.worker)

    async def stop(self) -> None:
        """Let in-flight jobs finish briefly, then cancel; the runner hands back what it held."""
        self._stop.set()
        if self._tasks:
            _, pending = await asyncio.wait(self._tasks, timeout=_DRAIN_SECONDS + 2)
            for task in pending:
                task.cancel()
            for task in pending:
                with suppress(asyncio.CancelledError):
                    await task
        sender = self.runner.handlers.get(JobKind.WEBHOOK) if self.runner else None
        if isinstance(sender, WebhookSender):
            await sender.close()
        if self._session is not None:
            await self._session.close()


METRICS: web.AppKey[Metrics] = web.AppKey("signoff_metrics", Metrics)
STORE: web.AppKey[Store] = web.AppKey("signoff_store", Store)
CLOCK: web.AppKey[Clock] = web.AppKey("signoff_clock", object)  # type: ignore[arg-type]
CHANNELS: web.AppKey[dict[str, Any]] = web.AppKey("signoff_channels", dict)


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """Ready when the database answers and its schema is not behind what this code needs."""
    try:
        current = await asyncio.wait_for(current_revision(request.app[STORE].engine), 5)
    except Exception as exc:  # unreachable, timed out, refused: all mean "not ready"
        return web.json_response(
            {"status": "unavailable", "database": f"unreachable: {exc}"}, status=503
        )
    head = head_revision()
    if current is not None and current != head and current not in known_revisions():
        # Upgraded by a newer release during a rolling deploy; migrations are additive, so
        # this replica keeps serving until it is replaced.
        return web.json_response({"status": "ready", "schema": current, "needs": head})
    if current != head:
        return web.json_response(
            {
                "status": "unavailable",
                "database": f"schema {current or 'empty'}, needs {head}; run `signoff db upgrade`",
            },
            status=503,
        )
    return web.json_response({"status": "ready", "schema": current})


async def metrics(request: web.Request) -> web.Response:
    """The last background read of the figures (bot.metrics); a failed read keeps the last."""
    body = await request.app[METRICS].scrape(request.app[STORE], request.app[CLOCK])
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


async def stop_metrics(app: web.Application) -> None:
    await app[METRICS].close()


def build_app(
    config: Config,
    store: Store,
    *,
    clock: Clock | None = None,
    background: bool = True,
    metrics_registry: Metrics | None = None,
    telegram_polling: bool = False,
) -> web.Application:
    """The whole server. With `background`, the outbox runner and the sweeper run inside the
    application's lifetime (started on startup, drained on shutdown). `telegram_polling`
    fetches Telegram updates instead of serving its webhook (one process only)."""
    clock = clock or SystemClock()
    directory = config.directory()
    registry = metrics_registry or Metrics(since=clock.now(), refresh=config.metrics.refresh)
    app = web.Application(
        middlewares=[errors_middleware],
        # One byte over the limit still reaches us, so the 413 names the real limit.
        client_max_size=config.server.max_body_bytes + 1,
    )
    app[METRICS] = registry
    app[STORE] = store
    app[CLOCK] = clock
    channels = build_channels(
        config, store, directory, clock, registry, telegram_polling=telegram_polling
    )
    app[CHANNELS] = channels
    work = Background(config, store, directory, clock, registry, channels)
    if "slack" in channels:
        app.router.add_post("/slack/events", channels["slack"].handle)
    if "telegram" in channels and not telegram_polling:
        app.router.add_post("/telegram/webhook", channels["telegram"].handle)
    if "web" in channels:
        channels["web"].setup(app)
    add_routes(
        app,
        ApiContext(
            store=store,
            directory=directory,
            clock=clock,
            actions=AgentActions(store, directory, clock, registry),
            keys=tenant_keys(directory),
            max_body=config.server.max_body_bytes,
            claim_lease=parse_duration(config.server.claim_lease),
        ),
    )
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.on_cleanup.append(stop_metrics)

    async def channel_lifetime(_app: web.Application) -> AsyncIterator[None]:
        async with channels_running(channels):
            yield

    # Channels start before the outbox (which posts through them) and stop after it.
    app.cleanup_ctx.append(channel_lifetime)
    if background:

        async def lifetime(_app: web.Application) -> AsyncIterator[None]:
            await work.start()
            yield
            await work.stop()

        app.cleanup_ctx.append(lifetime)
    return app


# -- processes -------------------------------------------------------------------------------


def check_channels(config: Config, *, telegram_polling: bool = False) -> None:
    """Refuse a channel whose credentials are missing before anything touches the database."""
    if config.slack is not None:
        from channels.slack import check  # credentials, and a warning without a team_id

        check(config.slack)
    if telegram_polling:
        if config.telegram is None:
            raise ConfigError("--telegram-polling needs a [telegram] table in the config")
        if not normalize_url(config.database_url).startswith("sqlite"):
            raise ConfigError(
                "--telegram-polling is a development mode for one process on SQLite: replicas "
                "sharing a PostgreSQL database would each poll the same bot, and Telegram "
                "hands an update to only one of them (the others get 409 Conflict). Use the "
                "webhook (`signoff telegram set-webhook`) instead."
            )
    if config.web is not None:
        from channels.web import web_secret

        web_secret(config.web)
    if config.telegram is not None:
        from channels.telegram_setup import credentials as telegram_credentials

        telegram_credentials(config.telegram, webhook=not telegram_polling)


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


def check_config(config: Config, *, telegram_polling: bool = False) -> None:
    """What `serve` and `worker` (and `config check`) check before touching the database:
    refuses (ConfigError) what could not run, warns in the log about what would run degraded."""
    check_channels(config, telegram_polling=telegram_polling)
    check_webhook_secrets(config)


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
    elif is_sqlite(store.engine):
        before, after = await upgrade(store.engine)
        if before != after:
            log.info("schema upgraded from %s to %s", before or "empty", after)
    else:
        await ensure_current(store.engine)


def _signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)


async def run_server(
    config: Config,
    listen: str | None = None,
    *,
    telegram_polling: bool = False,
    sockets: list[socket.socket] | None = None,
    migrate: bool = True,
    announce_port: bool = True,
    on_ready: Callable[[], None] | None = None,
) -> None:
    """`signoff serve`: the application on HOST:PORT until SIGTERM or SIGINT, then a graceful
    stop: no new connections, in-flight requests finish, claimed outbox jobs are released.

    `sockets` already bound (by `serve --workers`, whose processes share them) replace
    `listen` (and stay open: they are the caller's); a worker of `serve --workers` neither
    migrates nor announces the port, its parent did both once."""
    owned = sockets is None
    if owned:
        check_config(config, telegram_polling=telegram_polling)
    sockets = listening_sockets(listen or config.server.listen) if owned else sockets
    store = Store.from_url(config.database_url)
    try:
        if migrate:
            await prepare_schema(store)
        app = build_app(config, store, telegram_polling=telegram_polling)
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
        log.info("signoff listening on http://%s:%d", host, port)


async def run_worker(config: Config) -> None:
    """`signoff worker`: the outbox runner and the sweeper, without the HTTP server."""
    check_config(config)
    store = Store.from_url(config.database_url)
    try:
        await prepare_schema(store)
        clock = SystemClock()
        directory = config.directory()
        registry = Metrics(since=clock.now(), refresh=config.metrics.refresh)
        channels = build_channels(config, store, directory, clock, registry)
        work = Background(config, store, directory, clock, registry, channels)
        stop = asyncio.Event()
        _signals(stop)
        # Bound before any background task starts, so a port in use stops the worker at once.
        monitor = await serve_metrics(config.worker.metrics_listen, store, clock, registry)
        try:
            async with channels_running(channels):
                await work.start()
                log.info("signoff worker running")
                await stop.wait()
                log.info("shutting down")
                await work.stop()
        finally:
            if monitor is not None:
                await monitor.cleanup()
    finally:
        await store.close()


async def serve_metrics(
    listen: str | None, store: Store, clock: Clock, registry: Metrics
) -> web.AppRunner | None:
    """`[worker] metrics_listen`: /metrics (and /healthz) of a worker on HOST:PORT, for the
    counters only this process has (its outbox attempts, dead jobs by reason, the sweeper's
    transitions); None when unset."""
    if listen is None:
        return None
    app = web.Application()
    app[METRICS], app[STORE], app[CLOCK] = registry, store, clock
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.on_cleanup.append(stop_metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    host, _, port = listen.rpartition(":")
    try:
        await web.TCPSite(runner, host, int(port)).start()
    except OSError as exc:
        await runner.cleanup()
        raise ConfigError(
            f"worker.metrics_listen: cannot listen on {listen}: {exc.strerror or exc}"
        ) from exc
    for address in runner.addresses:
        # Tests and scripts read the bound port from this line (metrics_listen = "HOST:0").
        log.info("signoff worker metrics on http://%s:%d/metrics", address[0], address[1])
    return runner
