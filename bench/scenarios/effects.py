"""Decision to effect: how long after a decision its card updates reach Slack and Telegram
and its webhook reaches the agent, for four decision paths (issue 26, "Measure").

Each part runs in a process of its own, as in production: `signoff serve` (its default
workers unless --workers), the fake Slack Web API, the fake Telegram Bot API and the webhook
receiver (bench/edge.py, a process each), and the decisions (bench/drive.py).
Per run, database, code tree and `[outbox] poll_interval`, on a fresh database and server:

1. K = --rate x --seconds approvals per path are created through the API (untimed); each gets
   a Slack card and a Telegram card, and the bench waits until the server recorded them all;
2. then, path after path, one decision per approval offered at --rate a second: `slack` (a
   signed Approve click to /slack/events), `telegram` (a callback_query update to the
   webhook), `web` (the approval page's form posted by a signed-in session with its CSRF
   token), `cli` (`signoff approvals approve ID --hash H --as alice`, a process each, at most
   --cli-procs at once: the rate it reached is printed);
3. every decision's Slack chat.update, Telegram editMessageText and webhook are waited for
   (up to the poll interval + --patience seconds after the last decision).

Latency = when the fake received the call - the decision's time as signoff recorded it (the
`approved` event's `at`, read from the clock by the deciding process inside the decision's
transaction, before it commits); both are this host's wall clock. Per path: p50, p99, max.

The reference (--reference, default de9c71b, the commit before effects on commit): the same
runs on that commit, unpacked with `git archive` into a temporary directory and run by this
venv's python (`python -P -m bot.cli` with PYTHONPATH; the CLI decisions too), for
--reference-polls. Runs are interleaved: run 1 of everything, then run 2, ...

    python -m bench effects [--runs 3] [--rate 10] [--seconds 10]
        [--databases sqlite,postgresql] [--polls 10s,default] [--paths slack,telegram,web,cli]
        [--reference de9c71b] [--reference-polls 10s,default] [--cli-procs 2] [--workers N]
        [--calm LOAD] [--calm-wait 600] [--postgres URL] [--out FILE]

The machine may be shared: each path's line says the 1-minute load average when its decisions
began, and --calm waits (up to --calm-wait seconds) for a lower load before each server.
Every process started is stopped on exit, errors and SIGTERM included.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

from bench import processes, service_scenarios
from bench.edge import TELEGRAM_TOKEN
from bench.harness import server_config
from bench.processes import CHILDREN, Edges, Server, earliest_hooks
from bench.results import Results, p50_p99

REPO = Path(__file__).resolve().parents[2]
DESCRIPTION = "decision -> Slack/Telegram card update and webhook, per decision path"

# -- the report ----------------------------------------------------------------------------


EFFECTS = ("slack", "telegram", "webhook")  # what each decision must cause


def median(values: Any) -> float:
    return statistics.median(list(values))


def summary(values: list[float]) -> dict[str, float]:
    """p50, p99 (bench.results.percentile) and max; NaN with fewer than two."""
    if len(values) < 2:
        return {"p50_ms": float("nan"), "p99_ms": float("nan"), "max_ms": float("nan")}
    p50, p99 = p50_p99(values)
    return {"p50_ms": p50, "p99_ms": p99, "max_ms": max(values)}


def line(f: dict[str, Any]) -> str:
    parts = [f"{f['decisions']} decided ({f['errors']} errors) at {f['rate']:.1f}/s"]
    parts.append(
        f"answer p50 {f['answer_p50_ms']:.0f} ms ({f.get('before_p50_ms', 0):.0f} before the "
        f"decision, {f.get('after_p50_ms', 0):.0f} after)"
    )
    for effect in EFFECTS:
        parts.append(
            f"{effect} {f[f'{effect}_arrived']}: p50 {f[f'{effect}_p50_ms']:.0f} "
            f"p99 {f[f'{effect}_p99_ms']:.0f} max {f[f'{effect}_max_ms']:.0f} ms"
        )
    latest = " / ".join(f"{f[f'{e}_after_answer_max_ms']:.0f}" for e in EFFECTS)
    parts.append(f"latest after the answer {latest} ms")
    return "; ".join(parts) + f"; load {f['load']:.1f}"


def spread(values: list[float]) -> str:
    """median (min-max) of the runs, in ms."""
    values = [v for v in values if v == v]  # without NaN
    if not values:
        return "-"

    def ms(v: float) -> str:
        return f"{v / 1000:.2f} s" if v >= 1000 else f"{v:.0f}"

    if len(values) == 1:
        return ms(values[0])
    return f"{ms(statistics.median(values))} ({ms(min(values))}-{ms(max(values))})"


def table(results: list[dict[str, Any]]) -> str:
    rows = [
        "| database | commit, poll_interval | path | decisions/s | answer p50 | Slack update "
        "p50 / p99 | Telegram edit p50 / p99 | webhook p50 / p99 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    keys: list[tuple[str, str, str]] = []
    for r in results:
        key = (r["database"], r["label"], r["path"])
        if key not in keys:
            keys.append(key)
    for key in keys:
        runs = [r["figures"] for r in results if (r["database"], r["label"], r["path"]) == key]

        def col(name: str, runs: list[dict[str, Any]] = runs) -> str:
            return spread([f[name] for f in runs])

        rates = sorted(f["rate"] for f in runs)
        rate = f"{statistics.median(rates):.1f}" + (
            f" ({rates[0]:.1f}-{rates[-1]:.1f})" if len(rates) > 1 else ""
        )
        cells = [*key, rate, col("answer_p50_ms")]
        cells += [f"{col(f'{e}_p50_ms')} / {col(f'{e}_p99_ms')}" for e in EFFECTS]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


PATHS = ("slack", "telegram", "web", "cli")
SLACK_CHANNEL = "C0FIN"
TELEGRAM_GROUP = -1001000000001
TELEGRAM_SECRET = "bench-telegram-webhook-secret"
WEB_SECRET = "bench-web-session-secret-0123456789abcdef"
DEFAULT_POLL = 1.0  # [outbox] poll_interval's default (docs/reference.md)
_LINK = re.compile(r"https?://\S+?(/web/login/\S+)")


# -- the code measured -----------------------------------------------------------------------


@dataclass
class Tree:
    """A signoff to measure: this checkout, or another commit unpacked beside it."""

    name: str
    command: list[str]
    pythonpath: str | None = None

    def env(self) -> dict[str, str]:
        env = {
            **processes.server_env(),
            "TELEGRAM_BOT_TOKEN": TELEGRAM_TOKEN,
            "TELEGRAM_WEBHOOK_SECRET": TELEGRAM_SECRET,
            "SIGNOFF_WEB_SECRET": WEB_SECRET,
        }
        if self.pythonpath:
            env["PYTHONPATH"] = self.pythonpath
        return env


def this_tree() -> Tree:
    head = git("rev-parse", "--short", "HEAD")
    return Tree(f"{head} (this)", processes.signoff_command())


def unpacked(commit: str, into: Path) -> Tree:
    """`commit` as files in `into` (git archive: no worktree to clean up), run from there."""
    short = git("rev-parse", "--short", commit)
    archive = subprocess.Popen(["git", "-C", str(REPO), "archive", commit], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(into)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise SystemExit(f"git archive {commit} failed")
    # -P: the processes start in this checkout, whose code `-m` would otherwise put first.
    tree = Tree(short, [sys.executable, "-P", "-m", "bot.cli"], str(into))
    found = subprocess.run(
        [sys.executable, "-P", "-c", "import bot.cli; print(bot.cli.__file__)"],
        cwd=REPO,
        env=tree.env(),
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not found.startswith(str(into)):
        raise SystemExit(f"the reference runs {found!r}, not the code in {into}")
    return tree


def git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def write_config(path: Path, database_url: str, edges: Edges, poll: str) -> None:
    path.write_text(
        server_config(
            database_url,
            outbox="" if poll == "default" else f'poll_interval = "{poll}"',
            slack_api=f"{edges.slack.url}/api/",
            telegram_api=f"{edges.telegram.url}/bot",
            web_surface=True,
            webhook_url=f"{edges.hooks.url}/hooks",
            notify=[f"slack:{SLACK_CHANNEL}", f"telegram:{TELEGRAM_GROUP}"],
        ),
        "utf-8",
    )


def poll_seconds(poll: str) -> float:
    return DEFAULT_POLL if poll == "default" else float(poll.rstrip("s"))


# -- the database, read as the bench's own client ---------------------------------------------


class Db:
    """The run's database, read directly (card messages, decision times)."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def rows(self, sql: str) -> list[tuple[Any, ...]]:
        if self.url.startswith("sqlite"):
            path = self.url.split(":///", 1)[1]

            def read() -> list[tuple[Any, ...]]:
                with sqlite3.connect(path, timeout=30) as conn:
                    return conn.execute(sql).fetchall()

            return await asyncio.to_thread(read)
        conn = await asyncpg.connect(self.url.replace("postgresql+asyncpg://", "postgresql://"))
        try:
            return [tuple(r) for r in await conn.fetch(sql)]
        finally:
            await conn.close()

    async def cards(self) -> list[tuple[str, str, str, str]]:
        """(approval id, surface, address, message id) of every card recorded."""
        sql = "SELECT approval_id, channel, address, message_id FROM card_messages"
        return [tuple(str(v) for v in row) for row in await self.rows(sql)]  # type: ignore[misc]

    async def decided(self) -> dict[str, float]:
        """Approval id -> when its `approved` event was recorded (epoch seconds)."""
        sql = "SELECT approval_id, at FROM approval_events WHERE type = 'approved'"
        return {str(a): epoch(at) for a, at in await self.rows(sql)}


