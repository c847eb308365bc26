"""Draw bench/run_all.py's figures: throughput beside its references, and decision latency
against the 50 ms target. Bars are medians, whiskers min-max across the runs.

    python bench/chart.py [bench/results/DATE.json] [--out docs/img/benchmarks.png]

Without a file, the newest bench/results/*.json that is not a --quick run (else the newest).
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

REPO = Path(__file__).resolve().parents[1]
OURS, REF, TARGET = "#2b6cb0", "#a0aec0", "#c53030"


def newest() -> Path:
    found = sorted((REPO / "bench" / "results").glob("*.json"), key=lambda p: p.stat().st_mtime)
    # run_all.py's files only: the others (one scenario's passes) have no "figures" table.
    found = [p for p in found if "figures" in _as_dict(json.loads(p.read_text("utf-8")))]
    full = [p for p in found if not p.stem.endswith("-quick")]
    if not found:
        sys.exit("no bench/results/*.json: run bench/run_all.py first")
    return (full or found)[-1]


def _as_dict(data: Any) -> dict[str, Any]:
    return data if isinstance(data, dict) else {}


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
                xerr=whiskers(f["signoff"]), color=OURS, capsize=2)  # fmt: skip
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
        handles=[Patch(color=OURS, label="signoff"), Patch(color=REF, label="reference")],
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
            Patch(color=OURS, label="cards and webhooks on"),
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", type=Path)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "img" / "benchmarks.png")
    args = parser.parse_args()
    source = args.results or newest()
    data = json.loads(source.read_text("utf-8"))
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
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)
    print(f"{source.name} -> {args.out}")


if __name__ == "__main__":
    main()
