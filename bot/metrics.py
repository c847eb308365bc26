"""Prometheus metrics for one process (`/metrics`).

Counters and histograms count what this process did (sum them across replicas); the gauges
describe the shared database, so any replica (and any worker of `serve --workers`) reports
the same backlog. Two counters read the database too: requests made and requests decided by
any process (the CLI, another replica, a worker's sweeper), counted from the audit trail
since this process started, a few seconds behind (`SETTLE`); take them from one replica,
never summed. Each application gets its own registry, so several in one process (tests)
never collide.

A scrape never waits on the database: while a process is scraped, a background task reads
the database figures every `[metrics] refresh` seconds (grouped counts from indexes, a few
rows whatever the backlog), and a scrape answers at once from the last read. Only the first
scrape of a process, or the first after it went unscraped for `IDLE_REFRESHES` intervals
(the task then stops), waits for a read. The age of the oldest pending request is computed
at the scrape from the oldest creation time read, so it is never stale.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime, timedelta

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from bot.clock import Clock
from bot.model import State
from bot.standing import GRANT_VIA
from bot.transitions import Transition
from store.repository import Store

CONTENT_TYPE = CONTENT_TYPE_LATEST
# A human decision takes minutes to days: buckets from a minute to a week.
_LATENCY_BUCKETS = (60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 86400, 3 * 86400, 7 * 86400)
# Ways a request leaves pending. (An approved grant that later expires or is withdrawn was
# already counted when it was approved.)
_DECISIONS = frozenset(
    {State.APPROVED, State.REJECTED, State.CANCELLED, State.EXPIRED, State.SUPERSEDED}
)

# The audit trail is counted up to this long before the scrape: an event is timestamped when
# its transaction starts and visible when it commits, so the newest moments are left for the
# next read rather than missed.
SETTLE = timedelta(seconds=10)
# Refreshes in a row with no scrape after which the background reads stop (5 minutes at the
# default interval): a process nobody monitors does not read the database for nothing.
IDLE_REFRESHES = 60

log = logging.getLogger(__name__)


class Metrics:
    def __init__(self, since: datetime | None = None, refresh: float = 5.0) -> None:
        """`since`: the moment from which the database counters count (the process's start);
        without it, the first scrape. `refresh`: seconds between background reads of the
        database figures while the process is scraped."""
        self._counted_until = since
        self.refresh_interval = refresh
        self._oldest: dict[tuple[str, str], datetime] = {}
        self._refresher: asyncio.Task[None] | None = None
        self._read = asyncio.Event()  # set once the refresher has read (or failed to)
        self._scraped = 0  # refreshes since the last scrape
        self.registry = CollectorRegistry()
        r = self.registry
        self.transitions = Counter(
            "signoff_transitions", "State changes made by this process", ["event"], registry=r
        )
        self.decisions = Counter(
            "signoff_decisions",
            "Requests leaving pending, by outcome (approved, rejected, cancelled, expired, "
            "superseded)",
            ["outcome"],
            registry=r,
        )
        self.decision_latency = Histogram(
            "signoff_decision_latency_seconds",
            "Time from request to decision",
            ["outcome"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.grant_approvals = Counter(
            "signoff_grant_approvals",
            "Approvals that gave a standing grant (given) and requests a standing grant "
            "approved at once (used), by tenant",
            ["tenant", "kind"],
            registry=r,
        )
        self.outbox_jobs = Counter(
            "signoff_outbox_jobs",
            "Outbox job attempts by kind and result (done; skipped: a chat surface this "
            "deployment does not run; retry; rate_limited: waiting as asked, the attempt not "
            "counted; dead; deferred; lost_lease)",
            ["kind", "result"],
            registry=r,
        )
        self.outbox_died = Counter(
            "signoff_outbox_dead",
            "Outbox jobs this process gave up on, by kind and reason (the platform's error code, "
            "such as channel_not_found or bot_blocked, or max_attempts)",
            ["kind", "reason"],
            registry=r,
        )
        self.recorded_requests = Counter(
            "signoff_recorded_requests",
            "Requests made by any process, read from the audit trail (since this process "
            "started; do not sum across replicas)",
            registry=r,
        )
        self.recorded_decisions = Counter(
            "signoff_recorded_decisions",
            "Requests that left pending (approved, rejected, expired, cancelled, superseded) "
            "by any process, the CLI included, read from the audit trail (since this process "
            "started; do not sum across replicas)",
            registry=r,
        )
        self.creates_refused = Counter(
            "signoff_creates_refused",
            "Agent creates this process answered 429 (Retry-After) to keep people's requests "
            "fast, by reason (queue_full: [server] max_creates_in_flight creates were being "
            "served and max_creates_waiting waited; lag: the event loop ran later than "
            "[server] create_lag_limit)",
            ["reason"],
            registry=r,
        )
        self.webhook_failures = Counter(
            "signoff_webhook_failures",
            "Webhook delivery attempts that did not get a 2xx",
            ["tenant"],
            registry=r,
        )
        self.pending = Gauge(
            "signoff_pending_approvals",
            "Pending approvals in the database",
            ["tenant", "capability"],
            registry=r,
        )
        self.oldest_pending = Gauge(
            "signoff_oldest_pending_age_seconds",
            "Age of the oldest pending approval",
            ["tenant", "capability"],
            registry=r,
        )
        self.past_last_escalation = Gauge(
            "signoff_pending_past_last_escalation",
            "Pending approvals that went through their whole escalation chain unanswered",
            ["tenant"],
            registry=r,
        )
        self.outbox_backlog = Gauge(
            "signoff_outbox_backlog", "Outbox jobs waiting to run", ["kind"], registry=r
        )
        self.outbox_dead = Gauge(
            "signoff_outbox_dead_jobs",
            "Outbox jobs that used up their attempts (`signoff outbox list --dead`)",
            ["kind"],
            registry=r,
        )

    def transitioned(self, result: Transition) -> None:
        """Count a committed transition; decisions also feed the latency histogram."""
        approval, event = result.approval, result.event
        self.transitions.labels(event.type).inc()
        if result.before == State.PENDING and approval.state in _DECISIONS:
            self.decisions.labels(approval.state).inc()
            latency = (event.at - approval.created_at).total_seconds()
            self.decision_latency.labels(approval.state).observe(max(latency, 0.0))
        if event.type == State.APPROVED and (event.data or {}).get("standing_grant"):
            used = event.actor.startswith(f"{GRANT_VIA}:")
            self.grant_approvals.labels(approval.tenant, "used" if used else "given").inc()

    async def scrape(self, store: Store, clock: Clock) -> bytes:
        """The page for one scrape: the figures of the last background read, the oldest
        pending ages as of now. Waits only when no read has completed yet (the first
        scrape, or the first after the refresher stopped for want of scrapes)."""
        self._scraped = 0
        if self._refresher is None or self._refresher.done():
            self._read.clear()
            self._refresher = asyncio.create_task(self._keep_fresh(store, clock))
        if not self._read.is_set():
            await self._read.wait()
        self._age_oldest(clock.now())
        return self.render()

    async def close(self) -> None:
        """Stop the background reads (the application is shutting down)."""
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher
            self._refresher = None

    async def _keep_fresh(self, store: Store, clock: Clock) -> None:
        try:
            while self._scraped < IDLE_REFRESHES:
                self._scraped += 1
                try:
                    await self.refresh(store, clock.now())
                except Exception:
                    log.exception("metrics: could not read the database gauges")
                self._read.set()  # a failed read answers with the figures it had
                await asyncio.sleep(self.refresh_interval)
        finally:
            self._read.clear()

    def _age_oldest(self, now: datetime) -> None:
        for (tenant, capability), oldest in self._oldest.items():
            self.oldest_pending.labels(tenant, capability).set(
                max((now - oldest).total_seconds(), 0.0)
            )

    async def refresh(self, store: Store, now: datetime) -> None:
        """Read the database-wide gauges (one grouped query each), and add what the audit
        trail recorded since the last read to the database counters (a range of its
        (type, at) index: the cost follows the events since then, not the whole trail)."""
        until = now - SETTLE
        since = self._counted_until if self._counted_until is not None else until
        # Taken before reading, so two reads at once never count one window twice.
        self._counted_until = max(since, until)
        try:
            async with store.read() as tx:
                pending = await tx.pending_summary()
                exhausted = await tx.past_last_escalation()
                jobs = await tx.outbox_summary()
                flow = await tx.dashboard_pending_flow([since, until]) if until > since else []
        except BaseException:
            if self._counted_until == max(since, until):
                self._counted_until = since  # the next read counts this window
            raise
        for made, decided in flow:
            self.recorded_requests.inc(made)
            self.recorded_decisions.inc(decided)
        self.pending.clear()
        self.oldest_pending.clear()
        self._oldest = {}
        for tenant, capability, count, oldest in pending:
            self.pending.labels(tenant, capability).set(count)
            self._oldest[(tenant, capability)] = oldest
        self._age_oldest(now)
        self.past_last_escalation.clear()
        for tenant, count in exhausted:
            self.past_last_escalation.labels(tenant).set(count)
        self.outbox_backlog.clear()
        self.outbox_dead.clear()
        for kind, state, count in jobs:
            if state == "queued":
                self.outbox_backlog.labels(kind).set(count)
            elif state == "dead":
                self.outbox_dead.labels(kind).set(count)

    def render(self) -> bytes:
        return generate_latest(self.registry)