def epoch(value: Any) -> float:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return float(value.timestamp())


# -- one run ----------------------------------------------------------------------------------


async def drive(tree: Tree, args: list[str]) -> dict[str, Any]:
    """One bench/drive.py process; its JSON answer."""
    answer: dict[str, Any] = await processes.run_json("bench.drive", args, tree.env())
    return answer


async def sign_in_link(tree: Tree, config: Path, server_url: str) -> str:
    done = await asyncio.to_thread(
        subprocess.run,
        [*tree.command, "web", "login", "--as", "alice", "--config", str(config)],
        cwd=REPO,
        env=tree.env(),
        capture_output=True,
        text=True,
    )
    found = _LINK.search(done.stdout)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"signoff web login failed: {done.stdout}{done.stderr}")
    return server_url + found.group(1)


@dataclass
class Run:
    tree: Tree
    poll: str
    args: argparse.Namespace
    edges: Edges
    http: aiohttp.ClientSession
    server: Server
    config: Path
    db: Db
    tmp: Path

    async def prepare(self, n: int) -> list[dict[str, Any]]:
        """n approvals, each with its two cards posted and recorded; what the paths need."""
        out = self.tmp / "approvals.jsonl"
        made = await processes.creates(self.server.url, n=n, prefix="fx", out=out)
        if made["errors"]:
            raise RuntimeError(f"{made['errors']} creates failed")
        approvals = [json.loads(line) for line in out.read_text("utf-8").splitlines()]
        ids = {a["id"] for a in approvals}
        deadline = time.time() + self.args.patience + 60
        while True:
            cards = [c for c in await self.db.cards() if c[0] in ids]
            if len(cards) >= 2 * n:
                break
            if time.time() > deadline:
                raise RuntimeError(f"{len(cards)} of {2 * n} cards recorded")
            await asyncio.sleep(0.2)
        await self.edges.collect(self.http)
        data = {(a[1], a[2]): a[4] for a in self.edges.telegram.arrivals if a[0] == "post"}
        where: dict[str, dict[str, Any]] = {a: {} for a in ids}
        for approval, surface, address, message in cards:
            if surface == "slack":
                where[approval] |= {"channel": address, "ts": message}
            elif surface == "telegram":
                approve = data[(address, message)]
                where[approval] |= {"chat": address, "message_id": message, "data": approve}
        return [a | where[a["id"]] for a in approvals]

    async def decide(self, path: str, chunk: list[dict[str, Any]]) -> dict[str, Any]:
        """The decisions of one path, and how long each effect took to arrive."""
        file = self.tmp / f"decisions-{path}.jsonl"
        file.write_text("".join(json.dumps(d) + "\n" for d in chunk), "utf-8")
        common = ["--decisions", str(file), "--rate", str(self.args.rate)]
        common += ["--start-at", str(time.time() + 1.0)]
        if path == "slack":
            extra = ["--url", self.server.url, "--secret", processes.SLACK_SECRET]
        elif path == "telegram":
            extra = ["--url", self.server.url, "--secret", TELEGRAM_SECRET]
        elif path == "web":
            link = await sign_in_link(self.tree, self.config, self.server.url)
            extra = ["--url", self.server.url, "--login", link]
        else:
            extra = ["--command", json.dumps(self.tree.command), "--config", str(self.config)]
            extra += ["--procs", str(self.args.cli_procs), "--seconds", str(self.args.cli_seconds)]
        marks = [len(edge.arrivals) for edge in self.edges.all()]
        load = os.getloadavg()[0]
        answer = await drive(self.tree, [path, *common, *extra])
        ids = {d["id"] for d in chunk}
        decided = {a: at for a, at in (await self.db.decided()).items() if a in ids}
        arrived = await self.effects(set(decided), marks, answer["ended"])
        figures: dict[str, Any] = {
            "decisions": len(decided),
            "errors": answer["errors"],
            "rate": len(answer["decisions"]) / max(1e-9, answer["ended"] - answer["started"]),
            "load": load,
        }
        waits = sorted((a - s) * 1000 for _, s, a, _ in answer["decisions"])
        figures |= {f"answer_{k}": v for k, v in summary(waits).items() if k != "max_ms"}
        # Where the answer's time went: before the decision's clock read, and after it.
        sent = {i: (s, a) for i, s, a, _ in answer["decisions"] if i in decided}
        if sent:
            figures["before_p50_ms"] = median((decided[i] - s) * 1000 for i, (s, _) in sent.items())
            figures["after_p50_ms"] = median((a - decided[i]) * 1000 for i, (_, a) in sent.items())
        answered = {i: a for i, _, a, _ in answer["decisions"]}
        for effect in EFFECTS:
            came = arrived[effect]
            late = sorted((came[a] - at) * 1000 for a, at in decided.items() if a in came)
            # A lower bound: from the decision's answer (the CLI's exit), committed by then.
            after = [(came[a] - answered[a]) * 1000 for a in decided if a in came and a in answered]
            figures[f"{effect}_after_answer_max_ms"] = max(after, default=float("nan"))
            figures |= {f"{effect}_{k}": v for k, v in summary(late).items()}
            figures[f"{effect}_arrived"] = len(late)
            figures[f"{effect}_all_ms"] = [round(x, 1) for x in late]  # for --json
        return figures

    async def effects(
        self, ids: set[str], marks: list[int], ended: float
    ) -> dict[str, dict[str, float]]:
        """Approval id -> first arrival of each effect, waiting until all came or gave up."""
        give_up = ended + poll_seconds(self.poll) + self.args.patience
        cards = await self.db.cards()
        slack = {(c[2], c[3]): c[0] for c in cards if c[1] == "slack"}
        telegram = {(c[2], c[3]): c[0] for c in cards if c[1] == "telegram"}
        while True:
            await self.edges.collect(self.http)
            s, t, h = (edge.arrivals[m:] for edge, m in zip(self.edges.all(), marks, strict=True))
            arrived = {
                "slack": earliest(s, "update", slack),
                "telegram": earliest(t, "update", telegram),
                "webhook": earliest_hooks(h),
            }
            if all(ids <= found.keys() for found in arrived.values()) or time.time() > give_up:
                return arrived
            await asyncio.sleep(0.1)


