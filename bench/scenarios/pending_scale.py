"""Memory and monitoring of a server with 100,000 pending approvals.

Starts `signoff serve` as a subprocess on a fresh database, scrapes /metrics and lists a few
times, and reads its resident memory (VmRSS) idle. Then fills the database from this process
(not the server's) with N pending approvals, each with its `requested` event, built with
intake's own `new_approval` and inserted in bulk, plus a week of delivered outbox jobs (one
per approval, as the cards leave them) and a few queued and dead ones. It waits until the
server's /metrics reports all N pending (the gauges are refreshed in the background), then
times --repeat requests each of GET /metrics, GET /v1/approvals?state=pending and
GET /v1/approvals?state=rejected (a state with no rows), and reads VmRSS again: of the
`serve` process and of each worker process it started (`serve --workers`, by default one
per core; the workers answer the requests).

    python -m bench pending_scale [--n 100000] [--repeat 50] [--postgres URL | --no-postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp

from bench.harness import postgres_database
from bench.results import Results, percentile
from bench.scenarios.dashboard_pages import Server, draft
from bot.intake import new_approval
from store.engine import create_engine
from store.migrate import upgrade
from store.repository import Store
from store.schema import approval_events, approvals, outbox

DESCRIPTION = "at 100,000 pending: server memory, /metrics, the state filter"

KEY = "bench-pending-scale-key-0123456789"
_PENDING = re.compile(rb"^signoff_pending_approvals\{[^}]*\} ([0-9.e+]+)$", re.M)


def config_toml(database_url: str) -> str:
    # The sweeper runs at its default interval, as in production; nothing is due.
    return f"""
[server]
listen = "127.0.0.1:0"

[database]
url = "{database_url}"

[[tenants]]
name = "acme"
api_key_env = "BENCH_ACME_KEY"

[[tenants]]
name = "globex"

[principals.alice]
name = "Alice Ng"

[[routes]]
tenant = "*"
capability = "*"
approvers = ["alice"]
"""


def rss_mb(pid: int) -> dict[int, float]:
    """VmRSS of `signoff serve` and of each process it started (`--workers`), by pid."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            found[pid] = int(line.split()[1]) / 1024
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            found |= rss_mb(int(child))
    return found


Rows = list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]


def build(n: int, now: datetime) -> Rows:
    """N pending approvals over the last 48 hours (every 50th past its last escalation), each
    with its `requested` event and a job: delivered, but 30 queued and 20 dead."""
    rows = []
    for i in range(n):
        created = now - timedelta(hours=48) * (1 - i / n)
        row, requested = new_approval(draft(i), now=created, actor="agent:acme")
        if i % 50 == 0:
            row["escalation_level"] = 1
        job = {
            "kind": "post_card",
            "approval_id": row["id"],
            "payload": {"approval_id": row["id"]},
            "state": "done" if i >= 50 else ("queued" if i >= 20 else "dead"),
            "attempts": 1,
            "run_after": created,
            "created_at": created,
            "done_at": created,
        }
        rows.append((row, requested, job))
    return rows


async def fill(url: str, rows: Rows) -> None:
    store = Store.from_url(url)
    started = time.perf_counter()
    for chunk in range(0, len(rows), 5000):
        part = rows[chunk : chunk + 5000]
        async with store.write() as tx:  # bulk load for the benchmark only
            await tx.conn.execute(approvals.insert(), [r for r, _, _ in part])
            await tx.conn.execute(approval_events.insert(), [e for _, e, _ in part])
            await tx.conn.execute(outbox.insert(), [j for _, _, j in part])
    if not url.startswith("sqlite"):
        # What autovacuum does soon after a bulk load; SQLite is left without ANALYZE.
        async with store.engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.exec_driver_sql("VACUUM ANALYZE")
    await store.close()
    print(f"  filled {len(rows):,} pending approvals in {time.perf_counter() - started:.1f} s")


async def timed(http: aiohttp.ClientSession, url: str, repeat: int) -> list[float]:
    took = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        async with http.get(url) as r:
            await r.read()
            assert r.status == 200, r.status
        took.append((time.perf_counter() - t0) * 1000)
    return took


async def spread(base: str, auth: dict[str, str], paths: list[str]) -> None:
    """20 requests of each path, a connection each, so that every worker of `serve
    --workers` answers some (the first time: imports, pools, the first summary)."""
    closing = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(headers=auth, connector=closing) as http:
        for path in paths:
            await timed(http, base + path, 20)


def pending_total(body: bytes) -> float:
    return sum(float(v) for v in _PENDING.findall(body))


async def run_on(
    url: str, rows: Rows, repeat: int, directory: Path, found: Results, db: str
) -> None:
    n = len(rows)
    engine = create_engine(url)
    await upgrade(engine)
    await engine.dispose()
    config = directory / "signoff.toml"
    config.write_text(config_toml(url), "utf-8")
    os.environ["BENCH_ACME_KEY"] = KEY
    server = Server(config)
    auth = {"Authorization": f"Bearer {KEY}"}
    paths = [
        ("GET /metrics", "/metrics"),
        ("GET /v1/approvals?state=pending", "/v1/approvals?state=pending"),
        ("GET /v1/approvals?state=rejected", "/v1/approvals?state=rejected"),
    ]
    try:
        await spread(server.url, auth, [path for _, path in paths])
        idle = rss_mb(server.proc.pid)
        # One kept-alive connection from here on, as a Prometheus server keeps.
        async with aiohttp.ClientSession(headers=auth) as http:
            await fill(url, rows)
            t0, total = time.perf_counter(), 0.0
            while total != n and time.perf_counter() - t0 < 120:
                async with http.get(server.url + "/metrics") as r:
                    total = pending_total(await r.read())
                await asyncio.sleep(0.2)
            print(
                f"  /metrics reported {total:,.0f} pending {time.perf_counter() - t0:.1f} s "
                "after the fill"
            )
            print(f"  {'request':<34} {'min':>7} {'median':>7} {'p99':>7} {'max':>7}  (ms)")
            for label, path in paths:
                took = await timed(http, server.url + path, repeat)
                p99 = percentile(took, 99)
                for ms in took:
                    found.add(f"{db}/{label}", ms, "ms")
                print(
                    f"  {label:<34} {min(took):7.1f} {statistics.median(took):7.1f} "
                    f"{p99:7.1f} {max(took):7.1f}"
                )
        await spread(server.url, auth, [path for _, path in paths])
        busy = rss_mb(server.proc.pid)
        for i, (pid, before) in enumerate(idle.items()):
            after = busy.get(pid, float("nan"))
            found.add(f"{db}/RSS growth, process {i + 1}", after - before, "MB")
            print(
                f"  RSS of process {pid}: idle {before:.1f} MB, at {n:,} pending {after:.1f} MB "
                f"({after - before:+.1f} MB)"
            )
    finally:
        server.stop()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--no-postgres", action="store_true")


def run(args: argparse.Namespace) -> Results:
    return asyncio.run(measure(args))


async def measure(args: argparse.Namespace) -> Results:
    found = Results()
    rows = build(args.n, datetime.now(UTC))
    with tempfile.TemporaryDirectory() as tmp:
        print(f"SQLite, {args.n:,} pending:")
        url = f"sqlite+aiosqlite:///{tmp}/bench.db"
        await run_on(url, rows, args.repeat, Path(tmp), found, "sqlite")
        if not args.no_postgres:
            async with postgres_database(args.postgres) as pg:
                if pg is not None:
                    print(f"PostgreSQL, {args.n:,} pending:")
                    await run_on(pg, rows, args.repeat, Path(tmp), found, "postgresql")
    return found

