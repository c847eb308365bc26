"""CPU per create's transaction, in process: `intake.create_request` called one after another
(a step key, one Slack card queued), nothing else running, on each database.

What the HTTP benchmarks cannot resolve (their run-to-run spread is about a tenth): the
cost of one statement more or less in a create. No HTTP, no card posted, no concurrency:
only the routing, hashing and the transaction's statements, with the driver's round trips.
Run it on two trees with PYTHONPATH, interleaved, for a before and after.

    PYTHONPATH=<tree> python -m bench create_cpu [--n 2000] [--runs 3]
                                                 [--databases sqlite,postgresql] [--postgres URL]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import statistics
import tempfile
import time
from pathlib import Path

# A tree on PYTHONPATH is the one measured (its path is printed): see project_from_pythonpath.
import bench
from bench.harness import postgres_database
from bench.results import Results

bench.project_from_pythonpath()

import bot  # noqa: E402
import bot.outbox  # noqa: E402  (installs the outbox bot.effects queues through)
from bot.clock import FakeClock  # noqa: E402
from bot.config import parse_config  # noqa: E402
from bot.intake import create_request, validate_request  # noqa: E402
from store.repository import Store  # noqa: E402
from tests.support.databases import migrate  # noqa: E402
from tests.support.samples import TEST_CONFIG, request_body  # noqa: E402

DESCRIPTION = "CPU per create's transaction in process (a tree on PYTHONPATH measured)"

WARM_UP = 200  # creates before the clock starts: statements prepared, connections kept


async def one_run(url: str, n: int) -> float:
    """Microseconds of this process's CPU per create, over `n` creates."""
    await migrate(url)
    config = copy.deepcopy(TEST_CONFIG)
    config["slack"] = {}  # a route may notify only a configured surface
    config["routes"][0]["notify"] = ["slack:C0FIN"]
    directory = parse_config(config).directory()
    store = Store.from_url(url)
    clock = FakeClock()
    bodies = [
        validate_request(request_body(run_id=f"run-{i}", step={"node": "refund", "n": i}))
        for i in range(WARM_UP + n)
    ]
    try:
        for body in bodies[:WARM_UP]:
            await create_request(store, directory, clock, "acme", body)
        start = time.process_time()
        for body in bodies[WARM_UP:]:
            await create_request(store, directory, clock, "acme", body)
        return (time.process_time() - start) / n * 1e6
    finally:
        await store.close()


async def run_on(database: str, postgres: str, n: int) -> float | None:
    """One run on a fresh database; None when no PostgreSQL server answers."""
    if database == "sqlite":
        with tempfile.TemporaryDirectory(prefix="signoff-create-cpu-") as tmp:
            return await one_run(f"sqlite+aiosqlite:///{tmp}/signoff.db", n)
    async with postgres_database(postgres) as url:
        return None if url is None else await one_run(url, n)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--databases", default="sqlite,postgresql")
    p.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")


def run(args: argparse.Namespace) -> Results:
    found = Results()
    for database in args.databases.split(","):
        runs = [asyncio.run(run_on(database, args.postgres, args.n)) for _ in range(args.runs)]
        figures = [figure for figure in runs if figure is not None]
        for figure in figures:
            found.add(f"{database}/cpu_per_create", figure, "us")
        if not figures:
            continue
        low, mid, high = min(figures), statistics.median(figures), max(figures)
        tree = Path(bot.__file__).resolve().parents[1]
        print(f"{database}: CPU per create {low:.0f} / {mid:.0f} / {high:.0f} us", end=" ")
        print(f"(n={args.n}, {tree})")
    return found
