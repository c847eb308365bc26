"""signoff beside its references in one sitting: --runs interleaved runs (run 1 of everything,
then run 2, ...), every figure as min / median / max, each beside the peer's same figure.

    python -m bench side_by_side [--runs 3] [--quick] [--databases sqlite,postgresql]
        [--rates 5,20,100] [--awaithumans-python PATH] [--postgres URL] [--out FILE]

Each run, each a process of its own (the scenarios' docstrings say what they measure):
  1. service --workers 1 --no-background-process on both databases (one server
     process: on SQLite, serve's default): bare SQL create (the reference), HTTP creates from
     32 clients, Slack clicks offered at 100/s (cards and webhooks on);
  2. service with serve's defaults on PostgreSQL (one server process and the
     background process): the same HTTP creates and clicks;
  3. peer_langgraph: LangGraph pausing on interrupt(), SqliteSaver;
  4. peer_awaithumans: awaithumans' server (its own venv) on both databases: creates
     from 32 clients, completes from 32 clients, completes offered at each --rates and their
     webhooks;
  5. effects with serve's defaults, once per --rates value: decision -> Slack card update,
     Telegram card update and webhook, per surface (Slack click, Telegram button,
     web form; the CLI too at 5/s: a process per decision cannot be offered faster here).

--quick: one run at small sizes, on SQLite only unless --databases says otherwise.

Writes bench/results/DATE-side-by-side.json (DATE-side-by-side-quick.json with --quick; in
its `detail`, every run's raw figures, and per cell min / median / max) and prints markdown
tables. Ratios are taken run by run (each run's signoff figure over the same run's
reference), so a noisy run moves both sides. "Per core" divides by the server CPU each op
cost (utime + stime from /proc), not by the cores the machine has: awaithumans is one
process, signoff's default on PostgreSQL is two.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.results import Results, read_detail
from bench.scenarios.peer_awaithumans import versions_of
from bench.scenarios.run_all import _exit_on_sigterm, commit, fmt, run_child

DESCRIPTION = "signoff beside awaithumans, LangGraph and bare SQL in one sitting"

REPO = Path(__file__).resolve().parents[2]

BENCH = REPO / "bench"
SIZES = {
    "full": {"http_n": 2000, "seconds": 10, "peer_n": 2000, "ah_n": 2000, "ah_seconds": 10,
             "effects_seconds": 10, "patience": 300},
    "quick": {"http_n": 200, "seconds": 2, "peer_n": 200, "ah_n": 100, "ah_seconds": 1,
              "effects_seconds": 1, "patience": 60},
}  # fmt: skip
# The columns: signoff's three setups, then the references.
SQLITE_1 = "SQLite, 1 process (default)"
PG_1, PG_DEFAULT = "PG, 1 process", "PG, default (+ background process)"
AH_SQLITE, AH_PG = "awaithumans, SQLite", "awaithumans, PG"
OURS = (SQLITE_1, PG_1, PG_DEFAULT)
PEER_OF = {SQLITE_1: AH_SQLITE, PG_1: AH_PG, PG_DEFAULT: AH_PG}


def one_run(args: argparse.Namespace, size: dict[str, int], tmp: Path, n: int) -> dict[str, Any]:
    """Every benchmark once; their raw answers."""
    py = sys.executable
    raw: dict[str, Any] = {}
    service = [py, "-m", "bench", "service", "--n", str(size["http_n"]), "--seconds",
               str(size["seconds"]), "--no-with-creates", "--no-quiet-reference",
               "--postgres", args.postgres]  # fmt: skip
    out = tmp / f"service-1-{n}.json"
    run_child([*service, "--workers", "1", "--no-background-process",
               "--databases", args.databases, "--out", str(out),
               "--scenarios", "bare_create,http_create,slack_clicks"], timeout=3600)  # fmt: skip
    raw["service_1"] = read_detail(out)
    if "postgresql" in args.databases:
        out = tmp / f"service-default-{n}.json"
        run_child([*service, "--databases", "postgresql", "--out", str(out),
                   "--scenarios", "http_create,slack_clicks"], timeout=3600)  # fmt: skip
        raw["service_default"] = read_detail(out)
    peer = tmp / f"langgraph-{n}.json"
    run_child([py, "-m", "bench", "peer_langgraph", "--n", str(size["peer_n"]),
               "--out", str(peer)], timeout=1800)  # fmt: skip
    raw["langgraph"] = read_detail(peer)
    print(f"  LangGraph: {raw['langgraph']['rate']:,.0f} pauses/s", flush=True)
    out = tmp / f"awaithumans-{n}.json"
    run_child([py, "-m", "bench", "peer_awaithumans", "--python", args.awaithumans_python,
               "--n", str(size["ah_n"]), "--rates", args.rates,
               "--seconds", str(size["ah_seconds"]), "--patience", str(size["patience"]),
               "--databases", args.databases, "--postgres", args.postgres,
               "--out", str(out)], timeout=3600)  # fmt: skip
    raw["awaithumans"] = read_detail(out)
    raw["effects"] = {}
    for rate in args.rates.split(","):
        out = tmp / f"effects-{rate}-{n}.json"
        paths = "slack,telegram,web" + (",cli" if float(rate) <= 5 else "")
        run_child([py, "-m", "bench", "effects", "--runs", "1", "--rate", rate,
                   "--seconds", str(size["effects_seconds"]), "--databases", args.databases,
                   "--polls", "default", "--reference", "", "--paths", paths,
                   "--postgres", args.postgres, "--out", str(out)], timeout=3600)  # fmt: skip
        raw["effects"][rate] = read_detail(out)
    return raw


def cells_of(raw: dict[str, Any], rates: list[str]) -> dict[str, dict[str, float]]:
    """One run's cells: figure -> column -> value (a missing setup leaves its cell empty)."""
    cells: dict[str, dict[str, float]] = {}

    def put(figure: str, column: str, value: Any) -> None:
        if isinstance(value, int | float):
            cells.setdefault(figure, {})[column] = float(value)

    one = raw["service_1"]
    ours = {SQLITE_1: one.get("sqlite", {}), PG_1: one.get("postgresql", {}),
            PG_DEFAULT: raw.get("service_default", {}).get("postgresql", {})}  # fmt: skip
    for column, s in ours.items():
        h, c = s.get("http_create", {}), s.get("slack_clicks", {})
        put("creates/s, 32 clients", column, h.get("rate"))
        put("create p99 (ms)", column, h.get("p99_ms"))
        put("server CPU per create (ms)", column, h.get("cpu_ms"))
        # signoff's creates each post a Slack card, which may go out after the creates end.
        put("... until its card was posted (ms)", column, h.get("cpu_ms_with_card"))
        put("decision p50 at 100/s (ms)", column, c.get("p50_ms"))
        put("decision p99 at 100/s (ms)", column, c.get("p99_ms"))
        put("decision max at 100/s (ms)", column, c.get("max_ms"))
        put("server CPU per decision at 100/s (ms)", column, c.get("cpu_ms"))
        put("... until its webhook (and card) arrived (ms)", column,
            c.get("cpu_ms_until_delivered"))  # fmt: skip
    for db, column in (("sqlite", "bare SQL, SQLite"), ("postgresql", "bare SQL, PG")):
        bare = raw["service_1"].get(db, {}).get("bare_create", {})
        put("creates/s, 32 clients", column, bare.get("rate"))
        put("decisions/s, 32 clients", column, bare.get("decide_rate"))  # absent before 12-05
    put("creates/s, 32 clients", "LangGraph pauses", raw["langgraph"]["rate"])
    for db, column in (("sqlite", AH_SQLITE), ("postgresql", AH_PG)):
        a = raw["awaithumans"].get(db, {})
        put("creates/s, 32 clients", column, a.get("create", {}).get("rate"))
        put("create p99 (ms)", column, a.get("create", {}).get("p99_ms"))
        put("create errors (of n)", column, a.get("create", {}).get("errors"))
        put("server CPU per create (ms)", column, a.get("create", {}).get("cpu_ms"))
        put("HTTP completes/s, 32 clients", column, a.get("complete", {}).get("rate"))
        put("HTTP complete errors (of n)", column, a.get("complete", {}).get("errors"))
        put("server CPU per HTTP complete (ms)", column, a.get("complete", {}).get("cpu_ms"))
        hundred = a.get("decide_at_100", {})
        put("decision p50 at 100/s (ms)", column, hundred.get("p50_ms"))
        put("decision p99 at 100/s (ms)", column, hundred.get("p99_ms"))
        put("decision max at 100/s (ms)", column, hundred.get("max_ms"))
        put("server CPU per decision at 100/s (ms)", column, hundred.get("cpu_ms"))
        put("... until its webhook (and card) arrived (ms)", column,
            hundred.get("cpu_ms_until_delivered"))  # fmt: skip
        for rate in rates:
            d = a.get(f"decide_at_{float(rate):g}", {})
            put(f"decisions answered/s at {rate}/s offered", column, d.get("answered_rate"))
            for q in ("p50", "p99"):
                put(f"decision -> webhook {q} at {rate}/s (ms)", column, d.get(f"webhook_{q}_ms"))
    for rate in rates:
        for row in raw["effects"].get(rate, []):
            column = SQLITE_1 if row["database"] == "sqlite" else PG_DEFAULT
            f, path = row["figures"], row["path"]
            put(f"decisions answered/s at {rate}/s offered", f"{column}, {path}", f.get("rate"))
            if path == "slack":  # beside awaithumans' HTTP completes in the main table
                put(f"decisions answered/s at {rate}/s offered", column, f.get("rate"))
                for q in ("p50", "p99"):
                    put(f"decision -> webhook {q} at {rate}/s (ms)", column,
                        f.get(f"webhook_{q}_ms"))  # fmt: skip
            for effect in ("webhook", "slack", "telegram"):
                name = "webhook" if effect == "webhook" else f"{effect} card update"
                for q in ("p50", "p99"):
                    put(f"decision -> {name} {q} at {rate}/s (ms)", f"{column}, {path}",
                        f.get(f"{effect}_{q}_ms"))  # fmt: skip
    return cells


