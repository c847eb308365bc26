"""Head-of-line blocking inside one destination: a path that hangs costs its own jobs, not
its neighbours'. The outbox runner (`run`, with its shares) against real endpoints on
loopback with a path that accepts and never answers and a path that answers at once, on
SQLite and PostgreSQL; a FakeClock holds back whatever is rescheduled or put back, so only
what the shares let through runs, and the real time each test takes stays a few seconds.

Proves: after its first timeouts, an endpoint (host, port, path) is probed one job at a time
while fresh webhooks to a healthy path of the same host go out at once, however many jobs to
the hung path wait; several hung paths of one host together never hold every one of its
slots; a path that answers again gets its full share back and its backlog is delivered.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta

import aiohttp
import pytest
from aiohttp import web

from bot.clock import FakeClock
from bot.config import parse_config
from bot.intake import create_request
from bot.operator import Actor, Operator
from bot.outbox.runner import OutboxRunner, OutboxSettings
from bot.outbox.webhooks import WebhookSender
from bot.routing import Directory
from store.repository import Store
from tests.support.samples import TEST_CONFIG, make_request

SECRET = "whsec_MfKQ9r8GKYqrTYlQX7VZ1h0QkCBqRy1n0eBd9CWr0ds="
TIMEOUT = 0.3  # seconds per webhook attempt (10 s in production)
SETTINGS = OutboxSettings(
    lease=timedelta(seconds=30),
    backoff_base=timedelta(seconds=2),  # rests of 2, 4, 8... s of the FakeClock
    backoff_max=timedelta(seconds=20),
    concurrency=32,
    per_destination=4,
    per_tenant=32,
    poll_interval=0.05,
    probe_wait=TIMEOUT,
)


@dataclass
class Endpoints:
    """One host and port: `/hang*` paths accept and answer only once `release` is set (then
    after a short pause, so concurrent deliveries overlap); `/hook` answers at once."""

    base: str = ""
    release: asyncio.Event = field(default_factory=asyncio.Event)
    hanging: int = 0  # requests to /hang* open right now
    peak: int = 0  # most open at once since `watch()`
    served: int = 0  # /hang* requests answered 200
    paths: set[str] = field(default_factory=set)  # /hang* paths asked at least once
    healthy: dict[str, float] = field(default_factory=dict)  # webhook-id: arrival (monotonic)

    async def hang(self, request: web.Request) -> web.Response:
        self.paths.add(request.path)
        self.hanging += 1
        self.peak = max(self.peak, self.hanging)
        try:
            await self.release.wait()
            await asyncio.sleep(0.05)
        finally:
            self.hanging -= 1
        self.served += 1
        return web.Response(text="ok")

    async def hook(self, request: web.Request) -> web.Response:
        self.healthy[request.headers["webhook-id"]] = time.monotonic()
        return web.Response(text="ok")

    def watch(self) -> None:
        self.peak = self.hanging


@pytest.fixture
async def endpoints() -> AsyncIterator[Endpoints]:
    found = Endpoints()
    app = web.Application()
    app.router.add_post("/hook", found.hook)
    app.router.add_post("/{name:hang.*}", found.hang)
    # handler_cancellation: a request the sender gave up on (timed out) ends here too, so
    # `hanging` counts the attempts in flight.
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1, handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    found.base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield found
    finally:
        found.release.set()
        await runner.cleanup()


@pytest.fixture
def directory(endpoints: Endpoints) -> Directory:
    config = copy.deepcopy(TEST_CONFIG)
    config["tenants"][0] = {
        "name": "acme",
        "webhook_url": f"{endpoints.base}/hook",
        "webhook_secret_env": "ACME_SECRET",
        "allow_private_callbacks": True,  # the endpoints listen on loopback
    }
    return parse_config(config).directory()


async def _approve(
    store: Store, directory: Directory, clock: FakeClock, run_id: str, callback: str | None
) -> str:
    body = {"callback_url": callback} if callback else {}
    created = await create_request(
        store, directory, clock, "acme", make_request(run_id=run_id, **body)
    )
    await Operator(store, directory, clock).approve_shown(
        created.approval.id, created.approval.hash, Actor("alice", "cli")
    )
    return created.approval.id


@asynccontextmanager
async def running(
    store: Store, directory: Directory, clock: FakeClock
) -> AsyncIterator[OutboxRunner]:
    """`OutboxRunner.run` in the background, with webhooks that time out after TIMEOUT."""
    async with aiohttp.ClientSession() as session:
        sender = WebhookSender(
            session, directory, clock, timeout=TIMEOUT, environ={"ACME_SECRET": SECRET}
        )
        runner = OutboxRunner(store, {"webhook": sender}, clock, SETTINGS, rand=lambda: 1.0)
        stop = asyncio.Event()
        task = asyncio.create_task(runner.run(stop, drain=0.1))
        try:
            yield runner
        finally:
            stop.set()
            await task
            await sender.close()


async def _until(condition: Callable[[], bool], within: float, what: str) -> float:
    """Wait (real time) until `condition` holds; how long it took."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < within, f"{what}: not within {within} s"
        await asyncio.sleep(0.01)
    return time.monotonic() - started


