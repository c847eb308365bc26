"""The outbox runner's settings (`[outbox]` in the config), and the backoff between attempts.

Apart from bot.outbox.runner so that what the runner is built from (its fair shares,
bot.outbox.shares) can read them without importing the runner.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True)
class OutboxSettings:
    lease: timedelta = timedelta(seconds=60)
    max_attempts: int = 10
    backoff_base: timedelta = timedelta(seconds=2)
    backoff_max: timedelta = timedelta(hours=1)
    batch: int = 20
    # Jobs in flight at once per runner (each a webhook POST or a chat API call).
    concurrency: int = 32
    # While the event loop runs late by more than `busy_lag` seconds (requests are waiting
    # for it), at most `busy_concurrency` jobs are in flight: a burst of card updates waits
    # for the clicks, not the other way round.
    busy_lag: float = 0.01
    busy_concurrency: int = 4
    poll_interval: float = 1.0
    # Done jobs are kept this long (to answer "was it sent?"), then deleted in batches.
    keep_done: timedelta = timedelta(days=7)
    # Fair shares of the slots (bot.outbox.shares): in flight at once per destination host
    # and per tenant, the share of the slots one kind of job may take, and how many failures
    # in a row make a destination rest.
    per_destination: int = 16
    per_tenant: int = 16
    kind_share: float = 0.75
    failing_after: int = 3
    # Seconds jobs to an endpoint being probed (its last attempt timed out) wait in the queue
    # between looks: about one attempt's timeout (`[outbox] webhook_timeout`).
    probe_wait: float = 10.0
    # A rate-limited job (RetryLater with a delay) waits without using up an attempt while it
    # is younger than this; after it, each wait counts as an attempt.
    rate_limited_for: timedelta = timedelta(hours=24)
    # Outcomes are settled together: the first to end waits this long (seconds) for others,
    # then all of them (up to `batch`) are written in one transaction.
    settle_window: float = 0.005
    # ... and this long while the event loop runs late by more than `busy_lag`: each settle
    # is a write transaction, and on SQLite another process's click waits for the lock
    # while this loop, busy, takes its time to finish one (fewer, larger ones then).
    busy_settle_window: float = 0.05


def backoff(attempt: int, settings: OutboxSettings, rand: Callable[[], float]) -> timedelta:
    """Delay before attempt `attempt + 1`: base * 2^(attempt-1), capped, then jittered to
    between half and all of it, so a receiver coming back is not hit by every job at once."""
    full = min(
        settings.backoff_base.total_seconds() * 2 ** max(attempt - 1, 0),
        settings.backoff_max.total_seconds(),
    )
    return timedelta(seconds=full * (0.5 + 0.5 * rand()))
