"""Every figure of the performance issue beside its reference, measured in one run, --runs
times (interleaved: run 1 of everything, then run 2, ...), as min / median / max.

    python -m bench run_all [--runs 3] [--quick] [--workers 1,2] [--databases sqlite,postgresql]
                            [--load-procs N] [--postgres URL] [--out bench/results/DATE.json]

Each run, each a process of its own:
  1. decide_throughput: core create and decide vs bare SQL, same statements.
  2. service: `signoff serve` with cards and webhooks on, fake Slack and webhook
     receiver and load generators in other processes; the bare SQL create reference.
     Once per `--workers` value (passed to `signoff serve --workers N`; none: serve's default).
  3. peer_langgraph: LangGraph interrupt + SqliteSaver, same call, 4 KB transcript.

Writes the figures (every run's values and min / median / max, ratios taken run by run) to
bench/results/DATE.json (DATE-quick.json with --quick; its `detail`) and prints them as
markdown tables; `python -m bench chart` draws them.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.results import Results, read_detail

DESCRIPTION = "3 interleaved runs of decide_throughput, service, peer_langgraph; markdown tables"

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"

SIZES = {
    # decide_throughput --n / --seconds, service --n / --seconds / --sustain-seconds, peer --n
    "full": {
        "core_n": 2000,
        "core_seconds": 5,
        "http_n": 2000,
        "seconds": 10,
        "sustain": 10,
        "peer_n": 2000,
    },
    "quick": {
        "core_n": 400,
        "core_seconds": 3,
        "http_n": 400,
        "seconds": 3,
        "sustain": 4,
        "peer_n": 400,
    },
}
DB_NAMES = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}


def run_child(cmd: list[str], timeout: float) -> None:
    """Run another scenario (`python -m bench ...`) as a process of its own."""
    print("$ " + " ".join(str(c) for c in cmd), flush=True)
    child = subprocess.Popen(cmd, cwd=REPO)
    try:
        code = child.wait(timeout)
    except BaseException as exc:
        # SIGTERM, not the SIGKILL subprocess.run would send: the script then stops the
        # servers and generators it started before it exits.
        print(f"run_all: {type(exc).__name__}; stopping {cmd[3]}", file=sys.stderr, flush=True)
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(60)
        except subprocess.TimeoutExpired:
            child.kill()
        raise
    if code != 0:
        raise SystemExit(f"{cmd[3]} failed with exit code {code}")


def _exit_on_sigterm(*_: object) -> None:
    # bench/processes.py has the same two lines; this script imports the standard library
    # only, since it runs the others as processes of their own.
    raise SystemExit(143)


def one_run(args: argparse.Namespace, size: dict[str, int], tmp: Path, n: int) -> dict[str, Any]:
    """Every benchmark once; their raw figures."""
    py = sys.executable
    raw: dict[str, Any] = {}
    core = tmp / f"core-{n}.json"
    run_child(
        [py, "-m", "bench", "decide_throughput", "--n", str(size["core_n"]),
         "--seconds", str(size["core_seconds"]), "--databases", args.databases,
         "--postgres", args.postgres, "--out", str(core)],
        timeout=1800,
    )  # fmt: skip
    raw["core"] = read_detail(core)
    raw["service"] = {}
    for workers in args.workers.split(",") if args.workers else [""]:
        out = tmp / f"service-{n}-{workers or 'default'}.json"
        cmd = [
            py, "-m", "bench", "service", "--n", str(size["http_n"]),
            "--seconds", str(size["seconds"]), "--sustain-seconds", str(size["sustain"]),
            "--databases", args.databases, "--postgres", args.postgres, "--out", str(out),
        ]  # fmt: skip
        if workers:
            cmd += ["--workers", workers]
        if args.load_procs:
            cmd += ["--load-procs", str(args.load_procs)]
        run_child(cmd, timeout=3600)
        raw["service"][workers or "default"] = read_detail(out)
    peer = tmp / f"peer-{n}.json"
    run_child(
        [py, "-m", "bench", "peer_langgraph", "--n", str(size["peer_n"]), "--out", str(peer)],
        timeout=1800,
    )
    raw["peer"] = read_detail(peer)
    print(f"  LangGraph peer: {raw['peer']['rate']:,.0f} pauses/s", flush=True)
    return raw


def figures_of(raw: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """One run's figures: name -> {signoff, reference, reference_label, unit, kind}."""
    out: dict[str, dict[str, Any]] = {}

    def put(name: str, unit: str, kind: str, ours: Any, ref: Any = None, label: str = "") -> None:
        if ours is not None:
            out[name] = {"unit": unit, "kind": kind, "signoff": ours, "reference": ref,
                         "reference_label": label}  # fmt: skip

    for db, f in raw["core"].items():
        d = DB_NAMES[db]
        put(f"core create, {d}", "/s", "throughput", f["signoff"]["create"],
            f["bare"]["create"], "bare SQL")  # fmt: skip
        put(f"core decide, {d}", "/s", "throughput", f["signoff"]["decide"],
            f["bare"]["decide"], "bare SQL")  # fmt: skip
        put(f"core decision p99 at 100/s offered (target < 50 ms), {d}", "ms", "latency",
            f["signoff"]["paced_p99"])  # fmt: skip
    multi = len(raw["service"]) > 1
    for workers, by_db in raw["service"].items():
        w = f" ({workers} workers)" if multi or workers != "default" else ""
        for db, s in by_db.items():
            d = DB_NAMES[db] + w
            bare = s.get("bare_create", {}).get("rate")
            if "http_create" in s:
                h = s["http_create"]
                put(f"HTTP create, {d}", "/s", "throughput", h["rate"], bare, "bare SQL create")
                if db == "sqlite":
                    put(f"HTTP create vs LangGraph, {d}", "/s", "throughput", h["rate"],
                        raw["peer"]["rate"], "LangGraph interrupt + SqliteSaver")  # fmt: skip
                put(f"HTTP create p99, {d}", "ms", "latency", h["p99_ms"])
                put(f"server CPU per HTTP create, {d}", "ms", "cost", h["cpu_ms"])
                put(f"server CPU per HTTP create incl. its card, {d}", "ms", "cost",
                    h["cpu_ms_with_card"])  # fmt: skip
            off = "cards and webhooks off"
            for key, what in (("slack_clicks", ""), ("slack_clicks_with_creates", " + creates")):
                if key not in s:
                    continue
                c = s[key]
                rate = f"{c['offered_rate']:.0f}/s"
                # The quiet server was clicked without creates: no reference for that variant.
                quiet = s.get("slack_clicks_quiet") if not what else None
                put(f"click p50 at {rate}{what}, {d}", "ms", "latency", c["p50_ms"],
                    quiet and quiet["p50_ms"], off)  # fmt: skip
                put(f"click p99 at {rate}{what} (target < 50 ms), {d}", "ms", "latency",
                    c["p99_ms"], quiet and quiet["p99_ms"], off)  # fmt: skip
                put(f"click max at {rate}{what}, {d}", "ms", "latency", c["max_ms"],
                    quiet and quiet["max_ms"], off)  # fmt: skip
                if not what:
                    put(f"server CPU per click, {d}", "ms", "cost", c["cpu_ms"],
                        quiet and quiet["cpu_ms"], off)  # fmt: skip
                    put(f"server CPU per click incl. card update and webhook, {d}", "ms",
                        "cost", c["cpu_ms_until_delivered"])  # fmt: skip
                    put(f"server cores used at {rate} clicks, {d}", "cores", "cost",
                        c["server_cores"], quiet and quiet["server_cores"], off)  # fmt: skip
                put(f"outbox backlog growth at {rate}{what}, {d}", "jobs/s", "cost",
                    c["backlog_slope"])  # fmt: skip
                put(f"all delivered, seconds after the last click{what}, {d}", "s", "cost",
                    c["drain_s"] if c["delivered"] else float("inf"))  # fmt: skip
            if "sustained_cards" in s:
                put(f"sustained create-and-post-card, {d}", "/s", "throughput",
                    s["sustained_cards"]["rate"])  # fmt: skip
    put("LangGraph interrupt + SqliteSaver", "/s", "throughput", raw["peer"]["rate"])
    return out


