"""Which Slack Homes are due for a publish, and publishing them in the background.

A card job, a notice or a press on the Home only says that something changed (`approval`,
`people`): it never waits for a Home. One task per Slack channel instance (per process)
finds who a changed request concerns, in one read for all the requests changed since it last
looked, and publishes each due person's Home, a few at a time:

- debounced: the changed requests are looked up together `_LOOK_AFTER` after the first of
  them (one read for a burst, not one per change), and a change waits `_SETTLE` more before
  its publish, so a burst of changes shares it;
- batched per person: one entry per person, however many changes; one publish per person
  at a time, the next at least `_INTERVAL` after the last began (Slack allows an app about
  100 `views.publish` a minute per workspace) and after a pause in proportion to its
  duration; a line for the top of the Home (a press's outcome) skips that wait;
- never lost: a change during a publish makes another one after it; a failed publish is
  retried, later and later (at most `_RETRY_MAX` apart, or when Slack's Retry-After says, as a
  `RetryLater`),
  until it succeeds or Slack says it never will (channels.slack.home decides which).

Memory stays bounded: one entry per person (the people a request can concern are the
directory's), and at most `_APPROVALS_MAX` changed requests not yet looked at; past that
they are forgotten for "everyone with a Slack account", which covers them all.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Iterable

from bot.errors import RetryLater

log = logging.getLogger("signoff.slack")

_LOOK_AFTER = 0.2  # seconds a changed request waits for others to be looked up with it
_SETTLE = 0.05  # seconds a change waits for the ones that come with it
_INTERVAL = 1.0  # at least this long between the starts of two publishes of one Home
_PAUSE = 4  # ... and after one, a pause of this many times its duration,
_PAUSE_MAX = 2.0  # at most this long: a Home takes a bounded share of the server
_CONCURRENT = 5  # publishes under way at once
_RETRY_FIRST = 1.0  # seconds before the first retry of a failed publish, doubled each time
_RETRY_MAX = 60.0
_APPROVALS_MAX = 5000  # changed requests not yet looked at, before "everyone" replaces them
_PEOPLE_MAX = 100_000  # people with a publish due (a directory has far fewer)


Publish = Callable[[str, "str | None"], Awaitable[None]]
"""Publish one person's Home (with a line at its top); raises to be retried."""
Concerned = Callable[[list[str]], Awaitable[set[str]]]
"""The Slack users whose Homes these requests' changes concern."""


