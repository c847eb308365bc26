"""Prometheus metrics for one process (`/metrics`).

Counters and histograms count what this process did (sum them across replicas); the gauges
describe the shared database and are refreshed from it on every scrape, so any replica
reports the same backlog. Each application gets its own registry, so several in one process
(tests) never collide.
"""

from __future__ import annotations

from datetime import datetime

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


class Metrics:
    def __init__(self) -> None:
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
            "Outbox job attempts by kind and result (done, retry, dead)",
            ["kind", "result"],
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
        """Read the database-wide gauges (one grouped query each)."""
        async with store.read() as tx:
            pending = await tx.pending_summary()
            exhausted = await tx.past_last_escalation()
            jobs = await tx.outbox_summary()
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
