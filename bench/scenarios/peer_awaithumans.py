"""The peer server: awaithumans (https://pypi.org/project/awaithumans/), run on this machine
beside signoff with the same shape of load as `python -m bench service`, each part a process
of its own.

awaithumans is not a dependency of signoff or of the bench: it lives in a venv of its own
(its server pins FastAPI, SQLModel, uvicorn[standard], ...), which this script never installs:

    python3 -m venv /work/.bench-awaithumans
    /work/.bench-awaithumans/bin/pip install 'awaithumans[server]==0.1.12'

Per database (a SQLite file; PostgreSQL when reachable), two fresh databases, each with a fresh
`awaithumans serve` (its production entry point: one uvicorn process, uvloop and httptools as
uvicorn[standard] brings them, log level warning, loopback):

1. create: --n creates (POST /api/tasks with the admin bearer; the refund of bench/load.py
   with its ~4 KB transcript in `payload`, a `callback_url` to the webhook receiver) from
   --clients clients, closed loop: creates/s (answered 201), p50/p99, errors, server CPU per
   create; then complete: the tasks made completed (POST /api/tasks/{id}/complete) from
   --clients clients, closed loop: completes/s, p50/p99, server CPU per complete.
2. decide_at_R, for each R of --rates in turn: R x --seconds tasks made (untimed), then one
   complete offered per task at R a second whatever the previous ones are doing: p50/p99/max,
   the rate answered, CPU per decision while deciding and until every webhook arrived, and
   decision -> webhook latency (the receiver's arrival time - the task's `completed_at` as
   the server answered it, both this host's clock) p50/p99/max, waiting up to --patience
   seconds for them (so the next rate starts on an empty queue).

CPU is utime + stime of the server and its descendants, read from /proc (bench/processes.py's
tree_cpu_seconds). The receiver (`python -m bench.awaithumans_load receiver`) and the load
generators (`... load create|complete`) run in processes of their own, in this interpreter.

Slack cards are off: awaithumans builds its Slack client as `AsyncWebClient(token=...)` with no
API base URL setting, so its cards cannot be pointed at bench/edge.py's fake Slack without
patching it. Its webhook (callback) queue is polled every 5 s, 50 rows a tick, one POST at a
time (its WEBHOOK_SCHEDULER_INTERVAL_SECONDS); nothing wakes it on a completion.

    python -m bench peer_awaithumans [--python /work/.bench-awaithumans/bin/python] [--n 2000]
        [--clients 32] [--rates 5,20,100] [--seconds 10] [--patience 300]
        [--databases sqlite,postgresql] [--postgres URL] [--out FILE]

Every process started is stopped on exit, errors and SIGTERM included.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import aiohttp

from bench.awaithumans_load import ADMIN_TOKEN
from bench.harness import postgres_database
from bench.processes import CHILDREN, run_bench, run_json, summary, tree_cpu_seconds
from bench.results import Results

DESCRIPTION = "the peer awaithumans' server: creates, completes, paced decisions, webhooks"

REPO = Path(__file__).resolve().parents[2]

DEFAULT_PYTHON = os.environ.get("AWAITHUMANS_PYTHON", "/work/.bench-awaithumans/bin/python")
PAYLOAD_KEY = base64.b64encode(b"signoff-bench-awaithumans-key-32").decode()
START_TIMEOUT = 90.0  # its alembic migrations run at every start: seconds on a busy machine


# -- the server ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PACKAGES = ("awaithumans", "fastapi", "uvicorn", "uvloop", "sqlalchemy", "aiosqlite", "asyncpg")


def versions_of(python: str) -> dict[str, str]:
    """The versions of awaithumans and what its server runs on, in its venv."""
    code = (
        "import importlib.metadata as m, json, sys; "
        "print(json.dumps({p: m.version(p) for p in sys.argv[1:]}))"
    )
    try:
        found = subprocess.run([python, "-c", code, *PACKAGES], capture_output=True, text=True)
    except OSError:
        found = subprocess.CompletedProcess([python], 127, "", "")
    if found.returncode != 0:
        raise SystemExit(
            f"awaithumans is not installed for {python}: see bench/README.md "
            "(python3 -m venv /work/.bench-awaithumans && /work/.bench-awaithumans/bin/pip "
            "install 'awaithumans[server]==0.1.12' 'psycopg[binary]')"
        )
    versions: dict[str, str] = json.loads(found.stdout)
    return versions


class AwaitHumans:
    """`awaithumans serve --host 127.0.0.1 --port P --log-level warning` (its production entry
    point) on `database_url` (a SQLite file path, or a postgresql:// URL), working directory
    `tmp` (so no .env of ours is read)."""

    def __init__(self, python: str, database: str, tmp: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWAITHUMANS_")}
        env |= {
            "AWAITHUMANS_PAYLOAD_KEY": PAYLOAD_KEY,
            "AWAITHUMANS_ADMIN_API_TOKEN": ADMIN_TOKEN,
            "AWAITHUMANS_PUBLIC_URL": self.url,
        }
        if database.startswith("postgresql"):
            env["AWAITHUMANS_DATABASE_URL"] = database
        else:
            env["AWAITHUMANS_DB_PATH"] = database
        script = Path(python).with_name("awaithumans")
        self.log: deque[str] = deque(maxlen=200)
        self.proc = CHILDREN.popen(
            [
                # In `tmp` (CHILDREN starts everything in the repository), exec'd so that the
                # pid whose CPU is read is the server's.
                "/bin/sh",
                "-c",
                'cd "$0" && exec "$@"',
                str(tmp),
                str(script),
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--log-level",
                "warning",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.log.append(line)

    async def ready(self, http: aiohttp.ClientSession) -> None:
        deadline = time.time() + START_TIMEOUT
        while time.time() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                async with http.get(self.url + "/api/health") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
        CHILDREN.stop(self.proc)
        raise RuntimeError("awaithumans serve did not start:\n" + "".join(self.log))

    def cpu(self) -> float:
        return tree_cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        CHILDREN.stop(self.proc)


class Receiver:
    def __init__(self) -> None:
        self.proc = CHILDREN.popen(
            [sys.executable, "-m", "bench.awaithumans_load", "receiver"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "edge listening on" not in line:
            CHILDREN.stop(self.proc)
            raise RuntimeError(f"the webhook receiver did not start: {line!r}")
        self.url = f"http://127.0.0.1:{line.split()[-1]}"

    async def arrivals(self, http: aiohttp.ClientSession) -> dict[str, float]:
        async with http.get(self.url + "/arrivals") as response:
            return (await response.json())["first"]


# -- scenarios -------------------------------------------------------------------------------


async def generate(url: str, what: str, extra: list[str]) -> dict[str, Any]:
    answer: dict[str, Any] = await run_json(
        "bench.awaithumans_load", ["load", what, "--url", url, *extra]
    )
    return answer


async def make(run: Run, n: int, prefix: str) -> Path:
    """n tasks created (untimed, from 4 clients: at 32 its SQLite answers some with 500
    "database is locked"); the file of their ids."""
    out = run.tmp / f"{prefix}.ids"
    args = ["--n", str(n), "--prefix", prefix, "--callback-url", run.hooks, "--out", str(out)]
    made = await generate(run.server.url, "create", [*args, "--clients", "4"])
    if made["errors"] > n // 100:
        raise RuntimeError(f"{made['errors']} of {n} creates failed while preparing")
    return out


class Run:
    def __init__(self, server: AwaitHumans, receiver: Receiver, http: Any, tmp: Path) -> None:
        self.server, self.receiver, self.http, self.tmp = server, receiver, http, tmp
        self.hooks = receiver.url + "/hooks"


async def create_then_complete(run: Run, n: int, clients: int) -> dict[str, Any]:
    """n creates from `clients`, then the tasks made completed from `clients`: nothing runs
    in the background between (no cards; webhooks only follow completes)."""
    ids = run.tmp / "hc.ids"
    cpu0 = run.server.cpu()
    made = await generate(
        run.server.url,
        "create",
        ["--n", str(n), "--clients", str(clients), "--prefix", "hc", "--callback-url",
         run.hooks, "--out", str(ids)],
    )  # fmt: skip
    cpu1 = run.server.cpu()
    done = await generate(
        run.server.url, "complete", ["--ids", str(ids), "--clients", str(clients)]
    )
    cpu2 = run.server.cpu()
    return {"create": phase(made, cpu1 - cpu0), "complete": phase(done, cpu2 - cpu1)}


def phase(answer: dict[str, Any], cpu: float) -> dict[str, Any]:
    """A closed-loop phase's figures: successes per second, latency, CPU per success."""
    ok = answer["count"] - answer["errors"]
    return {
        "rate": ok / (answer["ended"] - answer["started"]),
        **summary(sorted(answer["latencies_ms"])),
        "errors": answer["errors"],
        "cpu_ms": cpu / max(1, ok) * 1000,
    }


async def decide_at_rates(
    run: Run, rates: list[float], seconds: float, patience: float
) -> dict[str, Any]:
    """Each rate in turn on one server: the previous rate's webhooks have all arrived (or
    `patience` ran out) before the next rate's tasks are made."""
    return {f"decide_at_{r:g}": await decide_at(run, r, seconds, patience) for r in rates}


async def decide_at(run: Run, rate: float, seconds: float, patience: float) -> dict[str, Any]:
    k = max(2, int(rate * seconds))
    ids = await make(run, k, f"d{int(rate)}")
    await asyncio.sleep(1.0)  # let the creates' background work settle before the clock starts
    cpu0 = run.server.cpu()
    done = await generate(
        run.server.url,
        "complete",
        ["--ids", str(ids), "--rate", str(rate), "--start-at", str(time.time() + 1.0)],
    )
    cpu1 = run.server.cpu()
    decided = {d[0]: d[3] for d in done["done"]}
    give_up = done["ended"] + patience
    while True:
        arrived = await run.receiver.arrivals(run.http)
        if decided.keys() <= arrived.keys() or time.time() > give_up:
            break
        await asyncio.sleep(0.2)
    cpu2 = run.server.cpu()
    late = sorted((arrived[i] - at) * 1000 for i, at in decided.items() if i in arrived)
    hook = summary(late)
    last = max((arrived[i] for i in decided if i in arrived), default=float("nan"))
    return {
        "offered_rate": rate,
        "decisions": done["count"],
        "errors": done["errors"],
        "answered_rate": done["count"] / max(1e-9, done["ended"] - done["started"]),
        **summary(sorted(done["latencies_ms"])),
        "cpu_ms": (cpu1 - cpu0) / max(1, done["count"]) * 1000,
        "cpu_ms_until_delivered": (cpu2 - cpu0) / max(1, done["count"]) * 1000,
        "server_cores": (cpu1 - cpu0) / max(1e-9, done["ended"] - done["started"]),
        "webhooks_arrived": len(late),
        "webhook_p50_ms": hook["p50_ms"],
        "webhook_p99_ms": hook["p99_ms"],
        "webhook_max_ms": hook["max_ms"],
        "drain_s": last - done["ended"] if len(late) == len(decided) else float("inf"),
    }


async def fresh(args: argparse.Namespace, db: str, receiver: Receiver, scenario: Any) -> Any:
    with tempfile.TemporaryDirectory(prefix="signoff-bench-awaithumans-") as tmp:
        if db == "sqlite":
            return await on(args, str(Path(tmp, "awaithumans.db")), Path(tmp), receiver, scenario)
        async with postgres_database(args.postgres) as url:
            if url is None:
                return None
            plain = url.replace("postgresql+asyncpg://", "postgresql://")
            return await on(args, plain, Path(tmp), receiver, scenario)


async def on(
    args: argparse.Namespace, database: str, tmp: Path, receiver: Receiver, scenario: Any
) -> Any:
    server = AwaitHumans(args.python, database, tmp)
    try:
        async with aiohttp.ClientSession() as http:
            await server.ready(http)
            return await scenario(Run(server, receiver, http, tmp))
    except BaseException:
        print("--- awaithumans log (tail)\n" + "".join(list(server.log)[-40:]), file=sys.stderr)
        raise
    finally:
        server.stop()


def line(name: str, f: dict[str, Any]) -> str:
    shown = []
    for key, value in f.items():
        if isinstance(value, float):
            value = f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
        shown.append(f"{key}={value}")
    return f"  {name:<12} " + "  ".join(shown)


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    settings = {
        "versions": versions_of(args.python),
        "python": args.python,
        "server": "awaithumans serve: one uvicorn process (uvloop, httptools), log level warning",
        "workers": 1,
        "slack_cards": "off (no API base URL setting: cannot reach the fake Slack)",
        "webhooks": "on: callback_url per task; its scheduler polls every 5 s, 50 a tick",
        "sqlite": "its default engine (aiosqlite, default journal mode)",
    }
    print("awaithumans " + ", ".join(f"{k}: {v}" for k, v in settings.items()), flush=True)
    figures: dict[str, Any] = {"settings": settings}
    receiver = Receiver()
    try:
        rates = [float(r) for r in args.rates.split(",") if r]
        for db in args.databases.split(","):
            plan = [
                lambda r: create_then_complete(r, args.n, args.clients),
                lambda r: decide_at_rates(r, rates, args.seconds, args.patience),
            ]
            print(
                f"{db}: n={args.n} clients={args.clients} rates={args.rates}/s for "
                f"{args.seconds:g} s cpus={os.cpu_count()}",
                flush=True,
            )
            ours: dict[str, Any] = {}
            for scenario in plan:
                began = time.time()
                result = await fresh(args, db, receiver, scenario)
                if result is None:
                    break
                ours |= result
                for name, phase_figures in result.items():
                    print(line(name, phase_figures), flush=True)
                print(f"  ({time.time() - began:.0f} s)", flush=True)
            if ours:
                figures[db] = ours
    finally:
        CHILDREN.stop(receiver.proc)
    return figures


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--python", default=DEFAULT_PYTHON, help="the awaithumans venv's python")
    p.add_argument("--n", type=int, default=2000, help="creates, and completes, closed loop")
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--rates", default="5,20,100", help="decisions offered per second")
    p.add_argument("--seconds", type=float, default=10.0, help="of decisions per rate")
    p.add_argument("--patience", type=float, default=300.0, help="longest wait for webhooks (s)")
    p.add_argument("--databases", default="sqlite,postgresql")
    p.add_argument(
        "--postgres",
        default=os.environ.get(
            "SIGNOFF_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
        ),
    )


def run(args: argparse.Namespace) -> Results:
    versions_of(args.python)  # a clear message, before anything starts, if it is missing
    figures = run_bench(bench, args)
    found = Results(detail=figures)
    found.add_document({k: v for k, v in figures.items() if k not in ("versions", "python")})
    return found
