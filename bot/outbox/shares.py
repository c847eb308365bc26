"""Fair shares of the outbox runner's slots, so one destination cannot stall everyone's.

The runner has `concurrency` slots for jobs in flight. Without shares, a hundred webhooks to
a receiver that hangs each hold a slot for the full timeout, and every other tenant's
webhooks and every chat card wait behind them. With shares:

- a destination host has at most `per_destination` jobs in flight, a tenant at most
  `per_tenant`, and one kind of job (webhooks, cards...) at most `kind_share` of the slots,
  so cards and webhooks never starve each other;
- a destination whose deliveries failed `failing_after` times in a row rests (backing off
  like a job does) and its jobs are not tried meanwhile.

A job over its share is not attempted yet: `OutboxRunner.run` keeps a few such jobs (still
leased to it) and starts them as slots free up, and puts the others back in the queue for a
moment (the time `admit` returns) without counting an attempt and without holding a slot, as
it does with every job of a destination that is resting.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from store.records import OutboxJob

if TYPE_CHECKING:
    from bot.outbox.runner import OutboxSettings

# How long a job over its share waits before it is looked at again.
WAIT = timedelta(seconds=1)


@dataclass
class _Rest:
    failures: int = 0
    until: datetime | None = None


class Shares:
    def __init__(self, settings: OutboxSettings, rest: Callable[[int], timedelta]) -> None:
        """`rest(n)`: how long a destination rests after its n-th failure past the limit
        (the runner's backoff schedule)."""
        self.settings = settings
        self._rest = rest
        self._in_flight: Counter[str] = Counter()
        self._rests: dict[str, _Rest] = {}

    def _limits(self, job: OutboxJob) -> list[tuple[str, int]]:
        s = self.settings
        keys = [(f"kind:{job.kind}", max(1, int(s.concurrency * s.kind_share)))]
        host = _host(job)
        if host is not None:
            keys.append((f"host:{host}", s.per_destination))
        tenant = job.payload.get("tenant")
        if isinstance(tenant, str):
            keys.append((f"tenant:{tenant}", s.per_tenant))
        return keys

    def admit(self, job: OutboxJob, now: datetime) -> datetime | None:
        """None if `job` may run now (its slots are taken: call `done` when it ends); else
        when to look at it again."""
        host = _host(job)
        rest = self._rests.get(host) if host is not None else None
        if rest is not None and rest.until is not None and now < rest.until:
            return rest.until
        limits = self._limits(job)
        if any(self._in_flight[key] >= limit for key, limit in limits):
            return now + WAIT
        for key, _ in limits:
            self._in_flight[key] += 1
        return None

    def resting(self, job: OutboxJob, now: datetime) -> bool:
        """Whether `job`'s destination is resting (rather than only busy) at `now`."""
        host = _host(job)
        rest = self._rests.get(host) if host is not None else None
        return rest is not None and rest.until is not None and now < rest.until

    def done(self, job: OutboxJob, ok: bool, now: datetime) -> None:
        """Give back `job`'s slots; count a failure or a success against its destination."""
        for key, _ in self._limits(job):
            self._in_flight[key] -= 1
            if self._in_flight[key] <= 0:
                del self._in_flight[key]
        host = _host(job)
        if host is None:
            return
        if ok:
            self._rests.pop(host, None)
            return
        rest = self._rests.setdefault(host, _Rest())
        rest.failures += 1
        if rest.failures >= self.settings.failing_after:
            rest.until = now + self._rest(rest.failures - self.settings.failing_after + 1)


def _host(job: OutboxJob) -> str | None:
    """The destination a job delivers to: host and port of its URL (two services on one
    machine are two destinations)."""
    url = job.payload.get("url")
    if not isinstance(url, str):
        return None
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if not host:
        return None
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return host
    return f"{host}:{port}"
