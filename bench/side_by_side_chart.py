"""Draw bench/side_by_side.py's figures: work per core beside awaithumans and bare SQL, and
decision -> webhook latency at each rate against issue 27's targets. Bars are medians,
whiskers min-max across the runs.

    python bench/side_by_side_chart.py [bench/results/DATE-side-by-side.json]
        [--out docs/img/side-by-side.png]

Without a file, the newest bench/results/*-side-by-side.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display on a server or in CI

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.side_by_side import AH_PG, AH_SQLITE, OURS, PG_DEFAULT, SQLITE_1  # noqa: E402

COLORS = {**dict.fromkeys(OURS, "#2b6cb0"), AH_SQLITE: "#a0aec0", AH_PG: "#a0aec0"}
BARE = "#68d391"
TARGET = "#c53030"
# Decision -> webhook p99 targets (issue 27): under 100 ms at 20/s, under 1 s at 100/s.
TARGETS = {"20": 100.0, "100": 1000.0}


def newest() -> Path:
    found = sorted(
        (REPO / "bench" / "results").glob("*-side-by-side.json"), key=lambda p: p.stat().st_mtime
    )
    if not found:
        sys.exit("no bench/results/*-side-by-side.json: run bench/side_by_side.py first")
    return found[-1]


def per_core(cell: dict[str, float]) -> tuple[float, float, float]:
    """Operations per second of CPU from milliseconds per operation: (low, median, high)."""
    return 1000 / cell["max"], 1000 / cell["median"], 1000 / cell["min"]


def work_per_core(ax: Any, cells: dict[str, dict[str, dict[str, float]]]) -> None:
    """The per-core figures bench/side_by_side.py's ratios take: signoff's create with its
    card posted (awaithumans posts none), each decision until its webhook (and card) arrived."""
    rows: list[tuple[str, tuple[float, float, float], str]] = []
    for what, ours, theirs in (
        ("creates", "... until its card was posted (ms)", "server CPU per create (ms)"),
        ("decisions", "... until its webhook (and card) arrived (ms)",
         "... until its webhook (and card) arrived (ms)"),
    ):  # fmt: skip
        for column in (*OURS, AH_SQLITE, AH_PG):
            cell = cells.get(ours if column in OURS else theirs, {}).get(column)
            if cell:
                rows.append((f"{what}: {column}", per_core(cell), COLORS[column]))
        for column in ("bare SQL, SQLite", "bare SQL, PG"):
            cell = cells.get(f"{what}/s, 32 clients", {}).get(column)
            if cell:  # one process on one core: its rate is its rate per core
                rows.append((f"{what}: {column}", (cell["min"], cell["median"], cell["max"]), BARE))
    for y, (_, (low, mid, high), color) in enumerate(rows):
        ax.barh(y, mid, 0.6, xerr=[[mid - low], [high - mid]], color=color, capsize=2)
        ax.annotate(f"{mid:,.0f}", (high, y), xytext=(4, -3), textcoords="offset points",
                    fontsize=7)  # fmt: skip
    ax.set_yticks(range(len(rows)), [r[0] for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("per second of server CPU (log scale); signoff's include cards and webhooks")
    ax.set_title("Work per core (decisions: Slack clicks / HTTP completes at 100/s): signoff "
                 "(blue), awaithumans (grey), bare SQL (green)",
                 fontsize=9)  # fmt: skip
    ax.grid(axis="x", alpha=0.3, which="both")


def webhook_latency(
    ax: Any, cells: dict[str, dict[str, dict[str, float]]], rates: list[str]
) -> None:
    rows: list[tuple[str, dict[str, float], str, str]] = []
    for rate in rates:
        figure = f"decision -> webhook p99 at {rate}/s (ms)"
        for column in (SQLITE_1, PG_DEFAULT, AH_SQLITE, AH_PG):
            cell = cells.get(figure, {}).get(column)
            if cell:
                rows.append((f"{rate}/s: {column}", cell, COLORS[column], rate))
    for y, (_, cell, color, rate) in enumerate(rows):
        mid = cell["median"]
        ax.barh(y, mid, 0.6, xerr=[[mid - cell["min"]], [cell["max"] - mid]], color=color,
                capsize=2)  # fmt: skip
        ax.annotate(f"{mid:,.0f} ms", (cell["max"], y), xytext=(4, -3),
                    textcoords="offset points", fontsize=7)  # fmt: skip
        if rate in TARGETS:
            ax.plot([TARGETS[rate]] * 2, [y - 0.4, y + 0.4], color=TARGET, linewidth=1.5)
    ax.set_yticks(range(len(rows)), [r[0] for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("ms (log scale)")
    ax.legend(handles=[Line2D([], [], color=TARGET, label="target p99 (20/s: 100 ms, 100/s: 1 s)")],
              fontsize=7, loc="lower right")  # fmt: skip
    ax.set_title("Decision -> webhook p99 (signoff: a Slack click; awaithumans: an HTTP complete)",
                 fontsize=9)  # fmt: skip
    ax.grid(axis="x", alpha=0.3, which="both")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", type=Path)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "img" / "side-by-side.png")
    args = parser.parse_args()
    source = args.results or newest()
    data = json.loads(source.read_text("utf-8"))
    cells, rates = data["cells"], data["args"]["rates"].split(",")
    fig, (left, right) = plt.subplots(1, 2, figsize=(17, 7))
    work_per_core(left, cells)
    webhook_latency(right, cells, rates)
    runs = len(data["runs"])
    fig.suptitle(
        f"signoff beside awaithumans and bare SQL, {data['date']} (commit {data['commit']}, "
        f"{data['machine']['cpus']} cores, {runs} interleaved run{'s' if runs != 1 else ''}: "
        "bar = median, whiskers = min-max)",
        fontsize=10,
    )
    fig.tight_layout(rect=(0.01, 0, 1, 0.96))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"{source.name} -> {args.out}")


if __name__ == "__main__":
    main()
