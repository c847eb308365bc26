"""The service scenario's parts (bench/scenarios/service.py): each on a fresh database
(database) and a fresh server with the edge it talks to (Run, fresh_run), what it does to them
and the figures it reads (http_create, slack_clicks, sustained_cards), and the bare driver's
reference (bare_create). The processes they start are bench/processes.py's; the command line
that picks and prints them is bench/scenarios/service.py. The overload scenario runs its own
scenario on Run and fresh_run, and the grants and effects scenarios take their databases from
`database`.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp

from bench.harness import postgres_database
from bench.processes import SLACK_SECRET, Edge, Server, creates, run_load, summary, write_config
from bench.scenarios.decide_throughput import bench_bare_postgres, bench_bare_sqlite, migrated

SERVER_LOG: Path | None = None  # --server-log: each server's last lines, appended


class Run:
    """A fresh server on a fresh database, the edge it talks to, and an HTTP session to read
    the edge's counts."""

    def __init__(
        self, server: Server, edge: Edge, http: aiohttp.ClientSession, tmp: Path
    ) -> None:
        self.server, self.edge, self.http, self.tmp = server, edge, http, tmp

    async def counts(self) -> dict[str, int]:
        return await self.edge.counts(self.http)

    async def wait_for(
        self, done: Callable[[dict[str, int]], bool], patience: float
    ) -> tuple[bool, float, dict[str, int]]:
        """Poll the edge until `done(counts)`; (reached, seconds waited, last counts)."""
        began = time.time()
        while True:
            seen = await self.counts()
            if done(seen):
                return True, time.time() - began, seen
            if time.time() - began > patience:
                return False, time.time() - began, seen
            await asyncio.sleep(0.05)

    async def sample(self, stop: asyncio.Event, every: float = 0.25) -> list[tuple[float, dict]]:
        samples = []
        while not stop.is_set():
            samples.append((time.time(), await self.counts()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every)
        samples.append((time.time(), await self.counts()))
        return samples


@contextlib.asynccontextmanager
async def fresh_run(
    db: str, postgres: str, edge: Edge, workers: int | None, outside: bool = True
) -> AsyncIterator[Run | None]:
    with tempfile.TemporaryDirectory(prefix="signoff-bench-") as tmp:
        async with database(db, postgres, Path(tmp)) as url:
            if url is None:
                yield None
                return
            config = Path(tmp, "signoff.toml")
            write_config(config, url, edge.url, outside)
            server = Server(config, workers)
            try:
                async with aiohttp.ClientSession() as http:
                    yield Run(server, edge, http, Path(tmp))
            except BaseException:
                print("--- server log (tail)\n" + "".join(list(server.log)[-40:]), file=sys.stderr)
                raise
            finally:
                server.stop()
                if SERVER_LOG is not None:
                    with SERVER_LOG.open("a", encoding="utf-8") as f:
                        f.write(f"--- {db} server (last {len(server.log)} lines)\n")
                        f.writelines(server.log)


@contextlib.asynccontextmanager
async def database(db: str, postgres: str, tmp: Path) -> AsyncIterator[str | None]:
    if db == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp}/signoff.db"
    else:
        async with postgres_database(postgres) as url:
            yield url


async def http_create(run: Run, n: int, clients: int, procs: int, patience: float) -> dict:
    before = await run.counts()
    cpu0 = run.server.cpu()
    result = await creates(run.server.url, n=n, clients=clients, prefix="hc", procs=procs)
    cpu1 = run.server.cpu()
    posted, drain, _ = await run.wait_for(lambda c: c["post"] >= before["post"] + n, patience)
    cpu2 = run.server.cpu()
    return {
        "rate": result["rate"],
        "p50_ms": result["p50_ms"],
        "p99_ms": result["p99_ms"],
        "errors": result["errors"],
        "cpu_ms": (cpu1 - cpu0) / n * 1000,
        "cpu_ms_with_card": (cpu2 - cpu0) / n * 1000,
        "cards_drain_s": drain,
        "cards_posted": posted,
        # App Home publishes (views.publish) until the cards were posted: the one approver's.
        "homes": (await run.counts()).get("home", 0) - before.get("home", 0),
    }


