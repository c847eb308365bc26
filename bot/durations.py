"""Durations as people write them in config and requests: "15m", "72h", "3d", "1d12h"; and
moments as people type them for a delegation window: "2026-12-24", "2026-12-24T18:00",
or a duration from now ("5d")."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
# Far beyond any sensible TTL, and well inside what datetime arithmetic can represent.
MAX_SECONDS = 100 * 365 * 86400
# ASCII digits only: "５m" or "٣h" would otherwise pass as durations (int() reads them).
_PART = re.compile(r"([0-9]+)([smhdw])")
_WHOLE = re.compile(r"(?:[0-9]+[smhdw])+")


def parse_duration(text: str) -> timedelta:
    """Parse "90s", "15m", "72h", "3d", "2w" or combinations like "1d12h"; ValueError otherwise."""
    if not isinstance(text, str) or not _WHOLE.fullmatch(text.strip()):
        raise ValueError(
            f"invalid duration {text!r}: a number and a unit (s, m, h, d, w), e.g. '72h' or '3d'"
        )
    seconds = sum(int(n) * _UNITS[u] for n, u in _PART.findall(text.strip()))
    if seconds <= 0:
        raise ValueError(f"invalid duration {text!r}: must be longer than zero")
    if seconds > MAX_SECONDS:
        raise ValueError(f"invalid duration {text!r}: longer than 100 years")
    return timedelta(seconds=seconds)


def format_duration(delta: timedelta) -> str:
    """Compact human form: "2 d 4 h", "3 h 5 m", "45 s"."""
    total = max(int(delta.total_seconds()), 0)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h" if hours else f"{days} d"
    if hours:
        return f"{hours} h {minutes} m" if minutes else f"{hours} h"
    if minutes:
        return f"{minutes} m"
    return f"{seconds} s"


def duration_text(delta: timedelta) -> str:
    """The form parse_duration reads back ("8h", "1d12h", "90s"): for values a form or a
    button carries."""
    rest = max(int(delta.total_seconds()), 1)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def parse_moment(text: str, now: datetime) -> datetime:
    """A point in time: an ISO date (its midnight, UTC), an ISO date and time (UTC unless it
    names an offset), or a duration counted from `now`. ValueError otherwise."""
    text = text.strip()
    if _WHOLE.fullmatch(text):
        return now + parse_duration(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"invalid time {text!r}: a date (2026-12-24), a date and time "
            "(2026-12-24T18:00, UTC unless an offset is given) or a duration from now (5d)"
        ) from None
    try:
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except OverflowError:  # an offset that moves it out of datetime's range
        raise ValueError(f"invalid time {text!r}: out of range") from None