def ratios_of(cells: dict[str, dict[str, float]]) -> dict[str, float]:
    """One run's ratios: signoff over the same run's reference, higher is better for signoff."""
    out: dict[str, float] = {}

    def put(name: str, value: float | None) -> None:
        if value is not None and value == value and value not in (float("inf"), 0.0):
            out[name] = value

    def get(figure: str, column: str) -> float | None:
        return cells.get(figure, {}).get(column)

    for ours in OURS:
        peer = PEER_OF[ours]
        c, p = get("creates/s, 32 clients", ours), get("creates/s, 32 clients", peer)
        put(f"creates/s, {ours} / {peer}", c / p if c and p else None)
        # Per core: a create with its card posted (awaithumans' post none), a decision with
        # its webhook (and card update) delivered: the work each asks of the server.
        cc = get("... until its card was posted (ms)", ours)
        cp = get("server CPU per create (ms)", peer)
        put(
            f"creates per core (1 / CPU per create, its card included), {ours} / {peer}",
            cp / cc if cc and cp else None,
        )
        dc = get("... until its webhook (and card) arrived (ms)", ours)
        dp = get("... until its webhook (and card) arrived (ms)", peer)
        put(f"decisions per core at 100/s (1 / CPU per decision, effects included), "
            f"{ours} / {peer}", dp / dc if dc and dp else None)  # fmt: skip
        qc = get("decision p99 at 100/s (ms)", ours)
        qp = get("decision p99 at 100/s (ms)", peer)
        put(f"decision p99 at 100/s, {peer} / {ours}", qp / qc if qc and qp else None)
        bare_sql = "bare SQL, SQLite" if ours == SQLITE_1 else "bare SQL, PG"
        bare = get("creates/s, 32 clients", bare_sql)
        put(f"creates/s, {ours} / bare SQL", c / bare if c and bare else None)
        # Bare SQL runs in one process: its rate is about its rate per core.
        put(f"creates per core (card included), {ours} / bare SQL creates/s",
            1000 / cc / bare if cc and bare else None)  # fmt: skip
        bare = get("decisions/s, 32 clients", bare_sql)
        put(f"decisions per core (effects included), {ours} / bare SQL decisions/s",
            1000 / dc / bare if dc and bare else None)  # fmt: skip
        for rate in ("20", "100"):
            figure = f"decision -> webhook p99 at {rate}/s (ms)"
            wc, wp = get(figure, ours), get(figure, peer)
            put(f"decision -> webhook p99 at {rate}/s, {peer} / {ours}",
                wp / wc if wc and wp else None)  # fmt: skip
        lg = get("creates/s, 32 clients", "LangGraph pauses")
        put(f"creates/s, {ours} / LangGraph pauses", c / lg if c and lg else None)
    return out


