"""The webhook rig: a webhook receiver on loopback in the test's event loop, an outbox runner
that sends webhooks to it on a FakeClock, and the decided requests and jobs the tests look at.
The outbox's webhook tests are split by behaviour (tests/integration/test_outbox_webhooks.py,
_retries, _leases, _in_flight, _callbacks) and all drive this one rig; its fixtures
(`receiver`, `hooked`, `session`) are in tests/integration/conftest.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import aiohttp
from aiohttp import web

from bot.clock import FakeClock
from bot.intake import create_request
from bot.metrics import Metrics
from bot.operator import Actor, Operator
from bot.outbox.runner import OutboxRunner, OutboxSettings
from bot.outbox.webhooks import WebhookSender
from bot.routing import Directory
from store.records import Approval
from store.repository import Store
from tests.support.samples import make_request

SECRET = "whsec_MfKQ9r8GKYqrTYlQX7VZ1h0QkCBqRy1n0eBd9CWr0ds="
NEXT_SECRET = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
SETTINGS = OutboxSettings(
    lease=timedelta(seconds=30),
    max_attempts=4,
    backoff_base=timedelta(seconds=10),
    backoff_max=timedelta(minutes=5),
)


@dataclass
class Receiver:
    """A webhook endpoint in this event loop: records requests, answers `status`."""

    url: str = ""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    gate: asyncio.Event | None = None
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.Response:
        self.received.append((dict(request.headers), await request.read()))
        self.arrived.set()
        if self.gate is not None:
            await self.gate.wait()
        return web.Response(status=self.status, headers=self.headers, text="x")


@asynccontextmanager
async def serving() -> AsyncIterator[Receiver]:
    hooks = Receiver()
    app = web.Application()
    app.router.add_post("/hook", hooks.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    hooks.url = f"http://127.0.0.1:{runner.addresses[0][1]}/hook"
    try:
        yield hooks
    finally:
        if hooks.gate is not None:
            hooks.gate.set()
        await runner.cleanup()


def webhook_runner(
    store: Store,
    directory: Directory,
    clock: FakeClock,
    session: aiohttp.ClientSession,
    *,
    holder: str = "w1",
    environ: dict[str, str] | None = None,
    metrics: Metrics | None = None,
) -> OutboxRunner:
    sender = WebhookSender(
        session, directory, clock, environ={"ACME_SECRET": SECRET} if environ is None else environ
    )
    # Jitter pinned to its maximum so the schedule is exact; the jitter range is unit-tested.
    return OutboxRunner(
        store,
        {"webhook": sender},
        clock,
        SETTINGS,
        holder=holder,
        rand=lambda: 1.0,
        metrics=metrics,
    )


async def approved(
    store: Store, directory: Directory, clock: FakeClock, run_id: str = "r", **body: Any
) -> Approval:
    created = await create_request(
        store, directory, clock, "acme", make_request(run_id=run_id, **body)
    )
    decision = await Operator(store, directory, clock).approve_shown(
        created.approval.id, created.approval.hash, Actor("alice", "cli")
    )
    return decision.approval


async def job_of(store: Store, approval_id: str) -> Any:
    async with store.read() as tx:
        [job] = await tx.outbox_jobs(approval_id=approval_id)
    return job
