"""Humans first: the admission gate for agent creates, and the process's event-loop lateness
probe that the gate and the outbox both read.

A create (`POST /v1/approvals`) is served while fewer than `max_in_flight` creates are being
served; beyond that it waits its turn in a queue of at most `max_waiting`. It is refused
(`Overloaded`: 429 with Retry-After), before its body is read and so having written nothing,
when that queue is full, or when the event loop runs more than `lag_limit` late while a
create is already being served: a late loop means requests are waiting for it (clicks,
claims, pages), and another create would only make them wait longer. With no create in
flight one is always served, whatever the lateness: creates slow down under load, they never
stop. An agent asks again after Retry-After; creates are idempotent by (run_id, hash), so
asking again is safe. Nothing else is gated: claims, completes, reads and every person's
request are always served.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import ClassVar, Protocol

from bot.errors import Overloaded
from bot.metrics import Metrics

log = logging.getLogger("signoff.admission")

# At most one log line per this many seconds about refused creates: an operator needs to know
# that and why creates are refused, not one line per refusal while agents retry.
LOG_EVERY = 30.0


class Lateness(Protocol):
    """How late the event loop runs, in seconds (LoopLag, or a fixed figure in tests)."""

    @property
    def late(self) -> float: ...


class LoopLag:
    """How late this event loop runs a callback that is due: a probe every `every` seconds,
    smoothed. Late means the loop has more to do than it can do at once (requests wait).

    One per event loop, shared by whoever asks (`acquire`), so the outbox's throttle and the
    create gate read the same figure and the loop is probed once; it stops when the last
    user `release`s it."""

    _probes: ClassVar[weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopLag]] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(
        self, loop: asyncio.AbstractEventLoop, every: float = 0.01, idle_every: float = 0.1
    ) -> None:
        self.every = every
        self.idle_every = idle_every
        self.late = 0.0
        self._users = 0
        self._loop = loop
        self._quiet = 0  # probes in a row that found the loop on time
        self._handle = loop.call_later(every, self._probe, loop.time() + every)

    @classmethod
    def acquire(cls) -> LoopLag:
        """The running loop's probe, started by its first user."""
        loop = asyncio.get_running_loop()
        probe = cls._probes.get(loop)
        if probe is None:
            probe = cls._probes[loop] = cls(loop)
        probe._users += 1
        return probe

    def release(self) -> None:
        self._users -= 1
        if self._users <= 0:
            self._handle.cancel()
            if self._probes.get(self._loop) is self:
                del self._probes[self._loop]

    def _probe(self, due: float) -> None:
        now = self._loop.time()
        late = max(0.0, now - due)
        self.late = 0.7 * self.late + 0.3 * late
        # A probe costs about 0.1 ms of CPU: every 10 ms for ever kept an idle server at 9 ms
        # a second. After a second on time it probes every 100 ms, and at once again every
        # 10 ms when a probe comes late, so lateness shows within about 0.1 s of starting.
        self._quiet = self._quiet + 1 if late < 0.002 else 0
        every = self.idle_every if self._quiet >= 100 else self.every
        self._handle = self._loop.call_later(every, self._probe, now + every)


# Creates in flight when `[server] max_creates_in_flight` is unset. Measured (bench overload,
# 2 cores): on SQLite, whose one writer serves a create at a time, 2 took as many creates per
# second as 4 with people's clicks answered sooner; PostgreSQL took more with each doubling
# up to 8 (its round trips overlap).
IN_FLIGHT_SQLITE = 2
IN_FLIGHT_POSTGRESQL = 8


def in_flight_for(configured: int | None, sqlite: bool) -> int:
    """`[server] max_creates_in_flight`, or the default for the database."""
    if configured is not None:
        return configured
    return IN_FLIGHT_SQLITE if sqlite else IN_FLIGHT_POSTGRESQL


@dataclass(frozen=True)
class AdmissionSettings:
    """`[server] max_creates_in_flight`, `max_creates_waiting`, `create_lag_limit`,
    `overload_retry_after`."""

    max_in_flight: int = IN_FLIGHT_SQLITE
    max_waiting: int = 100
    lag_limit: float = 0.05
    retry_after: int = 1


class Admission:
    """The create gate of one process (see the module's docstring). `lag` is the loop's
    lateness; without one, the process's shared LoopLag while the gate is `start`ed."""

    def __init__(
        self,
        settings: AdmissionSettings,
        metrics: Metrics | None = None,
        lag: Lateness | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.lag = lag
        self.in_flight = 0
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()
        self._monotonic = monotonic
        self._probe: LoopLag | None = None
        self._logged_at: float | None = None
        self._unlogged = 0

    def start(self) -> None:
        """Read the process's loop probe (call inside the running loop)."""
        if self.lag is None:
            self._probe = LoopLag.acquire()
            self.lag = self._probe

    def stop(self) -> None:
        if self._probe is not None:
            self._probe.release()
            if self.lag is self._probe:
                self.lag = None
            self._probe = None

    @property
    def waiting(self) -> int:
        """Creates waiting for a slot."""
        return len(self._waiting)

    @asynccontextmanager
    async def admit(self) -> AsyncIterator[None]:
        """Hold one of the create slots for the block, after waiting in the queue if all are
        taken; or raise Overloaded at once, holding nothing (see the module's docstring)."""
        reason = self._refusal()
        if reason is not None:
            self._refused(reason)
            raise Overloaded(
                "the server is busy serving people; retry this create after the number of "
                "seconds in Retry-After (it is safe to repeat: the same run_id and call "
                "return the same approval)",
                retry_after=self.settings.retry_after,
            )
        if self.in_flight < self.settings.max_in_flight:
            self.in_flight += 1
        else:
            turn = asyncio.get_running_loop().create_future()
            self._waiting.append(turn)
            try:
                await turn  # a create that ends hands its slot to the first in the queue
            except asyncio.CancelledError:
                if turn.done() and not turn.cancelled():
                    self._release()  # handed a slot just as the caller went away
                else:
                    self._waiting.remove(turn)
                raise
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        while self._waiting:
            turn = self._waiting.popleft()
            if not turn.done():
                turn.set_result(None)  # the slot passes on: in_flight stays as it is
                return
        self.in_flight -= 1

    def _refusal(self) -> str | None:
        if (
            self.in_flight >= self.settings.max_in_flight
            and len(self._waiting) >= self.settings.max_waiting
        ):
            return "queue_full"
        # One create is always let through, so creates slow down under load, never stop.
        late = self.lag.late if self.lag is not None else 0.0
        if self.in_flight > 0 and late > self.settings.lag_limit:
            return "lag"
        return None

    def _refused(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.creates_refused.labels(reason).inc()
        self._unlogged += 1
        now = self._monotonic()
        if self._logged_at is not None and now - self._logged_at < LOG_EVERY:
            return
        late = self.lag.late if self.lag is not None else 0.0
        log.warning(
            "refusing agent creates with 429 (Retry-After %d s): %d refused since the last "
            "such line; %d creates in flight (limit %d, [server] max_creates_in_flight) and "
            "%d waiting (limit %d, max_creates_waiting), event loop %.0f ms late (limit "
            "%.0f ms, [server] create_lag_limit). People's requests are still served. If this "
            "lasts, add capacity (workers, replicas, PostgreSQL) or slow the agents down; see "
            "docs/operations.md, 'Overload'",
            self.settings.retry_after,
            self._unlogged,
            self.in_flight,
            self.settings.max_in_flight,
            len(self._waiting),
            self.settings.max_waiting,
            late * 1000,
            self.settings.lag_limit * 1000,
        )
        self._logged_at = now
        self._unlogged = 0
