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
  through the driver alone (bench/decide_throughput.py's bare SQL), 32 clients, in this
  process, before any server starts; then those of a decision on the rows made (lock,
  conditional UPDATE, event, card messages, webhook job): `rate` and `decide_rate`.

    python bench/service.py [--n 3000] [--clients 32] [--rate 100] [--seconds 10]
        [--sustain-seconds 10] [--workers N] [--databases sqlite,postgresql]
        [--scenarios http_create,slack_clicks,sustained_cards,bare_create]
        [--no-with-creates] [--no-quiet-reference] [--load-procs 1] [--postgres URL] [--json FILE]

`--workers N` is passed to `signoff serve --workers N`; without it serve runs as it defaults.
Every process started is stopped on exit, errors and SIGTERM included.
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
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import postgres_database, server_config  # noqa: E402
from bench.decide_throughput import (  # noqa: E402
    bench_bare_postgres,
    bench_bare_sqlite,
    migrated,
)

API_KEY = "bench-api-key-0123456789"
SLACK_SECRET = "bench-slack-signing-secret"
WEBHOOK_SECRET = "whsec_" + base64.b64encode(b"signoff-bench-webhook-key-32byte").decode()
START_TIMEOUT = 60.0
_LISTENING = re.compile(r"signoff listening on http://[^\s:]+:(\d+)")
_TICK = os.sysconf("SC_CLK_TCK")
SERVER_LOG: Path | None = None  # --server-log: each server's last lines, appended
OUTBOX: dict[str, Any] = {}  # --busy-concurrency and such: the server's [outbox] table
SERVER: dict[str, Any] = {}  # the server's [server] keys (bench/overload.py's gate settings)
SCENARIOS = ("bare_create", "http_create", "slack_clicks", "sustained_cards")


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


def _exit_on_sigterm(*_: object) -> None:
    raise SystemExit(143)


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
        "p50_ms": statistics.median(latencies),
        "p99_ms": statistics.quantiles(latencies, n=100)[98],
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


# -- scenarios -------------------------------------------------------------------------------


class Run:
    """A fresh server on a fresh database, the edge it talks to, and an HTTP session to read
    the edge's counts."""

    def __init__(self, server: Server, edge: Edge, http: aiohttp.ClientSession, tmp: Path):
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


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    p.add_argument("--json", help="write the figures to this file")
    p.add_argument("--server-log", type=Path, help="append each server's last log lines here")
    p.add_argument(
        "--busy-concurrency", type=int, help="the server's [outbox] busy_concurrency (default 4)"
    )
    return p


def main(**defaults: Any) -> None:
    """Run from the command line; `defaults` changes the parser's (bench/slack_clicks.py)."""
    global SERVER_LOG
    p = parser()
    p.set_defaults(**defaults)
    args = p.parse_args()
    SERVER_LOG = args.server_log
    SERVE_ARGS.extend(background_process_args(args.background_process))
    if args.busy_concurrency is not None:
        OUTBOX["busy_concurrency"] = args.busy_concurrency
    run_bench(bench, args)


def run_bench(bench: Callable[[argparse.Namespace], Any], args: argparse.Namespace) -> None:
    """Run a benchmark's `bench(args)` coroutine, every process it started stopped on exit,
    errors and SIGTERM; its figures written to `args.json` when given."""
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        figures = asyncio.run(bench(args))
    finally:
        CHILDREN.stop_all()
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2), "utf-8")


if __name__ == "__main__":
    main()
