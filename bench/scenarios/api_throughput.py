"""Create, claim and complete through the agent HTTP API: requests per second and latency.

`signoff serve` in its own process (bench/processes.py's Server: cards and webhooks on, the
fake Slack and the webhook receiver in bench/edge.py's process), driven by 32 concurrent
aiohttp clients in this process: N creates, then (decided in bulk through the Operator on
the same database, as a human would, not timed) N claims and N completes. `python -m bench service`
measures creates, clicks and cards with the load in processes of its own; this one adds the
claim and the completion an agent makes after a decision.

    python -m bench api_throughput [--n 2000] [--clients 32] [--workers N] [--postgres URL]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from pathlib import Path

import aiohttp

import bot.outbox  # noqa: F401  (installs the outbox bot.effects queues through)
from bench.harness import postgres_database, quantiles, run_concurrently
from bench.processes import API_KEY, Edge, Server, write_config
from bench.results import Results
from bot.config import load_config
from bot.operator import Actor, Operator
from store.repository import Store

DESCRIPTION = "create, claim and complete over HTTP against signoff serve: ops/s and p50/p99"


def body(i: int) -> dict:
    return {
        "run_id": f"run-{i}",
        "capability": "payments.refund",
        "tool": {"name": "stripe.refunds.create", "arguments": {"charge": f"ch_{i}", "amount": i}},
        "presentation": {"title": f"Refund {i}", "fields": [{"label": "Amount", "value": str(i)}]},
    }


def line(found: Results, db: str, name: str, rate: float, latencies: list[float]) -> str:
    """Record `name`'s figures in `found` (under its database) and say them in a line."""
    p50, p99 = quantiles(latencies)
    found.add(f"{db}/{name}_per_s", rate, "/s")
    found.add(f"{db}/{name}_p50_ms", p50, "ms")
    found.add(f"{db}/{name}_p99_ms", p99, "ms")
    found.add_samples(f"{db}/{name}_latency_ms", latencies)
    return f"  {name:<9} {rate:7,.0f}/s   p50 {p50:6.1f} ms   p99 {p99:6.1f} ms"


async def bench(
    found: Results, db: str, url: str, n: int, clients: int, workers: int | None, tmp: Path
) -> None:
    edge = Edge()
    config_path = Path(tmp, "signoff.toml")
    write_config(config_path, url, edge.url)
    server = Server(config_path, workers)
    try:
        await drive(found, db, url, server.url, n, clients, config_path)
    finally:
        server.stop()
        edge.stop()


async def drive(
    found: Results, db: str, url: str, server_url: str, n: int, clients: int, config_path: Path
) -> None:
    base = f"{server_url}/v1/approvals"
    headers = {"Authorization": f"Bearer {API_KEY}"}
    records: dict[int, dict] = {}
    tokens: dict[int, str] = {}
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as http:

        async def create(i: int) -> None:
            while True:  # a create refused for load (429) is asked again, as the client does
                async with http.post(base, json=body(i)) as response:
                    if response.status == 429:
                        wait = float(response.headers.get("Retry-After", "1"))
                    else:
                        assert response.status == 201, await response.text()
                        records[i] = await response.json()
                        return
                await asyncio.sleep(wait)

        async def claim(i: int) -> None:
            async with http.post(f"{base}/{records[i]['id']}/claim") as response:
                assert response.status == 200, await response.text()
                tokens[i] = (await response.json())["claim_token"]

        async def complete(i: int) -> None:
            done = {"claim_token": tokens[i], "outcome": "succeeded", "result": {"ok": i}}
            async with http.post(f"{base}/{records[i]['id']}/complete", json=done) as response:
                assert response.status == 200, await response.text()

        print(line(found, db, "create", *await run_concurrently(n, clients, create)))
        store = Store.from_url(url, pool_size=clients, max_overflow=10)
        operator = Operator(store, load_config(config_path).directory())
        await run_concurrently(
            n,
            clients,
            lambda i: operator.approve_shown(
                records[i]["id"], records[i]["hash"], Actor("alice", "cli")
            ),
        )
        await store.close()
        print(line(found, db, "claim", *await run_concurrently(n, clients, claim)))
        print(line(found, db, "complete", *await run_concurrently(n, clients, complete)))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--workers", type=int, help="passed to `signoff serve --workers N`")
    parser.add_argument(
        "--postgres",
        default=os.environ.get(
            "SIGNOFF_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
        ),
    )


def run(args: argparse.Namespace) -> Results:
    return asyncio.run(measure(args))


async def measure(args: argparse.Namespace) -> Results:
    found = Results()
    with tempfile.TemporaryDirectory() as tmp:
        print(f"SQLite, {args.n} approvals, {args.clients} clients over HTTP")
        url = f"sqlite+aiosqlite:///{tmp}/bench.db"
        await bench(found, "sqlite", url, args.n, args.clients, args.workers, tmp)
    async with postgres_database(args.postgres) as url:
        if url is not None:
            with tempfile.TemporaryDirectory() as tmp:
                print(f"PostgreSQL, {args.n} approvals, {args.clients} clients over HTTP")
                await bench(found, "postgresql", url, args.n, args.clients, args.workers, tmp)
    return found

