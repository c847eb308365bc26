"""Overload: agents offer creates at twice what the server can take while people click.

The service as `python -m bench service` runs it (`signoff serve` in its own process, cards and
webhooks on, the fake Slack and webhook receiver in bench/edge.py, load generators in
bench/load.py), per run on a fresh database and a fresh server:

1. capacity: creates from 8 clients, closed loop, for --capacity-seconds; a create refused
   429 is asked again 50 ms later, so the server is always offered more than it takes. The
   capacity is the creates answered 201 per second.
2. K = --click-rate x --seconds pending approvals made (untimed), their cards posted, and
   every card of phase 1 posted too (the outbox has caught up).
3. overload: one signed Slack Approve click per approval at --click-rate per second, and at
   the same time creates offered open loop at --factor x capacity per second, each answer
   counted as it comes (a 429 is not asked again), for --seconds.
4. afterwards, every create answered 201 is looked for in the database (through the API's
   list, every page), and every clicked approval is approved.

Reported per run: capacity, offered rate, click p50/p99/max and clicks over 3 s (Slack's ack
window) or failed, creates accepted (201), refused (429; and 429s without Retry-After),
other answers and no answer (errors), accepted creates missing from the database (lost),
the server's 429 counter from /metrics; then min / median / max over the runs.

    python -m bench overload [--runs 3] [--databases sqlite] [--workers 1] [--seconds 10]
        [--click-rate 20] [--factor 2] [--capacity-seconds 5] [--max-creates-in-flight N]
        [--create-lag-limit S] [--postgres URL] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from bench import processes, service_scenarios
from bench.processes import API_KEY, SLACK_SECRET, Edge, run_load
from bench.results import Results, percentile
from bench.service_scenarios import Run, fresh_run

DESCRIPTION = "creates offered at twice capacity: do clicks stay fast, is anything lost"

REPO = Path(__file__).resolve().parents[2]

SLACK_ACK = 3000.0  # ms: Slack shows the user an error if a click is not answered by then


def create_args(url: str, prefix: str, start_at: float, *more: str) -> list[str]:
    return ["create", "--url", url, "--key", API_KEY, "--prefix", prefix,
            "--start-at", str(start_at), *more]  # fmt: skip


async def stored_ids(run: Run) -> dict[str, str]:
    """Every approval in the database, id -> state, through the API's list."""
    found: dict[str, str] = {}
    cursor: str | None = None
    headers = {"Authorization": f"Bearer {API_KEY}"}
    while True:
        query = {"limit": "500"} | ({"cursor": cursor} if cursor else {})
        async with run.http.get(
            f"{run.server.url}/v1/approvals", params=query, headers=headers
        ) as response:
            page = await response.json()
        found |= {a["id"]: a["state"] for a in page["approvals"]}
        cursor = page["next_cursor"]
        if cursor is None:
            return found


async def refused_counter(run: Run) -> float:
    async with run.http.get(f"{run.server.url}/metrics") as response:
        text = await response.text()
    return sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("signoff_creates_refused_total{")
    )


