"""The one transaction every action on one approval runs in, the Operator's and the agent's.

An action is written as its step: given the transaction, the locked row and the time, what it
moved, what it answers, or the refusal. `run` does the rest the same way for every action:
lock the row, read the clock once the lock is held (a wait for the lock must not let an
attempt be judged at the earlier time it arrived), refuse a row that already expired, expire
a row whose clock ran out (and commit that expiry even though the caller is refused, so the
trail and the webhooks say what happened), otherwise take the step; then commit, count and
log each transition that committed, and only then raise the refusal.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bot import expiry
from bot.errors import NotFound, SignoffError
from bot.model import State
from bot.transitions import Transition, Transitioner
from store.records import Approval
from store.repository import Tx


@dataclass
class Outcome:
    """What one locked step did: the transitions to commit and count, the value to return,
    or the error to raise once what the refusal itself records has committed."""

    moved: list[Transition] = field(default_factory=list)
    value: Any = None
    error: SignoffError | None = None


Step = Callable[[Tx, Approval, datetime], Awaitable[Outcome]]


async def run(
    mover: Transitioner,
    approval_id: str,
    step: Step,
    *,
    tenant: str | None = None,
    admit: Callable[[Approval], None] | None = None,
    noticed_by: str | None = None,
    consequence: str = "",
) -> Any:
    """Take `step` on approval `approval_id` in one write transaction, for `mover`.

    `tenant`: only that tenant's row (another tenant's id reads as a missing one).
    `admit`: raises if the row, not expired, may not be acted on at all; judged before its
    clocks, so a row in the wrong state is refused rather than expired. `noticed_by`: the
    actor label an expiry this attempt causes records. `consequence`: what the refusal of an
    expired row adds to its sentence ("; nothing to execute").
    """
    async with mover.store.write() as tx:
        row = await tx.lock_approval(approval_id)
        if row is None or (tenant is not None and row.tenant != tenant):
            raise NotFound(f"no approval with id {approval_id!r}")
        now = mover.clock.now()
        if row.state == State.EXPIRED:
            raise expiry.expired_error(row, consequence)
        if admit is not None:
            admit(row)
        clock_name = expiry.expiry_due(row, now)
        if clock_name is not None:
            # Judged on this clock, now: the attempt itself expires the row.
            expired = await expiry.expire(
                tx, mover.directory, row, now, clock_name, noticed_by=noticed_by
            )
            error = expiry.expired_error(expired.approval, consequence)
            outcome = Outcome([expired], error=error)
        else:
            outcome = await step(tx, row, now)
    for moved in outcome.moved:
        mover.committed(moved)
    if outcome.error is not None:
        raise outcome.error
    return outcome.value
