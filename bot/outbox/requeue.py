"""Giving a dead outbox job another set of attempts: what `signoff outbox retry` and the
dashboard's Retry button both do, written in one place (the surfaces only word the answer).
"""

from __future__ import annotations

import logging

from bot.clock import Clock
from bot.errors import NotFound, NotPending
from store.records import OutboxJob
from store.repository import Store

log = logging.getLogger(__name__)


async def retry_dead_job(store: Store, clock: Clock, job_id: int, *, by: str) -> OutboxJob:
    """Queue dead job `job_id` again, due now, with a fresh set of attempts; `by` says who
    (for the log). NotFound if there is no such job; NotPending (its state in `.state`) if it
    is not dead, and then nothing changes."""
    async with store.write() as tx:
        job = await tx.requeue_job(job_id, now=clock.now())
        current = None if job else await tx.get_job(job_id)
    if job is None:
        if current is None:
            raise NotFound(f"no outbox job with id {job_id}")
        raise NotPending(
            f"outbox job {job_id} is {current.state}, not dead; only dead jobs are retried",
            state=current.state,
        )
    log.info(
        "outbox job %d (%s) requeued by %s",
        job.id,
        job.kind,
        by,
        extra={"job_id": job.id, "approval_id": job.approval_id},
    )
    return job
