"""Fair shares of the outbox runner's slots, so one destination cannot stall everyone's.

The runner has `concurrency` slots for jobs in flight. Without shares, a hundred webhooks to
a receiver that hangs each hold a slot for the full timeout, and every other tenant's
webhooks and every chat card wait behind them. With shares:

- a destination host (host and port) has at most `per_destination` jobs in flight, a tenant
  at most `per_tenant`, and one kind of job (webhooks, cards...) at most `kind_share` of the
  slots, so cards and webhooks never starve each other;
- an endpoint (host, port and path) whose last attempt timed out is probed: one job at a time
  until it answers again, and all such endpoints of a host together hold at most
  `per_destination - 1` of the host's slots. So a hundred callbacks to a path that hangs
  cost that path one slot and one timeout at a time, and webhooks to another path of the same
  host keep going out beside them (docs/architecture.md, "The outbox");
- an endpoint whose deliveries failed `failing_after` times in a row rests (backing off like
  a job does) and its jobs are not tried meanwhile. Rests are per endpoint, not per host: a
  path that keeps failing does not hold back a healthy path of the same host.

A job over its share is not attempted yet: `OutboxRunner.run` keeps a few such jobs (still
leased to it) and starts them as slots free up, and puts the others back in the queue for a
moment (the time `admit` returns) without counting an attempt and without holding a slot, as
it does with every job of an endpoint that is resting or being probed (`waits_in_queue`).
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import urlsplit

from store.records import OutboxJob

if TYPE_CHECKING:
    from bot.outbox.settings import OutboxSettings

log = logging.getLogger("signoff.outbox")

# How long a job over its share waits before it is looked at again.
WAIT = timedelta(seconds=1)
# Endpoints remembered (resting or probed); callback URLs may name a new path per request,
# so the oldest are forgotten beyond this (forgetting costs at most one more timeout).
_REMEMBERED = 10_000


class Destination(NamedTuple):
    host: str  # "host:port": the share of slots
    endpoint: str  # "host:port/path": what is probed and rests


@dataclass
class _Rest:
    failures: int = 0
    until: datetime | None = None


class _Recent(OrderedDict[str, "_Rest | None"]):
    """Endpoints with something to remember, the least recently touched forgotten first."""

    def touch(self, key: str, value: _Rest | None) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > _REMEMBERED:
            self.popitem(last=False)


class Shares:
    def __init__(self, settings: OutboxSettings, rest: Callable[[int], timedelta]) -> None:
        """`rest(n)`: how long an endpoint rests after its n-th failure past the limit (the
        runner's backoff schedule)."""
        self.settings = settings
        self._rest = rest
        self._in_flight: Counter[str] = Counter()
        self._taken: dict[int, list[str]] = {}  # the keys each job in flight counts against
        self._rests = _Recent()
        self._probing = _Recent()  # endpoints whose last attempt timed out (value unused)

    def _limits(self, job: OutboxJob) -> list[tuple[str, int]]:
        s = self.settings
        keys = [(f"kind:{job.kind}", self._kind_limit())]
        where = destination(job)
        if where is not None:
            keys.append((f"host:{where.host}", s.per_destination))
            if where.endpoint in self._probing:
                keys.append((f"probe:{where.endpoint}", 1))
                keys.append((f"probing:{where.host}", max(1, s.per_destination - 1)))
        tenant = job.payload.get("tenant")
        if isinstance(tenant, str):
            keys.append((f"tenant:{tenant}", s.per_tenant))
        return keys

    def _kind_limit(self) -> int:
        return max(1, int(self.settings.concurrency * self.settings.kind_share))

    def kind_full(self, kind: str) -> bool:
        """Whether jobs of `kind` hold their whole share of the slots: more of them claimed
        now could only be parked or put back to wait (a second each, behind newer jobs)."""
        return self._in_flight[f"kind:{kind}"] >= self._kind_limit()

    def admit(self, job: OutboxJob, now: datetime) -> datetime | None:
        """None if `job` may run now (its slots are taken: call `done` when it ends); else
        when to look at it again."""
        where = destination(job)
        rest = self._rests.get(where.endpoint) if where is not None else None
        if rest is not None and rest.until is not None and now < rest.until:
            return rest.until
        limits = self._limits(job)
        over = [key for key, limit in limits if self._in_flight[key] >= limit]
        if over:
            # A probe lasts up to a timeout: its endpoint's other jobs wait about as long.
            probed = any(key.startswith(("probe:", "probing:")) for key in over)
            return now + (
                max(WAIT, timedelta(seconds=self.settings.probe_wait)) if probed else WAIT
            )
        self._taken[job.id] = [key for key, _ in limits]
        for key, _ in limits:
            self._in_flight[key] += 1
        return None

    def waits_in_queue(self, job: OutboxJob, now: datetime) -> bool:
        """Whether `job`'s endpoint is resting at `now` or being probed: its jobs then wait in
        the queue, not parked in the runner's memory (they would only wait there longer)."""
        where = destination(job)
        if where is None:
            return False
        rest = self._rests.get(where.endpoint)
        resting = rest is not None and rest.until is not None and now < rest.until
        return resting or where.endpoint in self._probing

    def probing(self, job: OutboxJob) -> bool:
        """Whether `job`'s endpoint is being probed (its last attempt timed out)."""
        where = destination(job)
        return where is not None and where.endpoint in self._probing

    def done(self, job: OutboxJob, ok: bool, now: datetime, *, timed_out: bool = False) -> None:
        """Give back the slots `admit` took for `job`; count its outcome against its endpoint:
        a timeout starts probing it, any answer ends that, a failure counts towards a rest
        and a success ends one."""
        for key in self._taken.pop(job.id, ()):
            self._in_flight[key] -= 1
            if self._in_flight[key] <= 0:
                del self._in_flight[key]
        where = destination(job)
        if where is None:
            return
        if timed_out:
            if where.endpoint not in self._probing:
                log.warning(
                    "outbox: %s timed out; it gets one job at a time until it answers, and its "
                    "host's other endpoints keep the rest of its slots",
                    where.endpoint,
                )
            self._probing.touch(where.endpoint, None)
        else:
            self._probing.pop(where.endpoint, None)
        if ok:
            self._rests.pop(where.endpoint, None)
            return
        rest = self._rests.get(where.endpoint) or _Rest()
        self._rests.touch(where.endpoint, rest)
        rest.failures += 1
        if rest.failures >= self.settings.failing_after:
            rest.until = now + self._rest(rest.failures - self.settings.failing_after + 1)


def destination(job: OutboxJob) -> Destination | None:
    """Where a job delivers to: its URL's host and port (two services on one machine are two
    hosts), and that with the path (the query left out: one endpoint, whatever it is asked)."""
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
        port = None
    where = host if port is None else f"{host}:{port}"
    return Destination(where, where + (parts.path or "/"))
