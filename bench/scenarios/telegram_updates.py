"""Telegram presses: callback_query updates posted to `POST /telegram/webhook` with the secret
token, offered at a fixed rate, each pressing Approve on a different card; the latency of each
HTTP answer.

signoff handles an update before it answers Telegram: the update id is recorded (dedupe across
replicas), the card is looked up by chat and message, the decision commits (conditional
update, audit event, outbox jobs) and the callback query is answered (one call to the Bot
API), so the latency is the whole press as Telegram waits for it. The fake Bot API
(tests/fakes/telegram/) and the clients share the server's process (`python -m bench service`
puts each in a process of its own, for Slack).

    python -m bench telegram_updates [--rate 100] [--seconds 10] [--postgres URL]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import tempfile

import aiohttp
from aiohttp import web

from bench.harness import postgres_database, quantiles, report_decisions, run_open_loop
from bench.results import Results
from bot.app import build_app
from bot.bootstrap import bootstrap
from bot.clock import SystemClock
from bot.config import parse_config
from bot.intake import create_request, validate_request
from bot.outbox.jobs import JobKind
from bot.outbox.runner import OutboxSettings
from store.engine import create_engine
from store.migrate import upgrade
from store.repository import Store
from tests.fakes import telegram as fake
from tests.fakes.telegram import FakeTelegram

DESCRIPTION = "Telegram presses at 100/s: webhook update to committed decision"

TOKEN = "123456:BENCH-token"
SECRET = "bench-webhook-secret"
GROUP = -1001000000001
ALICE = fake.user(111, "Alice")


def config(base_url: str) -> dict:
    return {
        "tenants": [{"name": "acme"}],
        "principals": {"alice": {"name": "Alice", "telegram": 111}},
        "routes": [
            {
                "tenant": "acme",
                "capability": "payments.*",
                "approvers": ["alice"],
                "notify": [f"telegram:{GROUP}"],
            }
        ],
        "telegram": {"api_base_url": base_url},
    }


def body(i: int) -> dict:
    return {
        "run_id": f"run-{i}",
        "capability": "payments.refund",
        "tool": {"name": "stripe.refunds.create", "arguments": {"charge": f"ch_{i}", "amount": i}},
        "presentation": {"title": f"Refund {i}"},
    }


async def bench(url: str, rate: float, seconds: float, found: Results, db: str) -> None:
    engine = create_engine(url)
    await upgrade(engine)
    await engine.dispose()
    store = Store.from_url(url, pool_size=40, max_overflow=10)
    n = int(rate * seconds)
    clock = SystemClock()
    async with FakeTelegram(TOKEN) as tg:
        cfg = parse_config(config(tg.base_url))
        core = bootstrap(cfg, store, clock=clock)
        for i in range(n):
            await create_request(store, core.directory, clock, "acme", validate_request(body(i)))
        app = build_app(cfg, store, background=False, core=core)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        # Post every card first (the press must name a recorded card message).
        handlers = core.handlers(kinds=[JobKind.POST_CARD])
        posting = core.outbox_runner(handlers, OutboxSettings(batch=100, concurrency=16))
        while await posting.run_once():
            pass
        messages = tg.messages_in(GROUP)
        assert len(messages) == n, f"{len(messages)} cards posted of {n}"
        endpoint = f"http://127.0.0.1:{runner.addresses[0][1]}/telegram/webhook"
        ids = itertools.count(1)
        updates = [
            fake.callback_query(
                next(ids),
                from_user=ALICE,
                message=m,
                data=m["reply_markup"]["inline_keyboard"][0][0]["callback_data"],
            )
            for m in messages
        ]
        async with aiohttp.ClientSession() as http:

            async def press(i: int) -> None:
                async with http.post(
                    endpoint, json=updates[i], headers=fake.webhook_headers(SECRET)
                ) as response:
                    assert response.status == 200, await response.text()

            latencies = await run_open_loop(rate, n, press)
        await runner.cleanup()
    await report_decisions(store, n, rate, latencies, "presses")
    p50, p99 = quantiles(latencies)
    found.add(f"{db}/press_p50_ms", p50, "ms")
    found.add(f"{db}/press_p99_ms", p99, "ms")
    found.add(f"{db}/press_max_ms", max(latencies), "ms")
    found.add_samples(f"{db}/press_latency_ms", latencies)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rate", type=float, default=100)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")


def run(args: argparse.Namespace) -> Results:
    return asyncio.run(measure(args))


async def measure(args: argparse.Namespace) -> Results:
    found = Results()
    os.environ["TELEGRAM_BOT_TOKEN"] = TOKEN
    os.environ["TELEGRAM_WEBHOOK_SECRET"] = SECRET
    with tempfile.TemporaryDirectory() as tmp:
        print("SQLite")
        url = f"sqlite+aiosqlite:///{tmp}/bench.db"
        await bench(url, args.rate, args.seconds, found, "sqlite")
    async with postgres_database(args.postgres) as url:
        if url is not None:
            print("PostgreSQL")
            await bench(url, args.rate, args.seconds, found, "postgresql")
    return found

