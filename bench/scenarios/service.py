"""The service as it runs in production, each part in a process of its own: `signoff serve`
(the real CLI, cards and webhooks on), the fake Slack Web API and a webhook receiver
(bench/edge.py), and load generators (bench/load.py) driving it over loopback HTTP.

Per database (a SQLite file; PostgreSQL when reachable), each scenario on a fresh database
and a fresh server:

- http_create: N creates (agent-shaped bodies with a 4 KB transcript) from 32 clients,
  closed loop: creates/s, latency p50/p99, and the server's CPU per create (utime + stime of
  the server and its worker processes, read from /proc) while creating, and including the
  card each create posts (counted until the fake Slack has every card).
- slack_clicks: K pending approvals made (untimed) and their cards posted, then one signed
  Slack Approve click per approval offered at --rate per second to POST /slack/events: the
  clicks' latency p50/p99/max, the server's CPU per click, the outbox backlog while clicking
  (decisions answered minus card updates / webhooks delivered), and how long after the last
  click every card update and every webhook had arrived. With --with-creates (the default)
  it runs a second time while another generator creates at --rate per second; with
  --quiet-reference (the default), once more on a server with cards and webhooks off
  (slack_clicks_quiet), the reference for what the outbox costs a decision.
- sustained_cards: creates from 32 clients, closed loop, for --sustain-seconds: creates/s and
  cards posted per second over the same window (after a 1 s warm-up), the backlog left at
  the end and how long it took to drain.
- bare_create: the reference. The statements of a create (INSERT approval, INSERT event)
  through the driver alone (the decide_throughput scenario's bare SQL), 32 clients, in this
  process, before any server starts; then those of a decision on the rows made (lock,
  conditional UPDATE, event, card messages, webhook job): `rate` and `decide_rate`.

    python -m bench service [--n 3000] [--clients 32] [--rate 100] [--seconds 10]
        [--sustain-seconds 10] [--workers N] [--databases sqlite,postgresql]
        [--scenarios http_create,slack_clicks,sustained_cards,bare_create]
        [--no-with-creates] [--no-quiet-reference] [--load-procs 1] [--postgres URL] [--out FILE]

`--workers N` is passed to `signoff serve --workers N`; without it serve runs as it defaults.
Every process started is stopped on exit, errors and SIGTERM included.

This module is the command line: it picks the scenarios, runs them and prints their figures.
The scenarios are bench/service_scenarios.py's; the processes they start (the server, the
edge, the load generators) and the CPU read from /proc are bench/processes.py's, which other
bench scenarios share. The click scenario alone (the old bench/slack_clicks.py):
`python -m bench service --scenarios slack_clicks --no-with-creates --no-quiet-reference`.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import service_scenarios
from bench.processes import (
    OUTBOX,
    SERVE_ARGS,
    Edge,
    add_background_process_option,
    background_process_args,
    run_bench,
)
from bench.results import Results
from bench.service_scenarios import (
    Run,
    bare_create,
    fresh_run,
    http_create,
    slack_clicks,
    sustained_cards,
)

REPO = Path(__file__).resolve().parents[2]

DESCRIPTION = "signoff serve as deployed: HTTP creates/s, clicks at 100/s, cards/s, beside bare SQL"
SCENARIOS = ("bare_create", "http_create", "slack_clicks", "sustained_cards")


# -- the run ---------------------------------------------------------------------------------


def line(name: str, f: dict[str, Any]) -> str:
    def fmt(key: str, value: Any) -> str:
        if isinstance(value, bool):
            return f"{key}={'yes' if value else 'NO'}"
        if isinstance(value, float):
            return f"{key}={value:,.2f}" if abs(value) < 100 else f"{key}={value:,.0f}"
        return f"{key}={value}"

    return f"  {name:<28} " + "  ".join(fmt(k, v) for k, v in f.items())


async def bench(args: argparse.Namespace) -> dict[str, dict[str, dict]]:
    figures: dict[str, dict[str, dict]] = {}
    scenarios = args.scenarios.split(",")
    unknown = set(scenarios) - set(SCENARIOS)
    if unknown:
        raise SystemExit(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    edge = Edge()
    try:
        for db in args.databases.split(","):
            print(
                f"{db}: workers={args.workers or 'default'} clients={args.clients} n={args.n} "
                f"clicks={args.rate:.0f}/s for {args.seconds:.0f} s cpus={os.cpu_count()}",
                flush=True,
            )
            ours: dict[str, dict] = {}
            if "bare_create" in scenarios:
                bare = await bare_create(db, args.postgres, args.n, args.clients)
                if bare is None:
                    continue
                ours["bare_create"] = bare
                print(line("bare SQL create", bare), flush=True)
            plan: list[tuple[str, Callable[[Run], Any]]] = []
            if "http_create" in scenarios:
                plan.append(
                    (
                        "http_create",
                        lambda r: http_create(
                            r, args.n, args.clients, args.load_procs, args.timeout
                        ),
                    )
                )
            if "slack_clicks" in scenarios:
                plan.append(
                    (
                        "slack_clicks",
                        lambda r: slack_clicks(
                            r, args.rate, args.seconds, False, args.load_procs, args.timeout
                        ),
                    )
                )
                if args.quiet_reference:
                    plan.append(
                        (
                            "slack_clicks_quiet",
                            lambda r: slack_clicks(
                                r,
                                args.rate,
                                args.seconds,
                                False,
                                args.load_procs,
                                args.timeout,
                                outside=False,
                            ),
                        )
                    )
                if args.with_creates:
                    plan.append(
                        (
                            "slack_clicks_with_creates",
                            lambda r: slack_clicks(
                                r, args.rate, args.seconds, True, args.load_procs, args.timeout
                            ),
                        )
                    )
            if "sustained_cards" in scenarios:
                plan.append(
                    (
                        "sustained_cards",
                        lambda r: sustained_cards(
                            r, args.sustain_seconds, args.clients, args.load_procs, args.timeout
                        ),
                    )
                )
            for name, scenario in plan:
                outside = not name.endswith("_quiet")
                began = time.time()
                async with fresh_run(db, args.postgres, edge, args.workers, outside) as run:
                    if run is None:
                        break
                    ours[name] = await scenario(run)
                took = f"  ({time.time() - began:.0f} s)"
                print(line(name, ours[name]) + took, flush=True)
            if ours:
                figures[db] = ours
    finally:
        edge.stop()
    return figures


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=int, default=3000, help="creates in http_create and bare_create")
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--rate", type=float, default=100.0, help="clicks (and creates) per second")
    p.add_argument("--seconds", type=float, default=10.0, help="length of the click run")
    p.add_argument("--sustain-seconds", type=float, default=10.0)
    p.add_argument("--with-creates", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument(
        "--quiet-reference",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also click a server with cards and webhooks off (the reference)",
    )
    p.add_argument("--workers", type=int, help="passed to `signoff serve --workers N`")
    add_background_process_option(p)
    p.add_argument("--databases", default="sqlite,postgresql")
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument("--load-procs", type=int, default=1, help="load generator processes")
    p.add_argument("--timeout", type=float, default=120.0, help="longest wait for deliveries")
    p.add_argument(
        "--postgres",
        default=os.environ.get(
            "SIGNOFF_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
        ),
    )
    p.add_argument("--server-log", type=Path, help="append each server's last log lines here")
    p.add_argument(
        "--busy-concurrency", type=int, help="the server's [outbox] busy_concurrency (default 4)"
    )


def run(args: argparse.Namespace) -> Results:
    service_scenarios.SERVER_LOG = args.server_log
    SERVE_ARGS.extend(background_process_args(args.background_process))
    if args.busy_concurrency is not None:
        OUTBOX["busy_concurrency"] = args.busy_concurrency
    figures = run_bench(bench, args)
    found = Results(detail=figures)
    found.add_document(figures)
    return found