def spread(values: list[float]) -> dict[str, Any]:
    return {
        "min": min(values),
        "median": statistics.median(values),
        "max": max(values),
        "values": values,
    }


def aggregate(runs: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    names = list(dict.fromkeys(name for r in runs for name in r))
    result = {}
    for name in names:
        seen = [r[name] for r in runs if name in r]
        first = seen[0]
        entry: dict[str, Any] = {
            "unit": first["unit"],
            "kind": first["kind"],
            "signoff": spread([f["signoff"] for f in seen]),
            "reference_label": first["reference_label"],
            "reference": None,
            "ratio": None,
        }
        refs = [f["reference"] for f in seen if f["reference"] is not None]
        if refs:
            entry["reference"] = spread(refs)
            if first["kind"] == "throughput":
                entry["ratio"] = spread(
                    [f["signoff"] / f["reference"] for f in seen if f["reference"]]
                )
        result[name] = entry
    return result


def fmt(value: float, unit: str) -> str:
    if value == float("inf"):
        return "never"
    if unit == "/s" or abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}"


def table(figures: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| figure | signoff min / median / max | reference min / median / max | ratio |",
        "| --- | --- | --- | --- |",
    ]
    for name, f in figures.items():
        unit = f["unit"]

        def span(s: dict[str, float], unit: str = unit) -> str:
            return " / ".join(fmt(s[k], unit) for k in ("min", "median", "max")) + f" {unit}"

        ref = f"{f['reference_label']}: {span(f['reference'])}" if f["reference"] else ""
        ratio = ""
        if f["ratio"]:
            r = f["ratio"]
            ratio = f"{r['min']:.2f}-{r['max']:.2f} (median {r['median']:.2f})"
        lines.append(f"| {name} | {span(f['signoff'])} | {ref} | {ratio} |")
    return "\n".join(lines)