def earliest(
    arrivals: list[list[Any]], kind: str, approval_of: dict[tuple[str, str], str]
) -> dict[str, float]:
    """Approval id -> the first `kind` arrival at one of its messages."""
    found: dict[str, float] = {}
    for k, where, ident, at, _ in arrivals:
        approval = approval_of.get((where, ident))
        if k == kind and approval is not None and approval not in found:
            found[approval] = at
    return found


async def one_run(
    tree: Tree, db: str, poll: str, args: argparse.Namespace, edges: Edges
) -> dict[str, dict[str, Any]] | None:
    """A fresh database and server for `tree` at `poll`; every path's figures."""
    k = int(args.rate * args.seconds)
    paths = args.paths.split(",")
    with tempfile.TemporaryDirectory(prefix="signoff-effects-") as tmp:
        async with service_scenarios.database(db, args.postgres, Path(tmp)) as url:
            if url is None:
                return None
            config = Path(tmp, "signoff.toml")
            write_config(config, url, edges, poll)
            server = Server(config, args.workers, tree.command, tree.env())
            try:
                async with aiohttp.ClientSession() as http:
                    run = Run(tree, poll, args, edges, http, server, config, Db(url), Path(tmp))
                    approvals = await run.prepare(k * len(paths))
                    return {
                        path: await run.decide(path, approvals[i * k : (i + 1) * k])
                        for i, path in enumerate(paths)
                    }
            except BaseException:
                print("--- server log (tail)\n" + "".join(list(server.log)[-40:]), file=sys.stderr)
                raise
            finally:
                server.stop()


