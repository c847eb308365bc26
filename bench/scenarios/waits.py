"""Waits woken on commit: N agents each holding a wait (`GET /v1/approvals/{id}?wait=60`) on
a real `signoff serve`, their requests decided by signed Slack clicks at a fixed rate.

Each run, on a fresh database, with cards and webhooks on (the fake Slack and the webhook
receiver of bench/edge.py, each in its own process, as are the clients):
  1. N requests created through the API, their cards posted (drained);
  2. the reference: the CPU of the server that will hold the waits, idle, over --seconds;
  3. bench/waiters.py opens N waits on that server; once they are held, its CPU again over
     --seconds: the cost of holding them (figure: ms/s above the idle reference);
  4. bench/load.py clicks Approve on every card at --rate per second, on the server that
     takes decisions; each wait's answer time (when the waiter had the decided record)
     against the decision: its record's `decided_at`, stamped inside the deciding
     transaction just before its commit (the figure the target names: a wait answered
     within 100 ms p99 of the commit; this slightly overstates it by the commit's own
     time). Also against the click's answer (negative: the wait answered first) and its
     sending (which adds the click's own handling).
SQLite: one `signoff serve` (one process) takes the clicks and holds the waits. PostgreSQL:
two `signoff serve` processes on one database; the clicks go to the first, the waits are
held on the second, so every wake crosses processes (LISTEN/NOTIFY).

    python -m bench waits [--n 1000] [--rate 20] [--runs 3] [--seconds 10]
                          [--databases sqlite,postgresql] [--postgres URL] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import aiohttp

from bench.processes import (
    API_KEY,
    CHILDREN,
    SLACK_SECRET,
    Edge,
    Server,
    creates,
    run_bench,
    run_load,
    summary,
    write_config,
)
from bench.results import Results
from bench.service_scenarios import Run, database

DESCRIPTION = "N held waits on serve, decided by Slack clicks: answer latency and idle CPU"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=int, default=1000, help="requests, one wait each")
    p.add_argument("--rate", type=float, default=20.0, help="clicks per second")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--seconds", type=float, default=10.0, help="each CPU window")
    p.add_argument("--databases", default="sqlite,postgresql")
    p.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    p.add_argument("--patience", type=float, default=300.0, help="seconds to wait for drains")


class Waiters:
    """bench/waiters.py as a process: `holding()` once its waits are held, then `result()`."""

    def __init__(self, url: str, approvals: Path, deadline: float) -> None:
        self.proc = CHILDREN.popen(
            [sys.executable, "-m", "bench.waiters", "--url", url, "--key", API_KEY,
             "--approvals", str(approvals), "--deadline", str(deadline)],
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        self._lines: list[str] = []
        self._first = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.append(line)
            self._first.set()
        self._first.set()

    async def holding(self, patience: float) -> int:
        if not await asyncio.to_thread(self._first.wait, patience) or not self._lines:
            raise RuntimeError("bench.waiters never held its waits")
        return int(json.loads(self._lines[0])["holding"])

    async def result(self) -> dict[str, Any]:
        await asyncio.to_thread(self.proc.wait)
        if self.proc.returncode != 0 or len(self._lines) < 2:
            raise RuntimeError(f"bench.waiters failed ({self.proc.returncode})")
        return json.loads(self._lines[-1])


async def cpu_ms_per_s(server: Server, seconds: float) -> float:
    before = server.cpu()
    await asyncio.sleep(seconds)
    return (server.cpu() - before) / seconds * 1000


async def one_run(args: argparse.Namespace, db: str, edge: Edge) -> dict[str, Any] | None:
    with tempfile.TemporaryDirectory(prefix="signoff-waits-") as tmp:
        async with database(db, args.postgres, Path(tmp)) as url:
            if url is None:
                return None
            config = Path(tmp, "signoff.toml")
            write_config(config, url, edge.url)
            servers = [Server(config, 1)] + ([Server(config, 1)] if db != "sqlite" else [])
            deciding, holding = servers[0], servers[-1]
            try:
                return await measure(args, Path(tmp), edge, deciding, holding)
            finally:
                for server in servers:
                    server.stop()


async def measure(
    args: argparse.Namespace, tmp: Path, edge: Edge, deciding: Server, holding: Server
) -> dict[str, Any]:
    n = args.n
    async with aiohttp.ClientSession() as http:
        run = Run(holding, edge, http, tmp)
        before = await run.counts()
        pending = tmp / "pending.jsonl"
        made = await creates(deciding.url, n=n, prefix="w", out=pending)
        if made["errors"]:
            raise RuntimeError(f"{made['errors']} creates failed")
        posted, _, _ = await run.wait_for(lambda c: c["post"] >= before["post"] + n, args.patience)
        if not posted:
            raise RuntimeError("the cards were not all posted")
        await asyncio.sleep(2)  # the outbox's last settles
        idle = await cpu_ms_per_s(holding, args.seconds)

        waiters = Waiters(holding.url, pending, args.patience + n / args.rate)
        held = await waiters.holding(args.patience)
        waiting = await cpu_ms_per_s(holding, args.seconds)

        base = await run.counts()
        clicked = await run_load(
            ["clicks", "--url", deciding.url, "--secret", SLACK_SECRET, "--approvals",
             str(pending), "--rate", str(args.rate)]
        )  # fmt: skip
        answered = await waiters.result()
        drained, drain, _ = await run.wait_for(
            lambda c: c["update"] >= base["update"] + n and c["hook_ids"] >= base["hook_ids"] + n,
            args.patience,
        )
    returned: dict[str, float] = answered["returned"]
    after_decision = sorted((returned[i] - answered["decided"][i]) * 1000 for i in returned)
    after_answer, after_sent = [], []
    for approval_id, sent, acked in clicked["clicked"]:
        if approval_id in returned:
            after_answer.append((returned[approval_id] - acked) * 1000)
            after_sent.append((returned[approval_id] - sent) * 1000)
    return {
        "held": held,
        "answered": len(returned),
        "renewed": answered["renewed"],
        "wait_errors": answered["errors"],
        "click_errors": clicked["errors"],
        "idle_cpu_ms_per_s": idle,
        "holding_cpu_ms_per_s": waiting,
        "holding_above_idle_ms_per_s": waiting - idle,
        "after_decision": summary(after_decision),
        "after_click_answer": summary(sorted(after_answer)),
        "after_click_sent": summary(sorted(after_sent)),
        "click": summary(sorted(clicked["latencies_ms"])),
        "drained_s": drain if drained else float("nan"),
    }


async def bench(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    figures: dict[str, list[dict[str, Any]]] = {}
    edge = Edge()
    try:
        for db in args.databases.split(","):
            for run in range(1, args.runs + 1):
                found = await one_run(args, db, edge)
                if found is None:
                    print(f"{db}: not reachable, skipped", flush=True)
                    break
                figures.setdefault(db, []).append(found)
                d, s = found["after_decision"], found["after_click_sent"]
                print(
                    f"{db} run {run}: {found['answered']}/{found['held']} waits answered; "
                    f"after the decision p50 {d['p50_ms']:.1f} p99 {d['p99_ms']:.1f} "
                    f"max {d['max_ms']:.1f} ms (after the click's sending p99 "
                    f"{s['p99_ms']:.1f}); "
                    f"CPU idle {found['idle_cpu_ms_per_s']:.1f}, holding "
                    f"{found['holding_cpu_ms_per_s']:.1f} ms/s",
                    flush=True,
                )
    finally:
        edge.stop()
    return figures


def run(args: argparse.Namespace) -> Results:
    figures = run_bench(bench, args)
    found = Results(detail=figures)
    for db, runs in figures.items():
        for one in runs:
            found.add_document(one, db)
    return found
