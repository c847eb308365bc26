"""Time as a dependency: the Operator, the sweeper and intake read the clock they are given.

Every datetime in signoff is timezone-aware UTC. Tests move a FakeClock days forward instead
of sleeping.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol


def utc_iso(when: datetime) -> str:
    """The one text form of a time in signoff's output and hashed data:
    2026-01-05T09:00:00.000000Z (fixed width, so a hash never depends on how it was printed)."""
    when = when.astimezone(UTC)
    if when.year < 1000:  # where strftime's %Y and isoformat's year differ: keep strftime's
        return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    # The same text as the strftime above, in two thirds of its time (a create writes several).
    return when.isoformat(timespec="microseconds")[:-6] + "Z"


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...


class SystemClock:
    """The wall clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class FakeClock:
    """A clock that only moves when told to."""

    def __init__(self, start: datetime | None = None) -> None:
        start = start or datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
        if start.tzinfo is None:
            raise ValueError("FakeClock needs a timezone-aware start")
        self._now = start.astimezone(UTC)

    def now(self) -> datetime:
        return self._now

    def advance(self, delta: timedelta | None = None, **kwargs: float) -> datetime:
        """Move forward by `delta` or by timedelta keyword arguments (days=3, hours=1)."""
        step = delta if delta is not None else timedelta(**kwargs)
        if step < timedelta(0):
            raise ValueError("FakeClock does not run backwards")
        self._now += step
        return self._now

    def set(self, when: datetime) -> None:
        if when.tzinfo is None:
            raise ValueError("FakeClock needs a timezone-aware time")
        self._now = when.astimezone(UTC)