async def _healthy_latencies(
    store: Store, directory: Directory, clock: FakeClock, runner: OutboxRunner, hooks: Endpoints
) -> list[float]:
    """Fresh webhooks to the healthy path, one after another: seconds each took to arrive."""
    took = []
    for i in range(5):
        approval_id = await _approve(store, directory, clock, f"healthy-{i}", None)
        delivery = f"{approval_id}.2"
        started = time.monotonic()
        runner.wake()
        await _until(lambda d=delivery: d in hooks.healthy, 5, "a healthy webhook")  # type: ignore[misc]
        took.append(hooks.healthy[delivery] - started)
    return took


async def _queued(store: Store) -> int:
    async with store.read() as tx:
        return len(await tx.outbox_jobs(state="queued"))


async def _drained(store: Store, within: float) -> None:
    started = time.monotonic()
    while (left := await _queued(store)) > 0:
        assert time.monotonic() - started < within, f"{left} jobs still queued after {within} s"
        await asyncio.sleep(0.05)


@asynccontextmanager
async def ticking(clock: FakeClock) -> AsyncIterator[None]:
    """The FakeClock run ten times faster than real time: rests, backoffs and jobs put back
    come due (a probe's wait of TIMEOUT in a few milliseconds), attempts still time out in
    real time."""

    async def tick() -> None:
        while True:
            await asyncio.sleep(0.01)
            clock.advance(seconds=0.1)

    task = asyncio.create_task(tick())
    try:
        yield
    finally:
        task.cancel()


@pytest.mark.alone  # it times deliveries against a 0.3 s webhook timeout
async def test_a_hung_path_is_probed_one_job_at_a_time_and_the_healthy_path_flows(
    store: Store, directory: Directory, clock: FakeClock, endpoints: Endpoints
) -> None:
    # A hundred callbacks to a path that hangs (the query differs: still one endpoint).
    for i in range(100):
        await _approve(store, directory, clock, f"hung-{i}", f"{endpoints.base}/hang?n={i}")
    async with running(store, directory, clock) as runner, ticking(clock):
        # Not knowing yet, it sends the host's share; each of those times out.
        await _until(lambda: endpoints.hanging == SETTINGS.per_destination, 5, "first attempts")
        await _until(lambda: endpoints.hanging <= 1, 5, "the first timeouts")
        endpoints.watch()
        took = await _healthy_latencies(store, directory, clock, runner, endpoints)
        # Its rest over, the hung path is probed, one job at a time, and each times out.
        await _until(lambda: endpoints.peak >= 1, 5, "a probe")
        await asyncio.sleep(4 * TIMEOUT)
        # The healthy path's webhooks went out at once, each well inside one timeout, while
        # the hung path held one connection (its probe) and a hundred jobs waited for it.
        assert max(took) < TIMEOUT, took
        assert endpoints.peak == 1 and endpoints.served == 0
        # It answers again: the probe succeeds, the path gets its full share back, and its
        # backlog is delivered.
        endpoints.release.set()
        await _until(lambda: endpoints.served >= 1, 5, "the probe's answer")
        endpoints.watch()
        await _until(lambda: endpoints.served >= 100, 10, "the hung path's backlog")
        assert endpoints.peak > 1, "the path that answered again is still probed alone"
        # An attempt answered just as its sender gave up counts as served and is sent again
        # after its backoff: the backlog is done when nothing is left queued.
        await _drained(store, 10)


@pytest.mark.alone  # it times deliveries against a 0.3 s webhook timeout
async def test_several_hung_paths_of_one_host_never_hold_all_its_slots(
    store: Store, directory: Directory, clock: FakeClock, endpoints: Endpoints
) -> None:
    for path in ("hang-a", "hang-b", "hang-c", "hang-d", "hang-e"):
        for i in range(5):
            await _approve(store, directory, clock, f"{path}-{i}", f"{endpoints.base}/{path}")
    async with running(store, directory, clock) as runner:
        # Not knowing which paths hang, it tries each, and each times out once; from then on
        # each is probed, and the probes of the host's paths together hold one slot less
        # than the host has.
        await _until(lambda: len(endpoints.paths) == 5, 5, "every path tried")
        await asyncio.sleep(TIMEOUT + 0.1)
        endpoints.watch()
        took = await _healthy_latencies(store, directory, clock, runner, endpoints)
        assert max(took) < TIMEOUT, took
        assert endpoints.peak <= SETTINGS.per_destination - 1
