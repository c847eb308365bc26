"""The dashboard's two charts, laid out in SVG user units for the template to draw: pending
requests at the end of each of the last days, and how long decisions took (a histogram).
The figures come from channels/web/dashboard.py's bounded aggregates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta

# Upper edges (seconds) of the time-to-decide histogram's bins; the last bin is open-ended.
DECISION_BINS: tuple[tuple[int, str], ...] = (
    (60, "<1m"),
    (300, "1–5m"),
    (900, "5–15m"),
    (3600, "15m–1h"),
    (4 * 3600, "1–4h"),
    (86400, "4–24h"),
    (3 * 86400, "1–3d"),
)
LAST_BIN = ">3d"


@dataclass(frozen=True, slots=True)
class Tick:
    at: float
    label: str


@dataclass(frozen=True, slots=True)
class Mark:
    """One data point (a bar, or a point on a line) with where it is drawn."""

    label: str
    value: int
    x: float
    y: float
    width: float
    height: float
    text: str  # what a screen reader and the tooltip say


@dataclass(frozen=True, slots=True)
class Chart:
    """A chart laid out in SVG user units; the template only draws it."""

    id: str
    kind: str  # "line" or "bars"
    title: str
    description: str
    x_axis: str
    y_axis: str
    width: int
    height: int
    left: int
    top: int
    right: int
    bottom: int
    y_ticks: tuple[Tick, ...]
    x_ticks: tuple[Tick, ...]
    marks: tuple[Mark, ...]

    @property
    def polyline(self) -> str:
        return " ".join(f"{m.x:.1f},{m.y:.1f}" for m in self.marks)


# -- charts ----------------------------------------------------------------------------------

_W, _H = 640, 240
_LEFT, _RIGHT, _TOP, _BOTTOM = 68, 628, 16, 196


def _scale(top: int) -> tuple[int, tuple[int, ...]]:
    """A round maximum at or above `top` and the four steps up to it (1, 2, 5 x 10^k)."""
    raw = max(top, 1) / 4
    magnitude = 10 ** math.floor(math.log10(raw)) if raw >= 1 else 1
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    step = max(int(step), 1)
    return step * 4, tuple(step * i for i in range(5))


def _y(value: int, maximum: int) -> float:
    return _BOTTOM - (_BOTTOM - _TOP) * value / maximum


def _y_ticks(maximum: int, steps: Sequence[int]) -> tuple[Tick, ...]:
    return tuple(Tick(_y(v, maximum), f"{v:,}") for v in steps)


def pending_chart(
    flow: Sequence[tuple[int, int]], pending_now: int, first_day: date, today: date
) -> Chart:
    """Pending requests at the end of each of the last days (today: now), counted back from
    the pending count now: at the end of day d, pending = pending now - requests made since
    + requests that left pending since. `flow` is (made, left) for each day after the first,
    today last."""
    days = [first_day + timedelta(days=i) for i in range((today - first_day).days + 1)]
    counts = [pending_now]
    for made, left in reversed(flow[: len(days) - 1]):
        counts.append(counts[-1] - made + left)
    # Never below zero, even over a trail with events missing (`signoff audit verify`).
    counts = [max(count, 0) for count in reversed(counts)]
    maximum, steps = _scale(max(counts, default=0))
    span = (_RIGHT - _LEFT) / max(len(days) - 1, 1)
    marks = tuple(
        Mark(
            label=day.isoformat(),
            value=count,
            x=_LEFT + i * span,
            y=_y(count, maximum),
            width=0,
            height=0,
            text=f"{day:%a %d %b}{' (now)' if day == today else ''}: {count:,} pending",
        )
        for i, (day, count) in enumerate(zip(days, counts, strict=True))
    )
    x_ticks = tuple(
        Tick(_LEFT + i * span, f"{day:%d %b}") for i, day in enumerate(days) if i % 2 == 0
    )
    return Chart(
        id="chart-pending",
        kind="line",
        title=f"Pending requests, last {len(days)} days",
        description=(
            f"Requests waiting for a decision at the end of each day (UTC), from "
            f"{first_day:%d %b} to today; {pending_now:,} pending now, "
            f"most {max(counts, default=0):,}."
        ),
        x_axis="day (UTC)",
        y_axis="pending requests",
        width=_W,
        height=_H,
        left=_LEFT,
        top=_TOP,
        right=_RIGHT,
        bottom=_BOTTOM,
        y_ticks=_y_ticks(maximum, steps),
        x_ticks=x_ticks,
        marks=marks,
    )


def decision_chart(histogram: Sequence[int], days: int) -> Chart:
    """How long the decisions of the last days took, in bins from under a minute to over
    three days."""
    labels = [label for _, label in DECISION_BINS] + [LAST_BIN]
    counts = list(histogram) + [0] * (len(labels) - len(histogram))
    total = sum(counts)
    maximum, steps = _scale(max(counts, default=0))
    slot = (_RIGHT - _LEFT) / len(labels)
    bar = slot * 0.7
    marks = tuple(
        Mark(
            label=label,
            value=count,
            x=_LEFT + i * slot + (slot - bar) / 2,
            y=_y(count, maximum),
            width=bar,
            height=_BOTTOM - _y(count, maximum),
            text=f"{label}: {count:,} decision{'' if count == 1 else 's'}",
        )
        for i, (label, count) in enumerate(zip(labels, counts, strict=True))
    )
    median = _median_bin(counts, labels)
    return Chart(
        id="chart-decide",
        kind="bars",
        title=f"Time to decide, last {days} days",
        description=(
            f"{total:,} decision{'' if total == 1 else 's'} in the last {days} days, by how long "
            "the request waited for it"
            + (f"; the median is in the {median} bin." if median else ".")
        ),
        x_axis="time from request to decision",
        y_axis="decisions",
        width=_W,
        height=_H,
        left=_LEFT,
        top=_TOP,
        right=_RIGHT,
        bottom=_BOTTOM,
        y_ticks=_y_ticks(maximum, steps),
        x_ticks=tuple(Tick(_LEFT + i * slot + slot / 2, label) for i, label in enumerate(labels)),
        marks=marks,
    )


def _median_bin(counts: Sequence[int], labels: Sequence[str]) -> str | None:
    total = sum(counts)
    if not total:
        return None
    seen = 0
    for count, label in zip(counts, labels, strict=True):
        seen += count
        if seen * 2 >= total:
            return label
    return labels[-1]
