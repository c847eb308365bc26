"""The one assembly of the store-side services every process runs: `bootstrap` builds the
clock, directory, metrics, operator, delegations and channels once, and the `Core` it returns
builds the outbox handler table, the outbox runner and the sweeper from them.

`signoff serve` (bot.app.build_app), `signoff worker` (bot.server.run_worker), the demo, the
tests' servers and the benchmarks all assemble through here. Channels come from the surface
registry (bot.surfaces): one per surface whose table the config has, built by its own
factory, so this module names no surface and loads no chat SDK a deployment does not use.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import aiohttp

from bot import surfaces
from bot.chat_memory import ChatMemory
from bot.clock import Clock, SystemClock
from bot.config import Config
from bot.delegations import Delegations
from bot.durations import parse_duration
from bot.metrics import Metrics
from bot.operator import Operator
from bot.outbox.cards import CardJobs
from bot.outbox.delegations import DelegationJobs
from bot.outbox.jobs import JobKind
from bot.outbox.reminders import ReminderJobs
from bot.outbox.runner import Handler, OutboxRunner, OutboxSettings
from bot.outbox.webhooks import WebhookSender
from bot.routing import Directory
from bot.surfaces import Channels
from bot.sweeper import Sweeper, retention_for
from store.repository import Store

if TYPE_CHECKING:  # bot/ never imports a channel at run time; their factories build them
    from channels.base import Channel

log = logging.getLogger("signoff.app")

# In-flight jobs get this long to finish on shutdown before they are cancelled and released.
DRAIN_SECONDS = 3.0


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
        busy_settle_window=o.busy_settle_window,
        probe_wait=o.webhook_timeout,
    )


def outbox_handlers(
    store: Store,
    directory: Directory,
    clock: Clock,
    channels: Mapping[str, Channel],
    session: aiohttp.ClientSession | None = None,
    *,
    kinds: Iterable[JobKind] = tuple(JobKind),
    webhook_timeout: float = 10.0,
    metrics: Metrics | None = None,
) -> dict[JobKind, Handler]:
    """The one handler table: which function performs each kind of outbox job. The server,
    the worker, the test servers and the benchmarks all run their outbox with it (through
    `Core.handlers`); one that performs only some kinds (a test that watches webhooks queue
    rather than go out) names them in `kinds`, and the rest stay queued. Webhooks need the
    HTTP `session`."""
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
    operator: Operator,
    delegations: Delegations,
    *,
    polling: bool = False,
) -> Channels:
    """A channel per registered surface whose table the config has, by surface name, each
    built by its surface's factory. A factory may ask for another channel (a chat channel
    links to the web's pages): it is built first, once."""
    built: dict[str, Channel | None] = {}
    memory = ChatMemory(store, clock)

    def channel(name: str) -> Channel | None:
        if name not in built:
            surface = surfaces.find(name)
            table = config.surface_table(name) if surface is not None else None
            built[name] = None  # a factory asking for its own channel gets none
            if surface is not None and table is not None:
                built[name] = surface.factory(
                    surfaces.Services(
                        table=table,
                        public_url=str(config.server.public_url),
                        store=store,
                        directory=directory,
                        clock=clock,
                        operator=operator,
                        delegations=delegations,
                        memory=memory,
                        polling=polling,
                        channel=channel,
                    )
                )
        return built[name]

    found = {surface.name: channel(surface.name) for surface in surfaces.registered()}
    return Channels({name: made for name, made in found.items() if made is not None})


@asynccontextmanager
async def channels_running(channels: Mapping[str, Channel]) -> AsyncIterator[None]:
    """Start every channel; stop them, last started first."""
    started: list[Channel] = []
    try:
        for channel in channels.values():
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
class Core:
    """The services of one process, built once (`bootstrap`)."""

    config: Config
    store: Store
    clock: Clock
    directory: Directory
    metrics: Metrics
    operator: Operator
    delegations: Delegations
    channels: Channels

    def handlers(
        self,
        session: aiohttp.ClientSession | None = None,
        *,
        kinds: Iterable[JobKind] = tuple(JobKind),
    ) -> dict[JobKind, Handler]:
        """The outbox handler table over this process's channels (`outbox_handlers`)."""
        return outbox_handlers(
            self.store,
            self.directory,
            self.clock,
            self.channels,
            session,
            kinds=kinds,
            webhook_timeout=self.config.outbox.webhook_timeout,
            metrics=self.metrics,
        )

    def outbox_runner(
        self, handlers: Mapping[JobKind, Handler], settings: OutboxSettings | None = None
    ) -> OutboxRunner:
        """An outbox runner performing `handlers`, by the config's [outbox] unless told."""
        return OutboxRunner(
            self.store,
            dict(handlers),
            self.clock,
            settings or outbox_settings(self.config),
            metrics=self.metrics,
        )

    def sweeper(self) -> Sweeper:
        return Sweeper(
            self.store,
            self.directory,
            self.clock,
            batch=self.config.sweeper.batch,
            metrics=self.metrics,
            **retention_for(self.config),
        )

    def background(self) -> Background:
        return Background(self)


def bootstrap(
    config: Config,
    store: Store,
    *,
    clock: Clock | None = None,
    metrics: Metrics | None = None,
    polling: bool = False,
) -> Core:
    """Every store-side service for `config`, once. `polling`: a surface that can fetch its
    updates instead of serving a webhook does (`serve --telegram-polling`; one process)."""
    clock = clock or SystemClock()
    directory = config.directory()
    metrics = metrics or Metrics(since=clock.now(), refresh=config.metrics.refresh)
    operator = Operator(store, directory, clock, metrics)
    delegations = Delegations(store, directory, clock)
    channels = build_channels(
        config, store, directory, clock, operator, delegations, polling=polling
    )
    return Core(config, store, clock, directory, metrics, operator, delegations, channels)


@dataclass
class Background:
    """The outbox runner and the sweeper as tasks, started and stopped together."""

    core: Core
    runner: OutboxRunner | None = None
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self._session = aiohttp.ClientSession()
        self.runner = self.core.outbox_runner(self.core.handlers(self._session))
        sweeper = self.core.sweeper()
        self._tasks = [
            asyncio.create_task(self.runner.run(self._stop, DRAIN_SECONDS), name="outbox"),
            asyncio.create_task(
                sweeper.run(self.core.config.sweeper.interval, self._stop), name="sweeper"
            ),
        ]
        log.info("outbox runner %s and sweeper started", self.runner.holder)

    async def stop(self) -> None:
        """Let in-flight jobs finish briefly, then cancel; the runner hands back what it held."""
        self._stop.set()
        if self._tasks:
            _, pending = await asyncio.wait(self._tasks, timeout=DRAIN_SECONDS + 2)
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
