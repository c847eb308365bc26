"""The processes a bench script starts, and what they cost: `signoff serve` (Server), the fake
Slack Web API and webhook receiver (Edge, bench/edge.py), load generators (bench/load.py, by
run_json / run_load / creates); every one of them stopped on exit, errors and SIGTERM
(CHILDREN, run_bench); and the CPU a server and its workers used, read from /proc
(tree_cpu_seconds).

bench/service.py's scenarios (bench/service_scenarios.py) run on these, and so do
bench/overload.py, grants.py, effects_latency.py, api_throughput.py, idle_cpu.py and
peer_awaithumans.py: one place starts and stops a server, so every script measures the same
server the same way. The settings a script's command line gives every server it starts
(SERVE_ARGS, OUTBOX, SERVER) are this module's, for the same reason.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import base64
import collections
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.harness import server_config
from bench.results import percentile

REPO = Path(__file__).resolve().parents[1]

API_KEY = "bench-api-key-0123456789"
SLACK_SECRET = "bench-slack-signing-secret"
WEBHOOK_SECRET = "whsec_" + base64.b64encode(b"signoff-bench-webhook-key-32byte").decode()
START_TIMEOUT = 60.0
_LISTENING = re.compile(r"signoff listening on http://[^\s:]+:(\d+)")
_TICK = os.sysconf("SC_CLK_TCK")
OUTBOX: dict[str, Any] = {}  # --busy-concurrency and such: the server's [outbox] table
SERVER: dict[str, Any] = {}  # the server's [server] keys (bench/overload.py's gate settings)


def signoff_command() -> list[str]:
    """The installed `signoff` script next to this interpreter (what an operator runs)."""
    script = Path(sys.executable).with_name("signoff")
    return [str(script)] if script.exists() else [sys.executable, "-m", "bot.cli"]


# -- processes -------------------------------------------------------------------------------


class Children:
    """Every process this benchmark starts, each in a session of its own so that stopping it
    also stops whatever it started (serve's workers)."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[Any]] = []

    def popen(self, cmd: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        proc = subprocess.Popen(cmd, start_new_session=True, cwd=REPO, **kwargs)
        self.procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[Any], timeout: float = 20.0) -> None:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        # The group too: a worker may outlive its parent.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)
        if proc in self.procs:
            self.procs.remove(proc)

    def stop_all(self) -> None:
        for proc in list(self.procs):
            self.stop(proc, timeout=5.0)


CHILDREN = Children()
atexit.register(CHILDREN.stop_all)


def exit_on_sigterm(*_: object) -> None:
    raise SystemExit(143)


def run_bench(bench: Callable[[argparse.Namespace], Any], args: argparse.Namespace) -> Any:
    """Run a benchmark's `bench(args)` coroutine, every process it started stopped on exit,
    errors and SIGTERM; its figures."""
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    try:
        return asyncio.run(bench(args))
    finally:
        CHILDREN.stop_all()


def tree_cpu_seconds(root: int) -> float:
    """User + system CPU of `root` and every live descendant (serve's worker processes)."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path("/proc", entry, "stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2 :].split()
        stats[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK)
    children: dict[int, list[int]] = collections.defaultdict(list)
    for pid, (ppid, _) in stats.items():
        children[ppid].append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += stats[pid][1]
        todo.extend(children.get(pid, []))
    return total


class Edge:
    """bench/edge.py: the fake Slack Web API and the webhook receiver."""

    def __init__(self) -> None:
        self.proc = CHILDREN.popen(
            [sys.executable, "-m", "bench.edge"], stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        match = re.search(r"edge listening on (\d+)", line)
        if match is None:
            CHILDREN.stop(self.proc)
            raise RuntimeError(f"bench.edge did not start: {line!r}")
        self.url = f"http://127.0.0.1:{match.group(1)}"

    async def counts(self, http: aiohttp.ClientSession) -> dict[str, int]:
        async with http.get(self.url + "/count") as response:
            return await response.json()

    def stop(self) -> None:
        CHILDREN.stop(self.proc)


def write_config(path: Path, database_url: str, edge_url: str, outside: bool = True) -> None:
    """The bench's config; `outside=False` leaves cards and webhooks off (no notify target,
    no webhook_url), the reference for what they cost a decision."""
    path.write_text(
        server_config(
            database_url,
            outbox="".join(f"{key} = {value}\n" for key, value in OUTBOX.items()),
            server="".join(f"{key} = {value}\n" for key, value in SERVER.items()),
            slack_api=f"{edge_url}/api/",
            webhook_url=f"{edge_url}/hooks" if outside else None,
            notify=["slack:C0FIN"] if outside else [],
        ),
        "utf-8",
    )


def server_env() -> dict[str, str]:
    return {
        **os.environ,
        "SIGNOFF_BENCH_API_KEY": API_KEY,
        "SIGNOFF_BENCH_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "SLACK_BOT_TOKEN": "xoxb-test",  # FakeSlack's token
        "SLACK_SIGNING_SECRET": SLACK_SECRET,
    }


# More `signoff serve` arguments for every server a script starts (`--background-process`:
# set by the scripts' own option of that name).
SERVE_ARGS: list[str] = []


def add_background_process_option(p: argparse.ArgumentParser) -> None:
    """The scripts' `--[no-]background-process`, passed on to every `serve` they start."""
    p.add_argument(
        "--background-process",
        action=argparse.BooleanOptionalAction,
        help="the outbox and the sweeper in a process of their own, or not (default: serve's)",
    )


