"""The figures of bench/effects_latency.py: quantiles, one line per path, and the markdown
table of several runs (each cell the median of the runs, then their min-max)."""

from __future__ import annotations

import statistics
from typing import Any

EFFECTS = ("slack", "telegram", "webhook")  # what each decision must cause


def median(values: Any) -> float:
    return statistics.median(list(values))


def summary(values: list[float]) -> dict[str, float]:
    """p50, p99 (inclusive: never beyond the largest) and max; NaN with fewer than two."""
    if len(values) < 2:
        return {"p50_ms": float("nan"), "p99_ms": float("nan"), "max_ms": float("nan")}
    p99 = statistics.quantiles(values, n=100, method="inclusive")[98]
    return {"p50_ms": statistics.median(values), "p99_ms": p99, "max_ms": max(values)}


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