async def overload(run: Run, args: argparse.Namespace) -> dict[str, Any]:
    url = run.server.url
    before = await run.counts()
    # 1. capacity
    cap = await run_load(
        create_args(url, "cap", time.time() + 1.0, "--clients", "8", "--retry-wait", "0.05",
                    "--seconds", str(args.capacity_seconds))
    )  # fmt: skip
    accepted = cap["statuses"].get("201", 0)
    capacity = accepted / (cap["ended"] - cap["started"])
    # 2. approvals to click, and the outbox caught up
    k = int(args.click_rate * args.seconds)
    pending = run.tmp / "pending.jsonl"
    made = await run_load(
        create_args(url, "click", time.time() + 0.5, "--n", str(k), "--clients", "8",
                    "--out", str(pending))
    )  # fmt: skip
    if made["errors"]:
        raise RuntimeError(f"{made['errors']} creates failed while preparing the clicks")
    cards = before["post"] + accepted + k
    posted, _, _ = await run.wait_for(lambda c: c["post"] >= cards, args.timeout)
    if not posted:
        raise RuntimeError("the outbox did not catch up before the overload phase")
    refused_before = await refused_counter(run)
    # 3. overload
    offered = args.factor * capacity
    accepted_file = run.tmp / "accepted.jsonl"
    start_at = time.time() + 1.5
    cpu0 = run.server.cpu()
    clicked, offer = await asyncio.gather(
        run_load(
            ["clicks", "--url", url, "--secret", SLACK_SECRET, "--approvals", str(pending),
             "--rate", str(args.click_rate), "--start-at", str(start_at)]
        ),
        run_load(
            create_args(url, "over", start_at, "--rate", str(offered), "--seconds",
                        str(args.seconds), "--on-429", "count", "--out", str(accepted_file))
        ),
    )  # fmt: skip
    cpu1 = run.server.cpu()
    # 4. nothing accepted lost, every click decided
    stored = await stored_ids(run)
    accepted_ids = [json.loads(line)["id"] for line in accepted_file.read_text().splitlines()]
    clicked_ids = [json.loads(line)["id"] for line in pending.read_text().splitlines()]
    lat = sorted(clicked["latencies_ms"])
    statuses = offer["statuses"]
    return {
        "capacity": capacity,
        "capacity_refused": cap["refused"],
        "offered": offered,
        "offered_done": offer["count"] / max(1e-9, offer["ended"] - offer["started"]),
        "click_p50_ms": percentile(lat, 50),
        "click_p99_ms": percentile(lat, 99),
        "click_max_ms": lat[-1],
        "clicks": clicked["count"],
        "clicks_over_3s": sum(1 for x in lat if x > SLACK_ACK),
        "click_errors": clicked["errors"],
        "clicks_approved": sum(1 for i in clicked_ids if stored.get(i) == "approved"),
        "accepted": statuses.get("201", 0),
        "accepted_per_s": statuses.get("201", 0) / max(1e-9, offer["ended"] - offer["started"]),
        "refused_429": statuses.get("429", 0),
        "refused_without_retry_after": offer["refused_bare"],
        "create_errors": offer["errors"],
        "create_answers": {k: v for k, v in statuses.items() if k not in ("201", "429")},
        "lost": sum(1 for i in accepted_ids if i not in stored),
        "server_refusals": await refused_counter(run) - refused_before,
        # CPU the server used (its processes' user + system) per second of the phase: 1.0 is
        # one core busy throughout.
        "server_cores": (cpu1 - cpu0) / max(1e-9, time.time() - start_at),
    }


def spread(values: list[float]) -> str:
    return " / ".join(f"{v:,.1f}" for v in (min(values), statistics.median(values), max(values)))


async def bench(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    figures: dict[str, list[dict[str, Any]]] = {}
    edge = Edge()
    try:
        for db in args.databases.split(","):
            runs: list[dict[str, Any]] = []
            for n in range(args.runs):
                async with fresh_run(db, args.postgres, edge, args.workers) as run:
                    if run is None:
                        break
                    result = await overload(run, args)
                runs.append(result)
                print(f"{db} run {n + 1}: " + json.dumps(result, default=round), flush=True)
            if not runs:
                continue
            figures[db] = runs
            workers = args.workers or "default"
            print(f"{db}, workers={workers}, {len(runs)} runs, min / median / max:")
            for key in (
                "capacity", "offered", "click_p50_ms", "click_p99_ms", "click_max_ms",
                "clicks_over_3s", "click_errors", "accepted_per_s", "accepted", "refused_429",
                "refused_without_retry_after", "create_errors", "lost",
            ):  # fmt: skip
                print(f"  {key:<28} {spread([r[key] for r in runs])}")
    finally:
        edge.stop()
    return figures


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--databases", default="sqlite")
    p.add_argument("--workers", type=int, default=1, help="`signoff serve --workers N`")
    processes.add_background_process_option(p)
    p.add_argument("--seconds", type=float, default=10.0, help="length of the overload phase")
    p.add_argument("--click-rate", type=float, default=20.0, help="Slack clicks per second")
    p.add_argument("--factor", type=float, default=2.0, help="creates offered x capacity")
    p.add_argument("--capacity-seconds", type=float, default=5.0)
    p.add_argument("--max-creates-in-flight", type=int, help="[server] max_creates_in_flight")
    p.add_argument("--create-lag-limit", type=float, help="[server] create_lag_limit")
    p.add_argument("--timeout", type=float, default=120.0, help="longest wait for the outbox")
    p.add_argument(
        "--postgres",
        default=os.environ.get(
            "SIGNOFF_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
        ),
    )
    p.add_argument("--server-log", type=Path, help="append each server's last log lines here")


def run(args: argparse.Namespace) -> Results:
    service_scenarios.SERVER_LOG = args.server_log
    processes.SERVE_ARGS.extend(processes.background_process_args(args.background_process))
    if args.max_creates_in_flight is not None:
        processes.SERVER["max_creates_in_flight"] = args.max_creates_in_flight
    if args.create_lag_limit is not None:
        processes.SERVER["create_lag_limit"] = args.create_lag_limit
    figures = processes.run_bench(bench, args)
    found = Results(detail=figures)
    found.add_document(figures)
    return found