def spread(values: list[float]) -> dict[str, Any]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values),
            "values": values}  # fmt: skip


def show(s: dict[str, Any] | None, unit: str = "") -> str:
    if not s:
        return ""
    return " / ".join(fmt(s[k], unit) for k in ("min", "median", "max"))


def tables(cells: dict[str, dict[str, dict[str, Any]]], ratios: dict[str, dict[str, Any]]) -> str:
    columns = list(dict.fromkeys(c for row in cells.values() for c in row))
    main = [c for c in (*OURS, AH_SQLITE, AH_PG, "bare SQL, SQLite", "bare SQL, PG",
                        "LangGraph pauses") if c in columns]  # fmt: skip
    lines = ["| figure (min / median / max) | " + " | ".join(main) + " |",
             "| --- |" + " --- |" * len(main)]  # fmt: skip
    surfaces: list[str] = []
    for figure, row in cells.items():
        if any(c in row for c in main):
            lines.append(f"| {figure} | " + " | ".join(show(row.get(c)) for c in main) + " |")
        if any(c not in main for c in row):
            surfaces.append(figure)
    if surfaces:
        per = [c for c in columns if c not in main]
        head = "| figure | " + " | ".join(per) + " |"
        lines += ["", "Per surface (signoff; awaithumans: the table above):", "",
                  head, "| --- |" + " --- |" * len(per)]  # fmt: skip
        for figure in surfaces:
            lines.append(
                f"| {figure} | " + " | ".join(show(cells[figure].get(c)) for c in per) + " |"
            )
    lines += ["", "| ratio, run by run (higher: signoff better) | min / median / max |",
              "| --- | --- |"]  # fmt: skip
    lines += [f"| {name} | {show(s)} |" for name, s in ratios.items()]
    return "\n".join(lines)


