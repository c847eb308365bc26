"""Create and claim through the agent HTTP API: requests per second and latency.

The real application (`bot.app.build_app`, background work off) on a loopback port, driven
by 32 concurrent aiohttp clients: N creates, then (decided in bulk through the Operator, as
a human would, not timed) N claims and N completes. Shows what the HTTP layer, auth,
validation and JSON add on top of the core figures in decide_throughput.py.

    python bench/api_throughput.py [--n 2000] [--clients 32] [--postgres URL]
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

from bench.common import postgres_database, quantiles, run_concurrently
from bot.app import build_app
from bot.config import parse_config
from bot.operator import Actor, Operator
from store.engine import create_engine
from store.migrate import upgrade
from store.repository import Store

KEY = "bench-key"
CONFIG = {
    "tenants": [{"name": "acme", "api_key_env": "SIGNOFF_BENCH_KEY"}],
    "principals": {"alice": {"name": "Alice"}},
    "routes": [{"tenant": "acme", "capability": "payments.*", "approvers": ["alice"]}],
}


def body(i: int) -> dict:
    return {
        "run_id": f"run-{i}",
        "capability": "payments.refund",
        "tool": {"name": "stripe.refunds.create", "arguments": {"charge": f"ch_{i}", "amount": i}},
        "presentation": {"title": f"Refund {i}", "fields": [{"label": "Amount", "value": str(i)}]},
    }


def line(name: str, rate: float, latencies: list[float]) -> str:
    p50, p99 = quantiles(latencies)
    return f"  {name:<9} {rate:7,.0f}/s   p50 {p50:6.1f} ms   p99 {p99:6.1f} ms"


async def bench(url: str, n: int, clients: int) -> None:
    engine = create_engine(url)
    await upgrade(engine)
    await engine.dispose()
    store = Store.from_url(url, pool_size=clients, max_overflow=10)
    config = parse_config(CONFIG)
    runner = web.AppRunner(build_app(config, store, background=False), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}/v1/approvals"
    headers = {"Authorization": f"Bearer {KEY}"}
    records: dict[int, dict] = {}
    tokens: dict[int, str] = {}
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as http:

        async def create(i: int) -> None:
            async with http.post(base, json=body(i)) as response:
                assert response.status == 201, await response.text()
                records[i] = await response.json()

        async def claim(i: int) -> None:
            async with http.post(f"{base}/{records[i]['id']}/claim") as response:
                assert response.status == 200, await response.text()
                tokens[i] = (await response.json())["claim_token"]

        async def complete(i: int) -> None:
            done = {"claim_token": tokens[i], "outcome": "succeeded", "result": {"ok": i}}
            async with http.post(f"{base}/{records[i]['id']}/complete", json=done) as response:
                assert response.status == 200, await response.text()

        print(line("create", *await run_concurrently(n, clients, create)))
        operator = Operator(store, config.directory())
        await run_concurrently(
            n,
            clients,
            lambda i: operator.approve_shown(
                records[i]["id"], records[i]["hash"], Actor("alice", "cli")
            ),
        )
        print(line("claim", *await run_concurrently(n, clients, claim)))
        print(line("complete", *await run_concurrently(n, clients, complete)))
    await runner.cleanup()
    await store.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    os.environ["SIGNOFF_BENCH_KEY"] = KEY
    with tempfile.TemporaryDirectory() as tmp:
        print(f"SQLite, {args.n} approvals, {args.clients} clients over HTTP")
        await bench(f"sqlite+aiosqlite:///{tmp}/bench.db", args.n, args.clients)
    async with postgres_database(args.postgres) as url:
        if url is not None:
            print(f"PostgreSQL, {args.n} approvals, {args.clients} clients over HTTP")
            await bench(url, args.n, args.clients)


if __name__ == "__main__":
    asyncio.run(main())
