"""Charts of a results file (a tool of `python -m bench`, not a scenario):

    python -m bench chart [FILE] [--side-by-side] [--out PNG]

- a run_all file (bench/results/DATE.json): throughput beside its references, and decision
  latency against the 50 ms target -> docs/img/benchmarks.png;
- a side_by_side file (bench/results/DATE-side-by-side.json; --side-by-side picks the newest):
  work per core beside awaithumans and bare SQL, and decision -> webhook latency at each rate
  against issue 27's targets -> docs/img/side-by-side.png.

Bars are medians, whiskers min-max across the runs. Without FILE, the newest run_all file
that is not a --quick run (else the newest), or with --side-by-side the newest side-by-side
file. Both the results documents of `python -m bench` (their `detail`) and the files of the
per-script days are read.
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
from matplotlib.patches import Patch

from bench.scenarios.side_by_side import AH_PG, AH_SQLITE, OURS, PG_DEFAULT, SQLITE_1

DESCRIPTION = "draw a run_all or side_by_side results file (docs/img/*.png)"

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
OURS_COLOR, REF, TARGET = "#2b6cb0", "#a0aec0", "#c53030"
COLORS = {**dict.fromkeys(OURS, "#2b6cb0"), AH_SQLITE: "#a0aec0", AH_PG: "#a0aec0"}
BARE = "#68d391"
# Decision -> webhook p99 targets (issue 27): under 100 ms at 20/s, under 1 s at 100/s.
TARGETS = {"20": 100.0, "100": 1000.0}


def load(path: Path) -> dict[str, Any]:
    """A results file's scenario document: `detail` of a `python -m bench` document, or the
    file itself (written by the per-script bench before it)."""
    doc = json.loads(path.read_text("utf-8"))
    if isinstance(doc, dict) and "scenario" in doc:
        doc = doc["detail"]
    return doc if isinstance(doc, dict) else {}


def newest(side_by_side: bool) -> Path:
    found = sorted(RESULTS.glob("*.json"), key=lambda p: p.stat().st_mtime)
    if side_by_side:
        found = [p for p in found if "cells" in load(p)]
        if not found:
            sys.exit("no side_by_side results: run python -m bench side_by_side first")
        return found[-1]
    # run_all's files only: the others (one scenario's passes) have no "figures" table.
    found = [p for p in found if "figures" in load(p) and "cells" not in load(p)]
    full = [p for p in found if not p.stem.endswith("-quick")]
    if not found:
        sys.exit("no run_all results in bench/results: run python -m bench run_all first")
    return (full or found)[-1]


def whiskers(s: dict[str, float]) -> list[list[float]]:
    return [[s["median"] - s["min"]], [s["max"] - s["median"]]]


def throughput_rows(figures: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (name, f)
        for name, f in figures.items()
        if f["kind"] == "throughput" and not name.startswith("LangGraph")
    ]


def latency_rows(figures: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (name, f)
        for name, f in figures.items()
        if f["kind"] == "latency" and (name.startswith("click p") or name.startswith("core"))
    ]


def bars(ax: Any, rows: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """One bar per figure (median, whiskers min-max), its reference's beside it; the labels."""
    labels = []
    for y, (name, f) in enumerate(rows):
        pair = f["reference"] is not None
        ax.barh(y + (0.2 if pair else 0), f["signoff"]["median"], 0.4 if pair else 0.6,
                xerr=whiskers(f["signoff"]), color=OURS_COLOR, capsize=2)  # fmt: skip
        if pair:
            ax.barh(y - 0.2, f["reference"]["median"], 0.4, xerr=whiskers(f["reference"]),
                    color=REF, capsize=2)  # fmt: skip
        labels.append(name + (f"\n vs {f['reference_label']}" if pair else ""))
    return labels


def throughput(ax: Any, figures: dict[str, dict[str, Any]]) -> None:
    rows = throughput_rows(figures)
    labels = bars(ax, rows)
    for y, (_, f) in enumerate(rows):
        if f["reference"] is not None and f["ratio"]:
            ax.annotate(
                f"{f['ratio']['median']:.2f}x",
                (max(f["signoff"]["max"], f["reference"]["max"]), y),
                xytext=(4, -3), textcoords="offset points", fontsize=7,
            )  # fmt: skip
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("per second (log scale)")
    ax.legend(
        handles=[Patch(color=OURS_COLOR, label="signoff"), Patch(color=REF, label="reference")],
        fontsize=7,
        loc="lower center",
        bbox_to_anchor=(0.5, 1.0),
        frameon=False,
        ncol=2,
    )
    ax.set_title(
        "Throughput: signoff vs its reference, same run (ratio = median)", fontsize=9, pad=22
    )
    ax.grid(axis="x", alpha=0.3, which="both")


def latency(ax: Any, figures: dict[str, dict[str, Any]]) -> None:
    rows = latency_rows(figures)
    labels = bars(ax, rows)
    ax.axvline(50, color=TARGET, linestyle="--", linewidth=1)
    ax.legend(
        handles=[
            Patch(color=OURS_COLOR, label="cards and webhooks on"),
            Patch(color=REF, label="cards and webhooks off"),
            Line2D([], [], color=TARGET, linestyle="--", label="target: p99 < 50 ms"),
        ],
        fontsize=7,
        loc="lower center",
        bbox_to_anchor=(0.5, 1.0),
        frameon=False,
        ncol=3,
    )
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("ms (log scale)")
    ax.set_title("Decision latency at 100 signed Slack clicks/s offered", fontsize=9, pad=22)
    ax.grid(axis="x", alpha=0.3, which="both")


def per_core(cell: dict[str, float]) -> tuple[float, float, float]:
    """Operations per second of CPU from milliseconds per operation: (low, median, high)."""
    return 1000 / cell["max"], 1000 / cell["median"], 1000 / cell["min"]


def work_per_core(ax: Any, cells: dict[str, dict[str, dict[str, float]]]) -> None:
    """The per-core figures the side_by_side scenario's ratios take: signoff's create with its
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


def draw_run_all(data: dict[str, Any]) -> Any:
    figures = data["figures"]
    rows = max(len(throughput_rows(figures)), len(latency_rows(figures)))
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(16, 1.5 + 0.42 * max(rows, 6)), gridspec_kw={"width_ratios": [1, 1]}
    )
    throughput(left, figures)
    latency(right, figures)
    runs = len(data["runs"])
    fig.suptitle(
        f"signoff benchmarks, {data['date']} (commit {data['commit']}, "
        f"{data['machine']['cpus']} cores, {runs} run{'s' if runs != 1 else ''}: "
        "bar = median, whiskers = min-max)",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    return fig


def draw_side_by_side(data: dict[str, Any]) -> Any:
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
    return fig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="?", type=Path, help="a results file (newest if none)")
    parser.add_argument(
        "--side-by-side", action="store_true", help="without FILE: the newest side_by_side file"
    )
    parser.add_argument(
        "--out", type=Path, help="the PNG (docs/img/benchmarks.png or docs/img/side-by-side.png)"
    )


def run(args: argparse.Namespace) -> None:
    source = args.results or newest(args.side_by_side)
    data = load(source)
    if "cells" in data:
        fig, out, dpi = draw_side_by_side(data), REPO / "docs" / "img" / "side-by-side.png", 110
    else:
        fig, out, dpi = draw_run_all(data), REPO / "docs" / "img" / "benchmarks.png", 120
    out = args.out or out
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi)
    print(f"{source.name} -> {out}")
