"""Slack clicks: signed block_actions requests to `POST /slack/events`, offered at a fixed
rate, each deciding a different approval; the latency of each HTTP answer.

Bolt runs with `process_before_response`, so the answer goes out after the decision has
committed (conditional update, audit event, outbox jobs): the latency measured is the whole
decision as Slack waits for it. The target: p99 under 50 ms at 100 clicks/s (Slack
gives 3 s). The fake Slack Web API (tests/fakes/slack.py) and the clients share the server's
process, as in api_throughput.py.

    python bench/slack_clicks.py [--rate 100] [--seconds 10] [--postgres URL]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import postgres_database, report_decisions, run_open_loop
from bot.app import build_app
from bot.clock import SystemClock
from bot.config import parse_config
from bot.intake import create_request, validate_request
from store.engine import create_engine
from store.migrate import upgrade
from store.repository import Store
from tests.fakes.slack import FakeSlack, block_action_body, sign

SECRET = "bench-signing-secret"


def config(base_url: str) -> dict:
    return {
        "tenants": [{"name": "acme"}],
        "principals": {"alice": {"name": "Alice", "slack": "U0ALICE"}},
        "routes": [{"tenant": "acme", "capability": "payments.*", "approvers": ["alice"]}],
        "slack": {"api_base_url": base_url},
    }


def body(i: int) -> dict:
    return {
        "run_id": f"run-{i}",
        "capability": "payments.refund",
        "tool": {"name": "stripe.refunds.create", "arguments": {"charge": f"ch_{i}", "amount": i}},
        "presentation": {"title": f"Refund {i}"},
    }


async def bench(url: str, rate: float, seconds: float) -> None:
    engine = create_engine(url)
    await upgrade(engine)
    await engine.dispose()
    store = Store.from_url(url, pool_size=40, max_overflow=10)
    n = int(rate * seconds)
    async with FakeSlack() as slack:
        cfg = parse_config(config(slack.base_url))
        directory = cfg.directory()
        approvals = [
            (
                await create_request(
                    store, directory, SystemClock(), "acme", validate_request(body(i))
                )
            ).approval
            for i in range(n)
        ]
        runner = web.AppRunner(build_app(cfg, store, background=False), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        endpoint = f"http://127.0.0.1:{runner.addresses[0][1]}/slack/events"
        # Signed ahead of time: the clock measures Slack's wait, not our test harness.
        clicks = []
        for a in approvals:
            payload = block_action_body(
                "U0ALICE", "signoff_approve", f"{a.id}:{a.hash}", "C0FIN", "1700000000.0001"
            )
            headers = {"Content-Type": "application/x-www-form-urlencoded"}
            clicks.append((payload, headers | sign(SECRET, payload)))
        async with aiohttp.ClientSession() as http:

            async def click(i: int) -> None:
                payload, headers = clicks[i]
                async with http.post(endpoint, data=payload, headers=headers) as response:
                    assert response.status == 200, await response.text()

            latencies = await run_open_loop(rate, n, click)
        await runner.cleanup()
    await report_decisions(store, n, rate, latencies, "clicks")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=100)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    os.environ["SLACK_BOT_TOKEN"] = "xoxb-test"
    os.environ["SLACK_SIGNING_SECRET"] = SECRET
    with tempfile.TemporaryDirectory() as tmp:
        print("SQLite")
        await bench(f"sqlite+aiosqlite:///{tmp}/bench.db", args.rate, args.seconds)
    async with postgres_database(args.postgres) as url:
        if url is not None:
            print("PostgreSQL")
            await bench(url, args.rate, args.seconds)


if __name__ == "__main__":
    asyncio.run(main())
