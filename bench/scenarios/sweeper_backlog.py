"""The sweeper draining a large backlog of due approvals while humans keep deciding.

The target: the sweeper expires 100,000 due approvals in bounded batches without
pushing decision p99 past 100 ms. This script files N pending approvals plus a pool of fresh
ones, moves the clock past the TTL of the N (not of the pool), then runs `Sweeper.sweep_all`
while decisions on the pool are offered at a fixed rate (default 100/s) through the
Operator. It prints the sweep rate and the decision latency p50/p99 during the sweep.

The backlog is inserted in bulk with the rows intake itself builds (`intake.new_approval`),
not through `create_request`, so filling 100,000 rows takes seconds instead of minutes; the
rows are exactly what signoff writes.

    python -m bench sweeper_backlog [--n 100000] [--rate 100] [--batch 200] [--postgres URL]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from datetime import UTC, datetime, timedelta

import bot.outbox  # noqa: F401  (installs the outbox bot.effects queues through)
from bench.harness import postgres_database, quantiles
from bench.results import Results
from bot.canonical import approval_hash
from bot.clock import FakeClock
from bot.config import parse_config
from bot.intake import Draft, new_approval
from bot.model import Kind
from bot.operator import Actor, Operator
from bot.sweeper import Sweeper
from store.engine import create_engine
from store.migrate import upgrade
from store.repository import Store
from store.schema import approval_events, approvals

DESCRIPTION = "the sweeper draining 100,000 due approvals while decisions run at 100/s"

CONFIG = {
    "tenants": [{"name": "acme"}],
    "principals": {"alice": {"name": "Alice"}},
    "routes": [{"tenant": "acme", "capability": "payments.*", "approvers": ["alice"]}],
}


def draft(i: int, ttl: timedelta) -> Draft:
    presentation = {"title": f"Refund {i}"}
    args = {"charge": f"ch_{i}", "amount": i}
    kind = Kind.TOOL_CALL
    return Draft(
        tenant="acme",
        run_id=f"run-{i}",
        kind=kind,
        capability="payments.refund",
        tool_name="stripe.refunds.create",
        tool_args=args,
        presentation=presentation,
        hash=approval_hash(kind, "payments.refund", presentation, "stripe.refunds.create", args),
        reason=None,
        requested_by=None,
        approvers=["alice"],
        required_approvals=1,
        allow_self_approval=False,
        approval_ttl=ttl,
        grant_ttl=timedelta(hours=24),
        first_escalation=None,
    )


async def fill(store: Store, start: int, count: int, ttl: timedelta, now: datetime) -> list[dict]:
    rows = []
    for chunk in range(start, start + count, 5000):
        built = [
            new_approval(draft(i, ttl), now=now, actor="agent:acme")
            for i in range(chunk, min(chunk + 5000, start + count))
        ]
        async with store.write() as tx:  # bulk load for the benchmark only
            await tx.conn.execute(approvals.insert(), [values for values, _ in built])
            await tx.conn.execute(approval_events.insert(), [event for _, event in built])
        rows += [values for values, _ in built]
    return rows


async def bench(url: str, n: int, rate: float, batch: int, found: Results, db: str) -> None:
    engine = create_engine(url)
    await upgrade(engine)
    await engine.dispose()
    store = Store.from_url(url, pool_size=20, max_overflow=10)
    clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
    directory = parse_config(CONFIG).directory()
    started = time.perf_counter()
    await fill(store, 0, n, timedelta(hours=1), clock.now())
    pool = await fill(store, n, 3000, timedelta(days=30), clock.now())
    print(
        f"  filled {n} due + {len(pool)} fresh approvals in {time.perf_counter() - started:.1f} s"
    )
    clock.advance(hours=2)  # the N are past their TTL, the pool is not

    operator = Operator(store, directory, clock)
    sweeper = Sweeper(store, directory, clock, batch=batch)
    latencies: list[float] = []
    done = asyncio.Event()

    async def decide(row: dict) -> None:
        t0 = time.perf_counter()
        await operator.approve_shown(row["id"], row["hash"], Actor("alice", "cli"))
        latencies.append((time.perf_counter() - t0) * 1000)

    async def offer() -> None:
        tasks = []
        for row in pool:
            if done.is_set():
                break
            tasks.append(asyncio.create_task(decide(row)))
            await asyncio.sleep(1 / rate)
        await asyncio.gather(*tasks)

    t0 = time.perf_counter()
    offering = asyncio.create_task(offer())
    report = await sweeper.sweep_all()
    elapsed = time.perf_counter() - t0
    done.set()
    await offering
    await store.close()
    p50, p99 = quantiles(latencies)
    found.add(f"{db}/swept_per_s", report.expired / elapsed, "/s")
    found.add(f"{db}/decision_p50_ms", p50, "ms")
    found.add(f"{db}/decision_p99_ms", p99, "ms")
    found.add_samples(f"{db}/decision_latency_ms", latencies)
    print(
        f"  swept {report.expired} in {elapsed:.1f} s ({report.expired / elapsed:,.0f}/s); "
        f"{len(latencies)} decisions meanwhile: p50 {p50:.1f} ms, p99 {p99:.1f} ms"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=100)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")


def run(args: argparse.Namespace) -> Results:
    return asyncio.run(measure(args))


async def measure(args: argparse.Namespace) -> Results:
    found = Results()
    with tempfile.TemporaryDirectory() as tmp:
        print(f"SQLite, {args.n} due, decisions offered at {args.rate:.0f}/s")
        url = f"sqlite+aiosqlite:///{tmp}/bench.db"
        await bench(url, args.n, args.rate, args.batch, found, "sqlite")
    async with postgres_database(args.postgres) as url:
        if url is not None:
            print(f"PostgreSQL, {args.n} due, decisions offered at {args.rate:.0f}/s")
            await bench(url, args.n, args.rate, args.batch, found, "postgresql")
    return found