async def calmer(below: float | None, patience: float) -> str:
    """Wait (up to `patience` s) until the 1-minute load average is below `below`: the
    machine is shared. The load averages (1, 5, 15 min) when done."""
    for _ in range(int(patience // 5)):
        if below is None or os.getloadavg()[0] < below:
            break
        await asyncio.sleep(5)
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


async def bench(args: argparse.Namespace) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="signoff-reference-") as ref_dir:
        plans = [(this_tree(), poll) for poll in args.polls.split(",")]
        if args.reference:
            reference = unpacked(args.reference, Path(ref_dir))
            plans += [(reference, poll) for poll in args.reference_polls.split(",")]
        edges = Edges()
        try:
            for n in range(1, args.runs + 1):
                for db in args.databases.split(","):
                    for tree, poll in plans:
                        label = f"{tree.name}, {poll}"
                        calm = await calmer(args.calm, args.calm_wait)
                        print(f"run {n}, {db}, {label} (load {calm}):", flush=True)
                        began = time.time()
                        figures = await one_run(tree, db, poll, args, edges)
                        if figures is None:
                            break
                        for path, f in figures.items():
                            print(f"  {path:<9} {line(f)}", flush=True)
                            results.append(
                                {"run": n, "database": db, "label": label, "path": path,
                                 "commit": tree.name, "poll": poll, "figures": f}
                            )  # fmt: skip
                        print(f"  ({time.time() - began:.0f} s)", flush=True)
        finally:
            edges.stop()
    return results


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--rate", type=float, default=10.0, help="decisions offered per second")
    p.add_argument("--seconds", type=float, default=10.0, help="of decisions per path")
    p.add_argument("--databases", default="sqlite,postgresql")
    p.add_argument("--polls", default="10s,default", help="[outbox] poll_interval values")
    p.add_argument("--paths", default=",".join(PATHS))
    p.add_argument("--reference", default="de9c71b", help="another commit to measure ('' none)")
    p.add_argument("--reference-polls", default="10s,default")
    p.add_argument("--cli-procs", type=int, default=2, help="CLI decisions running at once")
    p.add_argument(
        "--cli-seconds", type=float, default=20.0, help="of CLI decisions (fewer per second)"
    )
    p.add_argument("--workers", type=int, help="passed to `signoff serve --workers N`")
    processes.add_background_process_option(p)
    p.add_argument("--patience", type=float, default=10.0, help="extra wait for effects (s)")
    p.add_argument(
        "--postgres",
        default=os.environ.get(
            "SIGNOFF_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
        ),
    )
    p.add_argument("--calm", type=float, help="before each server, wait for a load below this")
    p.add_argument("--calm-wait", type=float, default=600.0, help="... for at most this long (s)")


def run(args: argparse.Namespace) -> Results:
    processes.SERVE_ARGS.extend(processes.background_process_args(args.background_process))
    unknown = set(args.paths.split(",")) - set(PATHS)
    if unknown:
        raise SystemExit(f"unknown path(s): {', '.join(sorted(unknown))}")
    signal.signal(signal.SIGTERM, processes.exit_on_sigterm)
    started = time.time()
    try:
        results = asyncio.run(bench(args))
    finally:
        CHILDREN.stop_all()
    print(f"\n{len(results)} path runs in {time.time() - started:.0f} s, {os.cpu_count()} cores")
    print(table(results))
    found = Results(detail=results)
    for r in results:
        for name, value in r["figures"].items():
            if isinstance(value, int | float):
                found.add(f"{r['database']}/{r['label']}/{r['path']}/{name}", value)
    return found