def background_process_args(value: bool | None) -> list[str]:
    """The `serve` argument for the option's value (None: none, serve's default)."""
    if value is None:
        return []
    return ["--background-process" if value else "--no-background-process"]


class Server:
    """`signoff serve --config C --listen 127.0.0.1:0 [--workers N]` as a subprocess (`command`
    and `env`: another signoff than this tree's, other variables; bench/effects_latency.py)."""

    def __init__(
        self,
        config: Path,
        workers: int | None,
        command: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.log: collections.deque[str] = collections.deque(maxlen=200)
        listen = ["--listen", "127.0.0.1:0", *(["--workers", str(workers)] if workers else [])]
        listen += SERVE_ARGS
        command, env = command or signoff_command(), env or server_env()
        upgrade = subprocess.run(
            [*command, "db", "upgrade", "--config", str(config)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
        )
        if upgrade.returncode != 0:
            raise RuntimeError(f"signoff db upgrade failed:\n{upgrade.stderr[-3000:]}")
        self.proc = CHILDREN.popen(
            [*command, "serve", "--config", str(config), *listen],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.port: int | None = None
        ready = threading.Event()
        threading.Thread(target=self._drain, args=(ready,), daemon=True).start()
        if not ready.wait(START_TIMEOUT) or self.port is None:
            CHILDREN.stop(self.proc)
            raise RuntimeError("signoff serve did not start:\n" + "".join(self.log))
        self.url = f"http://127.0.0.1:{self.port}"

    def _drain(self, ready: threading.Event) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)
            if self.port is None and (match := _LISTENING.search(line)):
                self.port = int(match.group(1))
                ready.set()
        ready.set()

    def cpu(self) -> float:
        return tree_cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        CHILDREN.stop(self.proc)


# -- load generators -------------------------------------------------------------------------


async def run_json(module: str, args: list[str], env: dict[str, str] | None = None) -> Any:
    """One `python -m MODULE ARGS...` bench process (stopped with the bench); its JSON answer
    on stdout, and the tail of its stderr passed on."""
    proc = CHILDREN.popen(
        [sys.executable, "-m", module, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = await asyncio.to_thread(proc.communicate)
    finally:
        CHILDREN.stop(proc)
    if proc.returncode != 0:
        raise RuntimeError(f"{module} {args[0]} failed ({proc.returncode}):\n{err[-3000:]}")
    if err.strip():
        print(err.rstrip()[-2000:], file=sys.stderr)
    return json.loads(out)


async def run_load(args: list[str]) -> dict[str, Any]:
    """One bench/load.py process; its JSON answer."""
    answer: dict[str, Any] = await run_json("bench.load", args)
    return answer


def combined(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Several generators' answers as one: the rate over the span from the first start to
    the last end."""
    latencies = sorted(x for r in results for x in r["latencies_ms"])
    count = sum(r["count"] for r in results)
    started = min(r["started"] for r in results)
    ended = max(r["ended"] for r in results)
    return {
        "count": count,
        "errors": sum(r["errors"] for r in results),
        "started": started,
        "ended": ended,
        "rate": count / (ended - started),
        **summary(latencies),
    }


def summary(latencies: list[float]) -> dict[str, float]:
    if len(latencies) < 2:
        return {"p50_ms": float("nan"), "p99_ms": float("nan"), "max_ms": float("nan")}
    return {
        "p50_ms": percentile(latencies, 50),
        "p99_ms": percentile(latencies, 99),
        "max_ms": max(latencies),
    }


async def creates(
    url: str,
    *,
    n: int | None = None,
    seconds: float | None = None,
    clients: int = 32,
    rate: float | None = None,
    prefix: str,
    procs: int = 1,
    out: Path | None = None,
    start_at: float | None = None,
) -> dict[str, Any]:
    """Creates from `procs` generator processes started together (n and clients split)."""
    start_at = start_at or time.time() + 1.5
    jobs = []
    for p in range(procs):
        args = ["create", "--url", url, "--key", API_KEY, "--prefix", f"{prefix}{p}"]
        args += ["--clients", str(max(1, clients // procs)), "--start-at", str(start_at)]
        if n is not None:
            args += ["--n", str(n // procs + (1 if p < n % procs else 0))]
        if seconds is not None:
            args += ["--seconds", str(seconds)]
        if rate is not None:
            args += ["--rate", str(rate / procs)]
        if out is not None:
            args += ["--out", f"{out}.{p}"]
        jobs.append(run_load(args))
    results = await asyncio.gather(*jobs)
    if out is not None:
        parts = [Path(f"{out}.{p}") for p in range(procs)]
        await asyncio.to_thread(out.write_text, "".join(p.read_text("utf-8") for p in parts))
    return combined(results)


# -- the outside world -----------------------------------------------------------------------


class EdgeProc:
    """One bench/edge.py role's process (the effects scenario), and every arrival it noted."""

    def __init__(self, role: str) -> None:
        self.proc = CHILDREN.popen(
            [sys.executable, "-m", "bench.edge", role], stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        found = re.search(r"edge listening on (\d+)", self.proc.stdout.readline())
        if found is None:
            CHILDREN.stop(self.proc)
            raise RuntimeError(f"bench.edge {role} did not start")
        self.url = f"http://127.0.0.1:{found.group(1)}"
        self.arrivals: list[list[Any]] = []
        self.errors = 0

    async def collect(self, http: aiohttp.ClientSession) -> None:
        async with http.get(f"{self.url}/arrivals?since={len(self.arrivals)}") as response:
            got = await response.json()
        self.arrivals.extend(got["arrivals"])
        self.errors = got["errors"]


@dataclass
class Edges:
    slack: EdgeProc = field(default_factory=lambda: EdgeProc("slack"))
    telegram: EdgeProc = field(default_factory=lambda: EdgeProc("telegram"))
    hooks: EdgeProc = field(default_factory=lambda: EdgeProc("hooks"))

    def all(self) -> tuple[EdgeProc, EdgeProc, EdgeProc]:
        return self.slack, self.telegram, self.hooks

    async def collect(self, http: aiohttp.ClientSession) -> None:
        await asyncio.gather(*(edge.collect(http) for edge in self.all()))

    def stop(self) -> None:
        for edge in self.all():
            CHILDREN.stop(edge.proc)


def earliest_hooks(arrivals: list[list[Any]]) -> dict[str, float]:
    found: dict[str, float] = {}
    for _, event, approval, at, _ in arrivals:
        if event == "approved" and approval not in found:
            found[approval] = at
    return found
