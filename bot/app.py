"""The server's aiohttp application: the agent API, health, readiness and metrics, every
configured channel's routes, and the background work (outbox runner, sweeper) beside them.

Assembled from one `Core` (bot.bootstrap), which built the channels through the surface
registry (bot.surfaces): each channel adds its own routes and has one lifecycle, so this
module names no surface. `signoff serve` runs `build_app` behind its sockets (bot.server).
"""

from __future__ import annotations

import html
from collections.abc import AsyncIterator

from aiohttp import web

from bot.admission import Admission, AdmissionSettings, in_flight_for
from bot.agent_actions import AgentActions
from bot.api import ApiContext, add_routes, errors_middleware, tenant_keys
from bot.bootstrap import Core, bootstrap, channels_running, outbox_handlers, outbox_settings
from bot.clock import Clock
from bot.config import Config
from bot.durations import parse_duration
from bot.health import CLOCK, METRICS, STORE, add_health_routes
from bot.metrics import Metrics
from bot.surfaces import Channels
from bot.waits import WaitLimits, Waits
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
    admission = Admission(
        AdmissionSettings(
            max_in_flight=in_flight_for(
                config.server.max_creates_in_flight, store.engine.dialect.name == "sqlite"
            ),
            max_waiting=config.server.max_creates_waiting,
            lag_limit=config.server.create_lag_limit,
            retry_after=config.server.overload_retry_after,
        ),
        core.metrics,
    )
    waits = Waits(
        store,
        WaitLimits(
            max_waits=config.server.max_waits,
            max_waits_per_tenant=config.server.max_waits_per_tenant,
        ),
    )

    async def answer_waits(_app: web.Application) -> None:
        await waits.close()  # before handlers are cancelled: each wait answers what it has

    app.on_shutdown.append(answer_waits)
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
            admission=admission,
            waits=waits,
        ),
    )
    add_health_routes(app, store, core.clock, core.metrics)
    if not _serves_root(app):  # a surface with pages (the web's inbox) claims `/` itself
        app.router.add_get("/", root_index)

    async def admission_lifetime(_app: web.Application) -> AsyncIterator[None]:
        admission.start()  # probes the loop's lateness, so inside the running loop
        yield
        admission.stop()

    async def channel_lifetime(_app: web.Application) -> AsyncIterator[None]:
        async with channels_running(core.channels):
            yield

    app.cleanup_ctx.append(admission_lifetime)
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


# What `/` names when no surface serves pages there: where a person or a probe goes next.
ROOT_LINKS = {
    "health": "/healthz",
    "ready": "/readyz",
    "metrics": "/metrics",
    "api": "/v1/approvals",
    "openapi": "/v1/openapi.json",
}


def _serves_root(app: web.Application) -> bool:
    return any(
        route.method == "GET" and route.resource is not None and route.resource.canonical == "/"
        for route in app.router.routes()
    )


async def root_index(request: web.Request) -> web.Response:
    """The server's root without a web surface: JSON for a client that asks for it, else a
    small plain page with the same paths (the demo and `serve` print this URL first)."""
    accept = request.headers.get("Accept", "")
    if "application/json" in accept and "text/html" not in accept:
        return web.json_response({"service": "signoff", "links": ROOT_LINKS})
    items = "".join(
        f'<li>{html.escape(name)}: <a href="{path}">{path}</a></li>'
        for name, path in ROOT_LINKS.items()
    )
    body = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        "<title>signoff</title></head><body><h1>signoff</h1>"
        "<p>An approval service for AI agents. No web inbox is configured here (add a "
        "<code>[web]</code> table to serve one); agents use the HTTP API.</p>"
        f"<ul>{items}</ul></body></html>"
    )
    return web.Response(text=body, content_type="text/html")
