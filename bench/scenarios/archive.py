"""Retention at scale: `signoff db archive` moving 100,000 decided requests out of a live
server's database, and whether the pending inbox and /metrics are any slower after.

Each run fills a fresh database with N decided requests (approved and executed, rejected,
expired, each with its whole audit chain, as bench.scenarios.dashboard_pages builds them)
whose last event is 500 days old, and --pending recent pending ones, then starts `signoff
serve` on it with `[retention] keep_decided = "400d"`. It times --repeat requests each of
alice's `GET /web/inbox` and `GET /metrics`, runs `signoff db archive` as its own process
beside the server (its wall time, the files and their size), checks the archive files
offline (`verify_file`, every chain and hash) and that only the recent requests are left,
then times the same requests again. Figures per run: the archive's seconds, requests per
second, MB, bytes per request, and the median and p99 of each request before and after.

    python -m bench archive [--n 100000] [--pending 2000] [--runs 3] [--repeat 30]
                            [--postgres URL | --no-postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp

from bench.harness import postgres_database
from bench.results import Results, percentile
from bench.scenarios.dashboard_pages import ROOT, Server, build
from bench.scenarios.dashboard_pages import config_toml as dashboard_config
from bot.archive_file import verify_file
from store.engine import create_engine
from store.migrate import upgrade
from store.repository import Store
from store.schema import approval_events, approvals

DESCRIPTION = "db archive of 100,000 decided requests: time, size, inbox and /metrics after"

AGE = timedelta(days=500)


def config_toml(url: str, archive_dir: Path) -> str:
    return (
        dashboard_config(url)
        + f'\n[retention]\nkeep_decided = "400d"\narchive_dir = "{archive_dir}"\nbatch = 1000\n'
    )


async def fill(url: str, decided: int, pending: int) -> None:
    """`decided` final requests last touched 500 days ago, `pending` recent pending ones."""
    engine = create_engine(url)
    await upgrade(engine)
    await engine.dispose()
    store = Store.from_url(url)
    now = datetime.now(UTC)
    started = time.perf_counter()
    kept = {"decided": 0, "pending": 0}
    want = {"decided": decided, "pending": pending}

    async def load(rows: list[tuple[dict[str, Any], list[dict[str, Any]]]]) -> None:
        async with store.write() as tx:  # bulk load for the benchmark only
            await tx.conn.execute(approvals.insert(), [row for row, _ in rows])
            await tx.conn.execute(approval_events.insert(), [e for _, t in rows for e in t])

    # The dashboard's mix, 30 days of it: about 19 in 20 decided, the newest pending.
    for which, base, span in (("decided", now - AGE, 2 * decided), ("pending", now, 40 * pending)):
        i, chunk = 0, []
        while kept[which] < want[which]:
            row, trail = build(i, span, base)
            i += 1
            if (row["state"] == "pending") == (which == "pending"):
                row["run_id"] = f"{which}-{i}"  # the two sets' draft numbers overlap
                chunk.append((row, trail))
                kept[which] += 1
            if len(chunk) == 5000:
                await load(chunk)
                chunk = []
        if chunk:
            await load(chunk)
    if not url.startswith("sqlite"):
        async with store.engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.exec_driver_sql("VACUUM ANALYZE")
    await store.close()
    print(
        f"  filled {decided:,} decided and {pending:,} pending requests in "
        f"{time.perf_counter() - started:.1f} s"
    )


async def timed(http: aiohttp.ClientSession, url: str, repeat: int) -> list[float]:
    took = []
    for attempt in range(repeat + 1):
        t0 = time.perf_counter()
        async with http.get(url) as r:
            await r.read()
            assert r.status == 200, r.status
        if attempt:  # the first warms the connection
            took.append((time.perf_counter() - t0) * 1000)
    return took


async def requests(server: Server, repeat: int) -> dict[str, list[float]]:
    http = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
    try:
        async with http.post(server.url + server.login("alice"), allow_redirects=False) as r:
            assert r.status == 303, await r.text()
        return {
            "GET /web/inbox (alice)": await timed(http, server.url + "/web/inbox", repeat),
            "GET /metrics": await timed(http, server.url + "/metrics", repeat),
        }
    finally:
        await http.close()


async def one_run(
    url: str, args: argparse.Namespace, directory: Path, found: Results, db: str
) -> None:
    await fill(url, args.n, args.pending)
    archive_dir = directory / "archive"
    config = directory / "signoff.toml"
    config.write_text(config_toml(url, archive_dir), "utf-8")
    server = Server(config)
    try:
        await asyncio.sleep(2)  # the metrics' first refresh
        before = await requests(server, args.repeat)
        t0 = time.perf_counter()
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "bot.cli", "db", "archive"],
            cwd=ROOT,
            env=server.env,
            capture_output=True,
            text=True,
        )
        seconds = time.perf_counter() - t0
        if done.returncode != 0:
            raise SystemExit(f"db archive failed:\n{done.stdout}{done.stderr}")
        print(f"  {done.stdout.strip()} in {seconds:.1f} s")
        await asyncio.sleep(2)
        after = await requests(server, args.repeat)
    finally:
        server.stop()
    files = sorted(archive_dir.iterdir())
    size = sum(f.stat().st_size for f in files)
    t0 = time.perf_counter()
    archived = 0
    for file in files:
        report = verify_file(file)
        assert report.ok, (file, report.problems[:3])
        archived += report.requests
    verify_seconds = time.perf_counter() - t0
    store = Store.from_url(url)
    async with store.read() as tx:
        left = await tx.list_approvals(limit=args.pending + 1)
    await store.close()
    assert archived == args.n, archived
    # Every recent request stays (the server's sweeper may have expired a few meanwhile).
    assert len(left) == args.pending, len(left)
    found.add(f"{db}/archive seconds", seconds, "s")
    found.add(f"{db}/archived per second", args.n / seconds)
    found.add(f"{db}/archive size", size / 1e6, "MB")
    found.add(f"{db}/archive bytes per request", size / args.n, "B")
    found.add(f"{db}/verify --archive seconds (all files)", verify_seconds, "s")
    print(
        f"  {len(files)} files, {size / 1e6:.1f} MB ({size / args.n:.0f} B a request); "
        f"verified offline in {verify_seconds:.1f} s"
    )
    for label in before:
        for when, took in (("before", before[label]), ("after", after[label])):
            found.add(f"{db}/{label} {when} median", statistics.median(took), "ms")
            found.add(f"{db}/{label} {when} p99", percentile(took, 99), "ms")
        print(
            f"  {label:<24} median {statistics.median(before[label]):6.1f} -> "
            f"{statistics.median(after[label]):6.1f} ms, p99 {percentile(before[label], 99):6.1f}"
            f" -> {percentile(after[label], 99):6.1f} ms"
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, default=100_000, help="decided requests to archive")
    parser.add_argument("--pending", type=int, default=2000, help="pending requests that stay")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=30, help="timed requests of each page")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--no-postgres", action="store_true")


def run(args: argparse.Namespace) -> Results:
    return asyncio.run(measure(args))


async def measure(args: argparse.Namespace) -> Results:
    found = Results()
    os.environ.setdefault("SIGNOFF_WEB_SECRET", "bench-archive-secret-0123456789abcdef")
    for run_number in range(1, args.runs + 1):
        with tempfile.TemporaryDirectory() as tmp:
            print(f"run {run_number}, SQLite:")
            await one_run(f"sqlite+aiosqlite:///{tmp}/bench.db", args, Path(tmp), found, "sqlite")
        if not args.no_postgres:
            async with postgres_database(args.postgres) as pg:
                if pg is not None:
                    with tempfile.TemporaryDirectory() as tmp:
                        print(f"run {run_number}, PostgreSQL:")
                        await one_run(pg, args, Path(tmp), found, "postgresql")
    return found
