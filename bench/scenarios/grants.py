"""Standing grants under load (issue 30, "Measure"): how long a create that a grant covers
takes to reach the agent's webhook, beside a create that a person approves at once; and
creates per second when every request is covered, beside plain (pending) creates.

Each part runs in a process of its own, as in production: `signoff serve` (one worker unless
--workers; cards to the fake Slack of bench/edge.py, webhooks to the receiver of
bench/edge.py's hooks role, which notes when each arrived), and the agents (bench/load.py). Per
run and database, on two fresh databases and servers:

- covered: one request is created and approved with "allow the same for 8h", every argument
  freed (`signoff approvals approve ID --hash H --as alice --allow-for 8h --allow-any charge
  --allow-any amount --allow-any currency`, the CLI as a process: with no bound named, the
  grant would hold each argument to its value on the seed, and cover none of the creates);
  then (1) creates offered at --rate per second for --seconds, each approved at once by the
  grant: create sent -> `approved` webhook arrived, p50 / p99 / max; (2) --n creates from
  --clients agents, closed loop: creates per second, and the time until every webhook came.
- plain: the reference, no grant: (1) the same open-loop creates, each approved by a Slack
  Approve click sent the moment its create answered (bench/load.py --then-click): create
  sent -> webhook, so it holds a create, a decision and the webhook; (2) the same closed-loop
  creates, left pending (each posts its card).

Cards are on in both (a request a grant approves still posts its card, "Approved by a
standing grant of Alice": `notify_grant_uses` defaults to true) and webhooks are drained.
Runs are interleaved: run 1 of everything, then run 2, ... Min / median / max over runs.

    python -m bench grants [--runs 3] [--rate 20] [--seconds 10] [--n 2000] [--clients 32]
        [--databases sqlite,postgresql] [--workers N] [--postgres URL] [--out FILE]

Every process started is stopped on exit, errors and SIGTERM included.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench import processes, service_scenarios
from bench.harness import server_config
from bench.processes import CHILDREN, Edge, EdgeProc, Server, earliest_hooks
from bench.results import Results, percentile

REPO = Path(__file__).resolve().parents[2]

DESCRIPTION = "a create a standing grant covers: create -> webhook, creates/s, beside plain creates"
KINDS = ("covered", "plain")


def write_config(path: Path, database_url: str, edge: Edge, hooks: EdgeProc) -> None:
    path.write_text(
        server_config(
            database_url,
            slack_api=f"{edge.url}/api/",
            webhook_url=f"{hooks.url}/hooks",
            notify=["slack:C0FIN"],
        ),
        "utf-8",
    )


async def cli(config: Path, *args: str) -> str:
    """`signoff ARGS --config C` as a process; its stdout."""
    done = await asyncio.to_thread(
        subprocess.run,
        [*processes.signoff_command(), *args, "--config", str(config)],
        cwd=REPO,
        env=processes.server_env(),
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"signoff {' '.join(args)} failed: {done.stdout}{done.stderr}")
    return done.stdout


async def give_grant(url: str, config: Path, tmp: Path) -> None:
    """A request approved by alice with "allow the same for 8h" and any arguments, through
    the CLI."""
    out = tmp / "seed.jsonl"
    made = await processes.creates(url, n=1, clients=1, prefix="seed", out=out)
    if made["errors"]:
        raise RuntimeError("the seed create failed")
    seed = json.loads(out.read_text("utf-8"))
    await cli(
        config, "approvals", "approve", seed["id"], "--hash", seed["hash"], "--as", "alice",
        "--allow-for", "8h", "--allow-any", "charge", "--allow-any", "amount",
        "--allow-any", "currency",
    )  # fmt: skip


async def hooks_for(
    http: aiohttp.ClientSession, hooks: EdgeProc, ids: set[str], patience: float
) -> dict[str, float]:
    """Approval id -> when its `approved` webhook arrived, waiting (up to `patience` s) for
    all of `ids`."""
    give_up = time.time() + patience
    while True:
        await hooks.collect(http)
        found = earliest_hooks(hooks.arrivals)
        if ids <= found.keys() or time.time() > give_up:
            return {i: at for i, at in found.items() if i in ids}
        await asyncio.sleep(0.05)


def pct(values: list[float], q: int) -> float:
    return percentile(values, q)


async def latency(
    server: Server, http: aiohttp.ClientSession, hooks: EdgeProc, args: argparse.Namespace,
    tmp: Path, kind: str,
) -> dict[str, Any]:  # fmt: skip
    """Open-loop creates at --rate; create sent -> `approved` webhook, per request."""
    out = tmp / f"latency-{kind}.jsonl"
    click = ["--then-click", processes.SLACK_SECRET] if kind == "plain" else []
    made = await processes.run_load(
        ["create", "--url", server.url, "--key", processes.API_KEY, "--prefix", f"lat-{kind}",
         "--rate", str(args.rate), "--seconds", str(args.seconds), "--out", str(out),
         "--start-at", str(time.time() + 1.0), *click]
    )  # fmt: skip
    created = [json.loads(line) for line in out.read_text("utf-8").splitlines()]
    arrived = await hooks_for(http, hooks, {c["id"] for c in created}, args.patience)
    waits = sorted((arrived[c["id"]] - c["sent"]) * 1000 for c in created if c["id"] in arrived)
    return {
        "offered": len(created),
        "errors": made["errors"],
        "webhooks": len(waits),
        "p50_ms": statistics.median(waits) if waits else float("nan"),
        "p99_ms": pct(waits, 99),
        "max_ms": max(waits, default=float("nan")),
    }


async def throughput(
    server: Server, http: aiohttp.ClientSession, hooks: EdgeProc, args: argparse.Namespace,
    kind: str,
) -> dict[str, Any]:  # fmt: skip
    """--n creates from --clients agents, closed loop; for covered ones, until every webhook."""
    out = Path(tempfile.mkstemp(prefix=f"signoff-grants-{kind}-")[1])
    cpu0 = server.cpu()
    made = await processes.creates(
        server.url, n=args.n, clients=args.clients, prefix=f"tp-{kind}", out=out
    )
    cpu1 = server.cpu()
    figures: dict[str, Any] = {
        "creates_per_s": made["rate"],
        "p50_ms": made["p50_ms"],
        "p99_ms": made["p99_ms"],
        "errors": made["errors"],
        "cpu_ms": (cpu1 - cpu0) / args.n * 1000,
    }
    if kind == "covered":
        lines = (await asyncio.to_thread(out.read_text, "utf-8")).splitlines()
        ids = {json.loads(line)["id"] for line in lines}
        arrived = await hooks_for(http, hooks, ids, args.patience)
        figures["webhooks"] = len(arrived)
        figures["webhooks_done_s"] = max(arrived.values(), default=made["ended"]) - made["ended"]
    await asyncio.to_thread(out.unlink)
    return figures


async def one_run(
    db: str, kind: str, args: argparse.Namespace, edge: Edge, hooks: EdgeProc
) -> dict[str, Any] | None:
    with tempfile.TemporaryDirectory(prefix="signoff-grants-") as tmp:
        async with service_scenarios.database(db, args.postgres, Path(tmp)) as url:
            if url is None:
                return None
            config = Path(tmp, "signoff.toml")
            write_config(config, url, edge, hooks)
            server = Server(config, args.workers)
            try:
                async with aiohttp.ClientSession() as http:
                    if kind == "covered":
                        await give_grant(server.url, config, Path(tmp))
                    return {
                        "latency": await latency(server, http, hooks, args, Path(tmp), kind),
                        "throughput": await throughput(server, http, hooks, args, kind),
                    }
            except BaseException:
                print("--- server log (tail)\n" + "".join(list(server.log)[-40:]), file=sys.stderr)
                raise
            finally:
                server.stop()


def spread(values: list[float]) -> str:
    """min / median / max."""
    if not values:
        return "-"
    return " / ".join(f"{v:,.1f}" for v in (min(values), statistics.median(values), max(values)))


def report(results: list[dict[str, Any]]) -> None:
    print("\nmin / median / max over runs")
    for db in dict.fromkeys(r["database"] for r in results):
        for kind in KINDS:
            mine = [r for r in results if r["database"] == db and r["kind"] == kind]
            lat = [r["figures"]["latency"] for r in mine]
            tp = [r["figures"]["throughput"] for r in mine]
            print(
                f"  {db:<10} {kind:<7} create -> webhook p50 {spread([x['p50_ms'] for x in lat])}"
                f" ms, p99 {spread([x['p99_ms'] for x in lat])} ms; "
                f"creates/s {spread([x['creates_per_s'] for x in tp])}, "
                f"CPU/create {spread([x['cpu_ms'] for x in tp])} ms"
            )


async def bench(args: argparse.Namespace) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    edge, hooks = Edge(), EdgeProc("hooks")
    try:
        for n in range(1, args.runs + 1):
            for db in args.databases.split(","):
                for kind in KINDS:
                    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
                    print(f"run {n}, {db}, {kind} (load {load}):", flush=True)
                    began = time.time()
                    figures = await one_run(db, kind, args, edge, hooks)
                    if figures is None:
                        break
                    for part, f in figures.items():
                        shown = "  ".join(
                            f"{k}={v:,.1f}" if isinstance(v, float) else f"{k}={v}"
                            for k, v in f.items()
                        )
                        print(f"  {part:<10} {shown}", flush=True)
                    print(f"  ({time.time() - began:.0f} s)", flush=True)
                    results.append({"run": n, "database": db, "kind": kind, "figures": figures})
        report(results)
    finally:
        edge.stop()
        CHILDREN.stop(hooks.proc)
    return results


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--rate", type=float, default=20.0, help="open-loop creates per second")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--n", type=int, default=2000, help="closed-loop creates per run")
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--databases", default="sqlite,postgresql")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--patience", type=float, default=60.0, help="seconds to wait for webhooks")
    p.add_argument(
        "--postgres",
        default=os.environ.get("SIGNOFF_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres"),
    )  # fmt: skip


def run(args: argparse.Namespace) -> Results:
    runs = processes.run_bench(bench, args)
    found = Results(detail=runs)
    for r in runs:
        for part, figures in r["figures"].items():
            for name, value in figures.items():
                found.add(f"{r['database']}/{r['kind']}/{part}/{name}", value)
    return found
