"""The server's aiohttp application: the agent API, health, readiness and metrics, every
configured channel's routes, and the background work (outbox runner, sweeper) beside them.

Assembled from one `Core` (bot.bootstrap), which built the channels through the surface
registry (bot.surfaces): each channel adds its own routes and has one lifecycle, so this
module names no surface. `signoff serve` runs `build_app` behind its sockets (bot.server).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from bot.agent_actions import AgentActions
from bot.api import ApiContext, add_routes, errors_middleware, tenant_keys
from bot.bootstrap import Core, bootstrap, channels_running, outbox_handlers, outbox_settings
from bot.clock import Clock
from bot.config import Config
from bot.durations import parse_duration
from bot.health import CLOCK, METRICS, STORE, add_health_routes
from bot.metrics import Metrics
from bot.surfaces import Channels
from store.repository import Store

# Importable from here as before: the tests and benchmarks drive the outbox with them.
__all__ = [
    "CHANNELS",
    "CLOCK",
    "CORE",
    "METRICS",
    "STORE",
    "build_app",
    "outbox_handlers",
    "outbox_settings",
]

CORE: web.AppKey[Core] = web.AppKey("signoff_core", Core)
CHANNELS: web.AppKey[Channels] = web.AppKey("signoff_channels", Channels)


def build_app(
    config: Config,
    store: Store,
    *,
    clock: Clock | None = None,
    background: bool = True,
    metrics_registry: Metrics | None = None,
    polling: bool = False,
    core: Core | None = None,
) -> web.Application:
    """The whole server. With `background`, the outbox runner and the sweeper run inside the
    application's lifetime (started on startup, drained on shutdown). `polling` fetches chat
    updates instead of serving a webhook where a surface can (one process only). A `core`
    already bootstrapped is used as it is (the demo's); else one is built here."""
    if core is None:
        core = bootstrap(config, store, clock=clock, metrics=metrics_registry, polling=polling)
    app = web.Application(
        middlewares=[errors_middleware],
        # One byte over the limit still reaches us, so the 413 names the real limit.
        client_max_size=config.server.max_body_bytes + 1,
    )
    app[CORE] = core
    app[CHANNELS] = core.channels
    for channel in core.channels.values():
        channel.add_routes(app)
    add_routes(
        app,
        ApiContext(
            store=store,
            directory=core.directory,
            clock=core.clock,
            actions=AgentActions(store, core.directory, core.clock, core.metrics),
            keys=tenant_keys(core.directory),
            max_body=config.server.max_body_bytes,
            claim_lease=parse_duration(config.server.claim_lease),
        ),
    )
    add_health_routes(app, store, core.clock, core.metrics)

    async def channel_lifetime(_app: web.Application) -> AsyncIterator[None]:
        async with channels_running(core.channels):
            yield

    # Channels start before the outbox (which posts through them) and stop after it.
    app.cleanup_ctx.append(channel_lifetime)
    if background:
        work = core.background()

        async def lifetime(_app: web.Application) -> AsyncIterator[None]:
            await work.start()
            yield
            await work.stop()

        app.cleanup_ctx.append(lifetime)
    return app
