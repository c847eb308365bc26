"""Waits: an agent's GET held open until its requests leave the state it last saw.

`GET /v1/approvals/{id}?wait=30` (and the batch `?ids=...&wait=`) answers as soon as a
request is no longer in the state the caller saw (`seen`, pending by default), or with the
unchanged record when the wait runs out. An agent with no public URL for webhooks waits this
way instead of polling: one connection, answered within milliseconds of the decision.

What wakes a wait is the commit itself, never a timer per waiter:
- in this process, `Store` tells `ApprovalMoves` which approvals a committed transaction
  moved, and each waiter on them is woken;
- from other processes (`--workers`, another replica, the CLI), `Store.watch_approvals`:
  on PostgreSQL the moved ids arrive by LISTEN; on SQLite only "another connection
  committed" is known, and one read of every waited request's state finds who moved.
A woken waiter reads its own requests again and answers only if one of them really left the
state (a spurious wake, a rolled-back savepoint's id, costs one read). While nothing
commits, a wait costs no query: it is an event and a timer in the event loop.

Waits are bounded per process and per tenant (`[server] max_waits`,
`max_waits_per_tenant`): past either, `TooManyWaits` (429 with Retry-After). On shutdown
every wait answers at once with what it has, so its agent renews it on another process.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from bot.errors import TooManyWaits
from store.records import Approval
from store.repository import Store

log = logging.getLogger("signoff.waits")

# The longest one wait may be held (seconds): under the idle timeouts of common proxies and
# load balancers (60 s), so a wait is renewed rather than cut.
MAX_WAIT = 60.0
# Reads of every waited request's state on SQLite (`_check_all`) at most this often: another
# process's commits then cost waits a bounded amount of CPU, however many commit.
_CHECK_EVERY = 0.02


@dataclass(eq=False)
class _Waiter:
    tenant: str
    ids: tuple[str, ...]
    seen: str
    woken: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(frozen=True)
class WaitLimits:
    max_waits: int = 5000
    max_waits_per_tenant: int = 2000
    retry_after: int = 2


class Waits:
    """This process's open waits and what wakes them (module docstring)."""

    def __init__(self, store: Store, limits: WaitLimits | None = None) -> None:
        self.store = store
        self.limits = limits or WaitLimits()
        self._by_id: dict[str, set[_Waiter]] = {}
        self._per_tenant: Counter[str] = Counter()
        self._open = 0
        self._closing = False
        self._stop: asyncio.Event | None = None
        self._watch: asyncio.Task[None] | None = None
        self._check: asyncio.Task[None] | None = None
        self._check_again = False
        self._unsubscribe = store.moves.subscribe(self._moved)

    @property
    def open(self) -> int:
        """How many waits are held now."""
        return self._open

    async def hold(
        self, tenant: str, approval_ids: Sequence[str], seen: str, seconds: float
    ) -> list[Approval]:
        """`tenant`'s requests among `approval_ids` (newest first, as a page of the list),
        once one of them is not in state `seen` or `seconds` have passed (at once if one
        already is not)."""
        if not approval_ids:  # an empty page: nothing to wait on
            return []
        waiter = self._admit(tenant, tuple(dict.fromkeys(approval_ids)), seen)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        try:
            self._start_watching()
            while True:
                # Cleared before the read: a commit landing during it wakes the next wait.
                waiter.woken.clear()
                async with self.store.read() as tx:
                    found = await tx.page_approvals(
                        tenant, filters={}, before=None, limit=len(waiter.ids), ids=waiter.ids
                    )
                left = deadline - loop.time()
                if self._closing or not found or left <= 0 or _moved_on(found, seen):
                    return found
                try:
                    await asyncio.wait_for(waiter.woken.wait(), left)
                except TimeoutError:
                    pass
        finally:
            self._release(waiter)

    async def close(self) -> None:
        """Answer every open wait now and stop watching other processes' commits."""
        if self._closing:
            return
        self._closing = True
        for waiters in self._by_id.values():
            for waiter in waiters:
                waiter.woken.set()
        self._unsubscribe()
        if self._stop is not None:
            self._stop.set()
        for task in (self._watch, self._check):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    def _admit(self, tenant: str, ids: tuple[str, ...], seen: str) -> _Waiter:
        limits = self.limits
        if self._open >= limits.max_waits:
            raise TooManyWaits(
                f"this server holds {self._open} waits, its limit ([server] max_waits)",
                retry_after=limits.retry_after,
            )
        if self._per_tenant[tenant] >= limits.max_waits_per_tenant:
            raise TooManyWaits(
                f"tenant {tenant} holds {self._per_tenant[tenant]} waits on this server, its "
                "limit ([server] max_waits_per_tenant)",
                retry_after=limits.retry_after,
            )
        waiter = _Waiter(tenant, ids, seen)
        self._open += 1
        self._per_tenant[tenant] += 1
        for approval_id in ids:
            self._by_id.setdefault(approval_id, set()).add(waiter)
        return waiter

    def _release(self, waiter: _Waiter) -> None:
        self._open -= 1
        self._per_tenant[waiter.tenant] -= 1
        if not self._per_tenant[waiter.tenant]:
            del self._per_tenant[waiter.tenant]
        for approval_id in waiter.ids:
            waiters = self._by_id.get(approval_id)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._by_id[approval_id]

    def _moved(self, approval_ids: Collection[str] | None) -> None:
        """Approvals moved (their ids), or another connection committed something (None)."""
        if approval_ids is None:
            if self._by_id:
                self._check_all()
            return
        for approval_id in approval_ids:
            for waiter in self._by_id.get(approval_id, ()):
                waiter.woken.set()

    def _check_all(self) -> None:
        """Read every waited request's state once, and wake the waiters whose request moved
        (one such read at a time; commits meanwhile ask for one more after it)."""
        if self._check is not None and not self._check.done():
            self._check_again = True
            return
        self._check = asyncio.get_running_loop().create_task(self._check_states())

    async def _check_states(self) -> None:
        while True:
            self._check_again = False
            ids = list(self._by_id)
            try:
                async with self.store.read() as tx:
                    states = await tx.approval_states(ids)
            except Exception:
                log.exception("could not read the states of waited requests")
                states = {}
            for approval_id in ids:
                state = states.get(approval_id)
                for waiter in self._by_id.get(approval_id, ()):
                    if state != waiter.seen:
                        waiter.woken.set()
            if not self._check_again:
                return
            await asyncio.sleep(_CHECK_EVERY)

    def _start_watching(self) -> None:
        """Listen for other processes' commits from the first wait on (the listening
        connection or file watch is kept until `close`)."""
        if self._watch is not None or self._closing:
            return
        self._stop = asyncio.Event()
        self._watch = asyncio.get_running_loop().create_task(
            self.store.watch_approvals(self._moved, self._stop), name="waits-commits"
        )
        self._watch.add_done_callback(_log_failure)


def _moved_on(found: Sequence[Approval], seen: str) -> bool:
    return any(approval.state != seen for approval in found)


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("watching other processes' commits for waits stopped: %s", task.exception())