def commit() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
    except OSError:
        return "unknown"
    return head + ("+changes" if dirty else "")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument("--workers", default="", help="comma list, e.g. 1,2 (serve --workers)")
    parser.add_argument("--databases", default="sqlite,postgresql")
    parser.add_argument("--load-procs", type=int, help="load generator processes (service.py)")
    parser.add_argument(
        "--postgres",
        default=os.environ.get(
            "SIGNOFF_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
        ),
    )


def run(args: argparse.Namespace) -> Results:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    size = SIZES["quick" if args.quick else "full"]
    today = datetime.date.today().isoformat()
    out = args.out or BENCH / "results" / f"{today}{'-quick' if args.quick else ''}.json"
    args.out = out  # python -m bench writes the results there
    began = time.time()
    per_run = []
    with tempfile.TemporaryDirectory(prefix="signoff-bench-all-") as tmp:
        for n in range(1, args.runs + 1):
            print(f"\n=== run {n} of {args.runs}", flush=True)
            raw = one_run(args, size, Path(tmp), n)
            per_run.append({"raw": raw, "figures": figures_of(raw)})
    figures = aggregate([r["figures"] for r in per_run])
    result = {
        "date": today,
        "commit": commit(),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "args": {**vars(args), "out": str(out), "sizes": size},
        "seconds": round(time.time() - began, 1),
        "figures": figures,
        "runs": [r["raw"] for r in per_run],
    }
    shown = out.relative_to(REPO) if out.is_relative_to(REPO) else out
    print(
        f"\n{args.runs} run(s) in {result['seconds']:.0f} s, commit {result['commit']}, "
        f"{os.cpu_count()} cpus; written to {shown}\n"
    )
    print(table(figures))
    found = Results(detail=result)
    for one in per_run:
        for name, f in one["figures"].items():
            found.add(name, f["signoff"], f["unit"])
            if f["reference"] is not None:
                found.add(f"{name}: {f['reference_label']}", f["reference"], f["unit"])
    return found