def aggregate(per_run: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for cells in per_run:
        for figure, row in cells.items():
            for column, value in row.items():
                out.setdefault(figure, {}).setdefault(column, []).append(value)
    return {f: {c: spread(v) for c, v in row.items()} for f, row in out.items()}


def summary(
    raws: list[dict[str, Any]], rates: list[str]
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Every figure and every ratio over the runs (min / median / max)."""
    per_run = [cells_of(raw, rates) for raw in raws]
    ratios_runs = [ratios_of(c) for c in per_run]
    names = list(dict.fromkeys(n for r in ratios_runs for n in r))
    ratios = {n: spread([r[n] for r in ratios_runs if n in r]) for n in names}
    return aggregate(per_run), ratios


def retable(path: Path) -> None:
    """FILE's cells and ratios anew: a results document of `python -m bench side_by_side`
    (its `detail`) or a file of the per-script days (the document itself)."""
    doc = json.loads(path.read_text("utf-8"))
    result = doc["detail"] if "scenario" in doc else doc
    result["cells"], result["ratios"] = summary(result["runs"], result["args"]["rates"].split(","))
    path.write_text(json.dumps(doc, indent=2, default=str), "utf-8")
    print(tables(result["cells"], result["ratios"]))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one run at small sizes: a smoke run")
    parser.add_argument(
        "--databases", help="default sqlite,postgresql; with --quick, sqlite (twice as fast)"
    )
    parser.add_argument("--rates", default="5,20,100", help="decisions offered per second")
    parser.add_argument(
        "--awaithumans-python",
        default=os.environ.get("AWAITHUMANS_PYTHON", "/work/.bench-awaithumans/bin/python"),
    )
    parser.add_argument(
        "--postgres",
        default=os.environ.get(
            "SIGNOFF_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
        ),
    )
    parser.add_argument(
        "--tables",
        type=Path,
        metavar="FILE",
        help="run nothing: take FILE's raw runs, write its cells and ratios anew by this "
        "script's rules, and print the tables",
    )


def run(args: argparse.Namespace) -> Results | None:
    if args.tables is not None:
        retable(args.tables)
        return None
    versions_of(args.awaithumans_python)  # a clear message now if the peer is missing
    if args.quick:
        args.runs = 1
    args.databases = args.databases or ("sqlite" if args.quick else "sqlite,postgresql")
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    size = SIZES["quick" if args.quick else "full"]
    rates = args.rates.split(",")
    today = datetime.date.today().isoformat()
    name = f"{today}-side-by-side{'-quick' if args.quick else ''}.json"
    out = args.out or BENCH / "results" / name
    args.out = out  # python -m bench writes the results there
    began, loads = time.time(), [os.getloadavg()]
    raws = []
    with tempfile.TemporaryDirectory(prefix="signoff-side-by-side-") as tmp:
        for n in range(1, args.runs + 1):
            print(f"\n=== run {n} of {args.runs} (load {os.getloadavg()[0]:.1f})", flush=True)
            raws.append(one_run(args, size, Path(tmp), n))
            loads.append(os.getloadavg())
    cells, ratios = summary(raws, rates)
    result = {
        "date": today,
        "commit": commit(),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_averages": loads,
        },
        "awaithumans": raws[0]["awaithumans"].get("settings"),
        "args": {**vars(args), "out": str(out), "sizes": size},
        "seconds": round(time.time() - began, 1),
        "cells": cells,
        "ratios": ratios,
        "runs": raws,
    }
    shown = out.relative_to(REPO) if out.is_relative_to(REPO) else out
    load = " / ".join(f"{x:.1f}" for x in loads[0])
    print(f"\n{args.runs} run(s) in {result['seconds']:.0f} s, commit {result['commit']}, "
          f"{os.cpu_count()} cpus, load {load} at the start; written to {shown}\n")  # fmt: skip
    print(tables(cells, ratios))
    found = Results(detail=result)
    for figure, row in cells.items():
        for column, s in row.items():
            for value in s["values"]:
                found.add(f"{figure} [{column}]", value)
    for name, s in ratios.items():
        for value in s["values"]:
            found.add(f"ratio: {name}", value)
    return found
