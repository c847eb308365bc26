"""Health, readiness and metrics routes: what a load balancer and Prometheus ask a process.

`/healthz` answers while the process runs, `/readyz` while its database answers with a schema
it can use, `/metrics` from the last background read of the figures (bot.metrics). The
server adds all three to its application (bot.app); `signoff worker` serves /metrics and
/healthz on `[worker] metrics_listen` (`serve_metrics`).
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from bot.clock import Clock
from bot.errors import ConfigError
from bot.metrics import CONTENT_TYPE, Metrics
from store.migrate import current_revision, head_revision, known_revisions
from store.repository import Store

log = logging.getLogger("signoff.app")

METRICS: web.AppKey[Metrics] = web.AppKey("signoff_metrics", Metrics)
STORE: web.AppKey[Store] = web.AppKey("signoff_store", Store)
CLOCK: web.AppKey[Clock] = web.AppKey("signoff_clock", object)  # type: ignore[arg-type]


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


def add_health_routes(
    app: web.Application, store: Store, clock: Clock, registry: Metrics, *, ready: bool = True
) -> None:
    """/healthz and /metrics (and /readyz, with `ready`) on `app`, reading `store`."""
    app[METRICS], app[STORE], app[CLOCK] = registry, store, clock
    app.router.add_get("/healthz", healthz)
    if ready:
        app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.on_cleanup.append(stop_metrics)


async def serve_metrics(
    listen: str | None, store: Store, clock: Clock, registry: Metrics
) -> web.AppRunner | None:
    """`[worker] metrics_listen`: /metrics (and /healthz) of a worker on HOST:PORT, for the
    counters only this process has (its outbox attempts, dead jobs by reason, the sweeper's
    transitions); None when unset."""
    if listen is None:
        return None
    app = web.Application()
    add_health_routes(app, store, clock, registry, ready=False)
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
