"""The inbox's two reads with a decision committed between them, on SQLite and PostgreSQL.

`bot.inbox.pending_for` (the web inbox and the Slack Home) first reads the candidate rows,
then reads the ones it shows whole. Someone deciding one of them in between (another
approver on their phone, the agent withdrawing it) must not leave it on the person's list as
still pending: they would press Approve on something already decided. The interleaving is
staged for real: the second read is held until another write transaction, through the
Operator or the agent's API actions, has committed.

Proves: a request approved or cancelled between the reads is not among `Found.items` nor
counted in `Found.counted`; the others are, in deadline order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from datetime import timedelta

import pytest

from bot import inbox
from bot.agent_actions import AgentActions
from bot.clock import FakeClock
from bot.intake import create_request
from bot.model import State
from bot.operator import Actor, Operator
from bot.routing import Directory
from store.records import Approval
from store.repository import Store, Tx
from tests.support.samples import make_request

Decide = Callable[[Store, Directory, FakeClock, Approval], Awaitable[object]]


async def approved_by_bob(
    store: Store, directory: Directory, clock: FakeClock, row: Approval
) -> object:
    # Bob is in group:finance with Alice: the request is his to decide too.
    return await Operator(store, directory, clock).approve_shown(
        row.id, row.hash, Actor("bob", "slack")
    )


async def cancelled_by_the_agent(
    store: Store, directory: Directory, clock: FakeClock, row: Approval
) -> object:
    return await AgentActions(store, directory, clock).cancel("acme", row.id, "no longer needed")


@pytest.mark.parametrize(
    ("decide", "state"),
    [(approved_by_bob, State.APPROVED), (cancelled_by_the_agent, State.CANCELLED)],
    ids=["approved", "cancelled"],
)
async def test_a_request_decided_between_the_inbox_reads_is_not_shown_as_pending(
    store: Store,
    directory: Directory,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    decide: Decide,
    state: State,
) -> None:
    rows = []
    for n in range(3):
        created = await create_request(
            store, directory, clock, "acme", make_request(run_id=f"run-{n}")
        )
        rows.append(created.approval)
        # Distinct deadlines, so the inbox's order (soonest first) is the creation order.
        clock.advance(timedelta(minutes=1))
    first, middle, last = rows

    reads: list[list[str]] = []
    read_whole = Tx.approvals_in

    async def decided_first(tx: Tx, approval_ids: Collection[str]) -> dict[str, Approval]:
        if not reads:
            reads.append(list(approval_ids))
            await decide(store, directory, clock, middle)
        return await read_whole(tx, approval_ids)

    monkeypatch.setattr(Tx, "approvals_in", decided_first)

    found = await inbox.pending_for(store, directory, "alice", clock.now(), limit=10)

    # The candidate read still saw all three pending: the decision really fell between.
    assert reads == [[first.id, middle.id, last.id]]
    async with store.read() as tx:
        decided = await tx.get_approval(middle.id)
    assert decided is not None and decided.state == state
    assert [p.approval.id for p in found.items] == [first.id, last.id]
    assert all(p.approval.state == State.PENDING for p in found.items)
    # Nor is it counted: the Slack Home would say "… and 1 more waiting for you" when nothing
    # more is; nothing lies beyond, so no `more`.
    assert found.counted == 2
    assert found.more is None
