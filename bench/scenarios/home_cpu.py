"""CPU per read of a Slack Home's list, in process: `inbox.pending_for` as the Home calls it
(the first SHOWN requests read whole, eligible ones counted up to COUNTED) with N pending
requests for one approver, on each database.

A burst of creates for one approver republishes their Home about once a second, and this
read is most of each publish (py-spy, issue 27). Run it on two trees with PYTHONPATH,
interleaved, for a before and after.

    PYTHONPATH=<tree> python -m bench home_cpu [--pending 2000] [--reads 50] [--runs 3]
                                               [--databases sqlite,postgresql] [--postgres URL]
"""

from __future__ import annotations

import argparse
import asyncio
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
from bot import inbox  # noqa: E402
from bot.clock import FakeClock  # noqa: E402
from bot.config import parse_config  # noqa: E402
from bot.intake import create_request, validate_request  # noqa: E402
from channels.slack.home import COUNTED, SHOWN  # noqa: E402
from store.repository import Store  # noqa: E402
from tests.support.databases import migrate  # noqa: E402
from tests.support.samples import TEST_CONFIG, request_body  # noqa: E402

DESCRIPTION = "CPU per read of a Slack Home's list in process, N pending (a tree on PYTHONPATH)"


async def one_run(url: str, pending: int, reads: int) -> float:
    """Milliseconds of this process's CPU per read, over `reads` reads."""
    await migrate(url)
    directory = parse_config(TEST_CONFIG).directory()
    store = Store.from_url(url)
    clock = FakeClock()
    try:
        for i in range(pending):  # payments.*: alice and the finance group decide
            body = request_body(run_id=f"run-{i}", step={"node": "refund", "n": i})
            await create_request(store, directory, clock, "acme", validate_request(body))
        now = clock.now()
        found = await inbox.pending_for(store, directory, "alice", now, limit=SHOWN, count=COUNTED)
        assert len(found.items) == min(SHOWN, pending), found
        start = time.process_time()
        for _ in range(reads):
            await inbox.pending_for(store, directory, "alice", now, limit=SHOWN, count=COUNTED)
        return (time.process_time() - start) / reads * 1e3
    finally:
        await store.close()


async def run_on(database: str, postgres: str, pending: int, reads: int) -> float | None:
    """One run on a fresh database; None when no PostgreSQL server answers."""
    if database == "sqlite":
        with tempfile.TemporaryDirectory(prefix="signoff-home-cpu-") as tmp:
            return await one_run(f"sqlite+aiosqlite:///{tmp}/signoff.db", pending, reads)
    async with postgres_database(postgres) as url:
        return None if url is None else await one_run(url, pending, reads)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pending", type=int, default=2000)
    p.add_argument("--reads", type=int, default=50)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--databases", default="sqlite,postgresql")
    p.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")


def run(args: argparse.Namespace) -> Results:
    found = Results()
    for database in args.databases.split(","):
        runs = [
            asyncio.run(run_on(database, args.postgres, args.pending, args.reads))
            for _ in range(args.runs)
        ]
        figures = [figure for figure in runs if figure is not None]
        for figure in figures:
            found.add(f"{database}/cpu_per_home_list", figure, "ms")
        if not figures:
            continue
        low, mid, high = min(figures), statistics.median(figures), max(figures)
        tree = Path(bot.__file__).resolve().parents[1]
        print(f"{database}: CPU per Home list {low:.1f} / {mid:.1f} / {high:.1f} ms", end=" ")
        print(f"(pending={args.pending}, counted up to {COUNTED}, {tree})")
    return found
