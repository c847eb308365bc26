"""Head-of-line blocking inside one destination, in real time (issue 25, item 7).

One receiver on loopback with a path that accepts and never answers (`/hang`) and a path that
answers at once (`/hook`). A tenant has --hung webhooks queued to the hung path (callback
URLs) when the outbox runner starts (`OutboxRunner.run`, default shares, a real clock, a
webhook timeout of --timeout seconds); then a fresh webhook to the healthy path is queued
every --every seconds for --seconds. Prints how long each fresh webhook took to arrive, and
how many connections the hung path held at most once the first ones timed out.

    python -m bench hung_endpoint [--hung 100] [--timeout 2] [--seconds 20] [--every 0.5]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import logging
import statistics
import tempfile
import time

import aiohttp
from aiohttp import web

from bench.results import Results
from bot.clock import SystemClock
from bot.config import parse_config
from bot.intake import create_request
from bot.operator import Actor, Operator
from bot.outbox.runner import OutboxRunner, OutboxSettings
from bot.outbox.webhooks import WebhookSender
from store.migrate import upgrade
from store.repository import Store
from tests.support.samples import TEST_CONFIG, make_request

DESCRIPTION = "webhooks to a healthy path while another path of the host hangs (issue 25)"

SECRET = "whsec_MfKQ9r8GKYqrTYlQX7VZ1h0QkCBqRy1n0eBd9CWr0ds="


async def measure(args: argparse.Namespace) -> Results:
    hanging = peak = 0
    arrived: dict[str, float] = {}

    async def hang(request: web.Request) -> web.Response:
        nonlocal hanging, peak
        hanging += 1
        peak = max(peak, hanging)
        try:
            await asyncio.Event().wait()
        finally:
            hanging -= 1
        return web.Response()

    async def hook(request: web.Request) -> web.Response:
        arrived[request.headers["webhook-id"]] = time.monotonic()
        return web.Response()

    app = web.Application()
    app.router.add_post("/hang", hang)
    app.router.add_post("/hook", hook)
    site = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.1)
    await site.setup()
    await web.TCPSite(site, "127.0.0.1", 0).start()
    base = f"http://127.0.0.1:{site.addresses[0][1]}"

    config = copy.deepcopy(TEST_CONFIG)
    config["tenants"][0] = {
        "name": "acme",
        "webhook_url": f"{base}/hook",
        "webhook_secret_env": "ACME_SECRET",
        "allow_private_callbacks": True,
    }
    directory = parse_config(config).directory()
    clock = SystemClock()
    with tempfile.TemporaryDirectory() as folder:
        store = Store.from_url(f"sqlite+aiosqlite:///{folder}/bench.db")
        await upgrade(store.engine)
        operator = Operator(store, directory, clock)

        async def approve(run_id: str, callback: str | None) -> str:
            body = {"callback_url": callback} if callback else {}
            made = await create_request(
                store, directory, clock, "acme", make_request(run_id=run_id, **body)
            )
            await operator.approve_shown(
                made.approval.id, made.approval.hash, Actor("alice", "cli")
            )
            return f"{made.approval.id}.2"

        for i in range(args.hung):
            await approve(f"hung-{i}", f"{base}/hang?n={i}")
        async with aiohttp.ClientSession() as session:
            sender = WebhookSender(
                session, directory, clock, timeout=args.timeout, environ={"ACME_SECRET": SECRET}
            )
            runner = OutboxRunner(store, {"webhook": sender}, clock, OutboxSettings())
            stop = asyncio.Event()
            task = asyncio.create_task(runner.run(stop, drain=0.1))
            await asyncio.sleep(args.timeout * 1.5)  # the first attempts time out
            peak = hanging
            sent: dict[str, float] = {}
            started = time.monotonic()
            while time.monotonic() - started < args.seconds:
                delivery = await approve(f"fresh-{len(sent)}", None)
                sent[delivery] = time.monotonic()
                runner.wake()
                await asyncio.sleep(args.every)
            await asyncio.sleep(args.timeout)
            stop.set()
            await task
            await sender.close()
        await store.close()
    await site.cleanup()
    took = [arrived[d] - at for d, at in sent.items() if d in arrived]
    if args.verbose:
        print([round(t, 3) for t in took])
    late = len(sent) - len(took)
    print(f"{args.hung} hung callbacks, webhook timeout {args.timeout} s")
    print(f"fresh webhooks to the healthy path: {len(sent)} sent, {len(took)} arrived")
    if took:
        print(
            f"  took: median {statistics.median(took) * 1000:.0f} ms, max {max(took) * 1000:.0f} ms"
        )
    if late:
        print(f"  {late} not arrived {args.timeout:.0f} s after the last was sent")
    print(f"most connections the hung path held after its first timeouts: {peak}")
    found = Results()
    found.add("fresh webhook took, median", statistics.median(took) * 1000 if took else None, "ms")
    found.add("fresh webhook took, max", max(took) * 1000 if took else None, "ms")
    found.add("fresh webhooks not arrived", late)
    found.add("hung path's connections at most", peak)
    found.add_samples("fresh webhook took (ms)", [t * 1000 for t in took])
    return found


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hung", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=2.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--every", type=float, default=0.5)
    parser.add_argument("--verbose", action="store_true", help="print every latency")


def run(args: argparse.Namespace) -> Results:
    logging.basicConfig(level=logging.ERROR)
    return asyncio.run(measure(args))