class HomeRefresh:
    def __init__(
        self, publish: Publish, concerned: Concerned, everyone: Callable[[], set[str]]
    ) -> None:
        self._publish = publish
        self._concerned = concerned
        self._everyone = everyone
        self._approvals: dict[str, None] = {}  # changed since last looked at, in order
        self._look_at = math.inf  # loop time to look them up at
        self._all = False  # too many changed requests: everyone's Home is due
        self._looked_failed = -math.inf  # when looking them up last failed (retried a second on)
        self._due: dict[str, float] = {}  # user -> loop time their publish may start
        self._notes: dict[str, str] = {}  # user -> the line for the top of their Home
        self._next: dict[str, float] = {}  # user -> earliest start after their last publish
        self._backoff: dict[str, tuple[int, float]] = {}  # user -> failures, retry time
        self._flying: dict[str, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self._looked = asyncio.Event()  # set each time the task has looked at what is due
        self._task: asyncio.Task[None] | None = None

    # -- what callers say (never waits) ----------------------------------------------------

    def approval(self, approval_id: str) -> None:
        """`approval_id` changed: the Homes of everyone it concerns are due."""
        if not (self._approvals or self._all):
            self._look_at = asyncio.get_running_loop().time() + _LOOK_AFTER
        if not self._all:
            self._approvals[approval_id] = None
            if len(self._approvals) > _APPROVALS_MAX:
                self._approvals.clear()
                self._all = True
        self._poke()

    def people(self, users: Iterable[str], note: str | None = None) -> None:
        """These Slack users' Homes are due; `note`, a line at the top of each."""
        for user in users:
            self._mark(user, 0.0 if note is not None else _SETTLE, note)
        self._poke()

    @property
    def quiet(self) -> bool:
        """Nothing due, nothing under way (tests wait for it)."""
        return not (self._approvals or self._all or self._due or self._flying)

    async def settled(self) -> None:
        """Wait until every due Home is published (or given up)."""
        while not self.quiet:
            self._looked.clear()
            await self._looked.wait()

    async def close(self) -> None:
        """Stop (shutdown): what is due is published when the person next opens the Home."""
        tasks = [t for t in (self._task, *self._flying.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = None

    # -- the background task -------------------------------------------------------------

    def _mark(self, user: str, delay: float, note: str | None) -> None:
        if user not in self._due and len(self._due) >= _PEOPLE_MAX:
            log.warning("over %d Slack Homes due: %s's left until they open it", _PEOPLE_MAX, user)
            return
        at = asyncio.get_running_loop().time() + delay
        self._due[user] = min(self._due.get(user, at), at)  # a later change does not delay it
        if note is not None:
            self._notes[user] = note

    def _poke(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        self._wake.set()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._wake.clear()
            now = loop.time()
            soonest = math.inf
            if self._approvals or self._all:
                if now >= self._look_at and now - self._looked_failed >= 1.0:
                    await self._look_up()
                    now = loop.time()
                if self._approvals or self._all:
                    soonest = max(self._look_at, self._looked_failed + 1.0)
            for user, at in list(self._due.items()):
                if user in self._flying:
                    continue
                at = max(at, self._backoff.get(user, (0, 0.0))[1])
                if user not in self._notes:
                    at = max(at, self._next.get(user, 0.0))
                if at > now:
                    soonest = min(soonest, at)
                elif len(self._flying) < _CONCURRENT:
                    del self._due[user]
                    self._flying[user] = loop.create_task(self._one(user))
                # else: ready, waiting for a slot; a publish ending wakes this loop
            self._forget_old(now)
            self._looked.set()
            try:
                async with asyncio.timeout(None if soonest == math.inf else soonest - now):
                    await self._wake.wait()
            except TimeoutError:
                pass

    async def _look_up(self) -> None:
        ids, everyone = list(self._approvals), self._all
        self._approvals.clear()
        self._all = False
        try:
            users = self._everyone() if everyone else await self._concerned(ids)
        except Exception:
            log.exception("could not find whose Slack Homes %d requests concern", len(ids))
            self._looked_failed = asyncio.get_running_loop().time()
            for approval_id in ids:  # asked again, after what came meanwhile
                self.approval(approval_id)
            self._all = self._all or everyone
            return
        for user in users:
            self._mark(user, _SETTLE, None)

    async def _one(self, user: str) -> None:
        loop = asyncio.get_running_loop()
        note = self._notes.pop(user, None)
        began = loop.time()
        try:
            await self._publish(user, note)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failures = self._backoff.get(user, (0, 0.0))[0] + 1
            wait = min(_RETRY_FIRST * 2 ** (failures - 1), _RETRY_MAX)
            if isinstance(exc, RetryLater) and exc.delay is not None:
                wait = max(exc.delay, 0.0)
            log.warning(
                "could not publish the Slack Home of %s (%s, failure %d): again in %.0fs",
                user,
                exc,
                failures,
                wait,
            )
            self._backoff[user] = (failures, loop.time() + wait)
            self._due.setdefault(user, 0.0)
            if note is not None:
                self._notes.setdefault(user, note)  # unless a newer line came meanwhile
        else:
            self._backoff.pop(user, None)
            ended = loop.time()
            self._next[user] = max(
                ended + min((ended - began) * _PAUSE, _PAUSE_MAX), began + _INTERVAL
            )
        finally:
            del self._flying[user]
            self._wake.set()

    def _forget_old(self, now: float) -> None:
        """Drop the pauses that have passed, so memory follows the people active lately."""
        if len(self._next) > 1000:
            self._next = {u: t for u, t in self._next.items() if t > now or u in self._flying}