async def slack_clicks(
    run: Run,
    rate: float,
    seconds: float,
    with_creates: bool,
    procs: int,
    patience: float,
    outside: bool = True,
) -> dict:
    """With `outside=False` the server has cards and webhooks off: the clicks' latency and
    CPU without the outbox's work, nothing to wait for afterwards."""
    k = int(rate * seconds)
    pending = run.tmp / f"pending-{int(with_creates)}.jsonl"
    before = await run.counts()
    made = await creates(run.server.url, n=k, prefix="sc", procs=procs, out=pending)
    if made["errors"]:
        raise RuntimeError(f"{made['errors']} creates failed while preparing the clicks")
    # Cards first: a click's card update needs the card it updates.
    posted, _, _ = await run.wait_for(
        lambda c: not outside or c["post"] >= before["post"] + k, patience
    )
    if not posted:
        raise RuntimeError("the cards of the approvals to click were not all posted")
    base = await run.counts()
    cpu0 = run.server.cpu()
    start_at = time.time() + 1.5
    stop = asyncio.Event()
    sampler = asyncio.create_task(run.sample(stop))
    jobs = [
        run_load(
            ["clicks", "--url", run.server.url, "--secret", SLACK_SECRET, "--approvals",
             str(pending), "--rate", str(rate), "--start-at", str(start_at)]
        )
    ]  # fmt: skip
    if with_creates:
        jobs.append(
            creates(run.server.url, seconds=seconds, rate=rate, prefix="bg", start_at=start_at)
        )
    try:
        answered = await asyncio.gather(*jobs)
    finally:
        stop.set()
        samples = await sampler
    clicked = answered[0]
    cpu1 = run.server.cpu()
    latencies = summary(sorted(clicked["latencies_ms"]))
    if not outside:
        return {
            "clicks": clicked["count"],
            "errors": clicked["errors"],
            **latencies,
            "offered_rate": rate,
            "cpu_ms": (cpu1 - cpu0) / k * 1000,
            "server_cores": (cpu1 - cpu0) / max(1e-9, clicked["ended"] - clicked["started"]),
        }
    delivered, _, last = await run.wait_for(
        lambda c: c["update"] >= base["update"] + k and c["hook_ids"] >= base["hook_ids"] + k,
        patience,
    )
    cpu2 = run.server.cpu()
    drain = max(0.0, time.time() - clicked["ended"]) if delivered else float("nan")
    # Backlog at each sample: clicks offered by then (the open loop's schedule) minus card
    # updates (and webhooks) delivered by then.
    window = [(t, c) for t, c in samples if clicked["started"] <= t <= clicked["ended"]]
    backlog = [
        (
            t,
            max(
                min(k, rate * (t - clicked["started"])) - (c["update"] - base["update"]),
                min(k, rate * (t - clicked["started"])) - (c["hook_ids"] - base["hook_ids"]),
            ),
        )
        for t, c in window
    ]
    figures = {
        "clicks": clicked["count"],
        "errors": clicked["errors"],
        **latencies,
        "offered_rate": rate,
        "cpu_ms": (cpu1 - cpu0) / k * 1000,
        "cpu_ms_until_delivered": (cpu2 - cpu0) / k * 1000,
        "server_cores": (cpu1 - cpu0) / max(1e-9, clicked["ended"] - clicked["started"]),
        "max_backlog": max((b for _, b in backlog), default=0.0),
        "backlog_slope": slope(backlog[len(backlog) // 2 :]),
        "delivered": delivered,
        "drain_s": drain,
        "updates": last["update"] - base["update"],
        # App Home publishes (views.publish) until then: one person's Home, at most one a second.
        "homes": last.get("home", 0) - base.get("home", 0),
        "webhooks": last["hook_ids"] - base["hook_ids"],
        "slack_errors": last["slack_errors"] - base["slack_errors"],
    }
    if with_creates:
        figures["creates_meanwhile"] = answered[1]["count"]
        figures["create_errors_meanwhile"] = answered[1]["errors"]
    return figures


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares growth per second of (t, value) points; 0 with fewer than 3."""
    if len(points) < 3:
        return 0.0
    ts = [t for t, _ in points]
    vs = [v for _, v in points]
    mt, mv = statistics.fmean(ts), statistics.fmean(vs)
    var = sum((t - mt) ** 2 for t in ts)
    return sum((t - mt) * (v - mv) for t, v in zip(ts, vs, strict=True)) / var if var else 0.0


async def sustained_cards(
    run: Run, seconds: float, clients: int, procs: int, patience: float
) -> dict:
    before = await run.counts()
    stop = asyncio.Event()
    sampler = asyncio.create_task(run.sample(stop))
    try:
        made = await creates(
            run.server.url, seconds=seconds, clients=clients, prefix="sus", procs=procs
        )
    finally:
        stop.set()
        samples = await sampler
    begin, end = made["started"] + 1.0, made["ended"]
    inside = [(t, c["post"]) for t, c in samples if begin <= t <= end]
    if len(inside) >= 2:
        (t0, p0), (t1, p1) = inside[0], inside[-1]
        cards_rate = (p1 - p0) / (t1 - t0)
    else:
        cards_rate = float("nan")
    at_end = next((c["post"] for t, c in samples if t >= end), samples[-1][1]["post"])
    count = made["count"]
    drained, drain, _ = await run.wait_for(lambda c: c["post"] >= before["post"] + count, patience)
    return {
        "create_rate": made["rate"],
        "cards_rate": cards_rate,
        "rate": min(made["rate"], cards_rate),
        "backlog_at_end": count - (at_end - before["post"]),
        "drain_s": drain if drained else float("nan"),
        "errors": made["errors"],
    }


async def bare_create(db: str, postgres: str, n: int, clients: int) -> dict | None:
    with tempfile.TemporaryDirectory(prefix="signoff-bench-") as tmp:
        if db == "sqlite":
            path = Path(tmp, "bare.db")
            await migrated(f"sqlite+aiosqlite:///{path}")
            rates = await bench_bare_sqlite(str(path), n, clients)
            return {"rate": rates["create"], "decide_rate": rates["decide"]}
        async with postgres_database(postgres) as url:
            if url is None:
                return None
            await migrated(url)
            dsn = url.replace("postgresql+asyncpg://", "postgresql://")
            rates = await bench_bare_postgres(dsn, n, clients)
            return {"rate": rates["create"], "decide_rate": rates["decide"]}
