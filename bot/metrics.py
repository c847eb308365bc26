"""Prometheus metrics for one process (`/metrics`).

Counters and histograms count what this process did (sum them across replicas); the gauges
describe the shared database and are refreshed from it on every scrape, so any replica
reports the same backlog. Two counters read the database too: requests made and requests
decided by any process (the CLI, another replica, a worker's sweeper), counted from the audit
trail since this process started, a few seconds behind (`SETTLE`); take them from one
replica, never summed. Each application gets its own registry, so several in one process
(tests) never collide.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from bot.model import State
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
# next scrape rather than missed.
SETTLE = timedelta(seconds=10)


class Metrics:
    def __init__(self, since: datetime | None = None) -> None:
        """`since`: the moment from which the database counters count (the process's start);
        without it, the first scrape."""
        self._counted_until = since
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

    async def refresh(self, store: Store, now: datetime) -> None:
        """Read the database-wide gauges (one grouped query each), and add what the audit
        trail recorded since the last scrape to the database counters (a range of its
        (type, at) index: the cost follows the events since then, not the whole trail)."""
        until = now - SETTLE
        since = self._counted_until if self._counted_until is not None else until
        # Taken before reading, so two scrapes at once never count one window twice.
        self._counted_until = max(since, until)
        try:
            async with store.read() as tx:
                pending = await tx.pending_summary()
                exhausted = await tx.past_last_escalation()
                jobs = await tx.outbox_summary()
                flow = await tx.dashboard_pending_flow([since, until]) if until > since else []
        except BaseException:
            if self._counted_until == max(since, until):
                self._counted_until = since  # the next scrape counts this window
            raise
        for made, decided in flow:
            self.recorded_requests.inc(made)
            self.recorded_decisions.inc(decided)
        self.pending.clear()
        self.oldest_pending.clear()
        for tenant, capability, count, oldest in pending:
            self.pending.labels(tenant, capability).set(count)
            self.oldest_pending.labels(tenant, capability).set(
                max((now - oldest).total_seconds(), 0.0)
            )
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
