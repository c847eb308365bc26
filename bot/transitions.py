"""The one shape of every state change: a conditional UPDATE, its audit event, and the outbox
jobs it causes (bot.effects), in the caller's transaction.

The Operator (human decisions), the agent-side actions (bot.agent_actions) and the sweeper all
move rows through `apply`, so each transition is audited, chained and announced the same way.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from bot import audit, effects
from bot.clock import Clock, SystemClock
from bot.routing import Directory
from store.records import Approval, Event
from store.repository import Store, Tx

log = logging.getLogger("signoff.transitions")


@dataclass(frozen=True, slots=True)
class Transition:
    """A committed (or about to commit) state change: the row after it and its audit event."""

    approval: Approval
    event: Event
    before: str  # the state the row left

    @property
    def state(self) -> str:
        return self.approval.state


async def apply(
    tx: Tx,
    directory: Directory,
    row: Approval,
    values: dict[str, object],
    event_type: str,
    *,
    now: datetime,
    actor: str,
    data: dict[str, object],
    shown_hash: str | None = None,
) -> Transition:
    """Move `row` (read under its lock in this transaction) to `values`.

    The update also moves the audit chain's head to the new event, and the event records the
    state (and decider) it left, so `audit verify` can hold the row to its trail.
    """
    data = data | {"state": values["state"]}
    if "decided_by" in values:
        data["decided_by"] = values["decided_by"]
    event = audit.next_event(
        row.id,
        event_type,
        after_seq=row.audit_seq,
        after_hash=row.audit_head,
        actor=actor,
        at=now,
        data=data,
    )
    updated = await tx.update_approval(
        row.id,
        expect_states=[row.state],
        expect_version=row.version,
        expect_hash=shown_hash,
        values=values | audit.head_of(event),
    )
    if updated is None:
        # We hold the row lock, so nobody can have moved the row: something is wrong with
        # the database or this code. Refuse loudly rather than guess.
        raise RuntimeError(f"conditional update of {row.id} matched no row under its lock")
    stored = await tx.insert_event(event)
    await effects.cause(tx, effects.Announce(updated, stored), now=now, directory=directory)
    return Transition(updated, stored, row.state)


class Counts(Protocol):
    """What counts committed transitions (bot.metrics.Metrics, which imports this module for
    `Transition`; so this module names the one method it calls, not the class)."""

    def transitioned(self, result: Transition) -> None: ...


class Transitioner:
    """What every component that moves approvals holds (the Operator, the agent's actions,
    the sweeper): the store, the directory the effects are routed by, the clock every
    judgement reads, and the metrics that count what committed."""

    def __init__(
        self,
        store: Store,
        directory: Directory,
        clock: Clock | None = None,
        metrics: Counts | None = None,
    ) -> None:
        self.store = store
        self.directory = directory
        self.clock = clock or SystemClock()
        self.metrics = metrics

    def committed(self, result: Transition) -> Transition:
        """Count and log a transition once its transaction has committed."""
        if self.metrics is not None:
            self.metrics.transitioned(result)
        return logged(result)


def logged(result: Transition) -> Transition:
    """One log line per committed transition, with the fields an operator filters on."""
    approval, event = result.approval, result.event
    log.info(
        # The event and the state apart: "executed -> executed" read as a no-op.
        "approval %s: event %s, state now %s, by %s",
        approval.id,
        event.type,
        approval.state,
        event.actor,
        extra={
            "approval_id": approval.id,
            "tenant": approval.tenant,
            "actor": event.actor,
            "event": event.type,
            "state": approval.state,
        },
    )
    return result
