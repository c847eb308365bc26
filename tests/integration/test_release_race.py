"""A release racing a newer request of the same step, on real SQLite and PostgreSQL.

The newest request of a step is its only grant (bot/intake.py supersedes the older ones that
have not started). A claimed request is left alone by a newer one because it started; its
release says it never did, so it must then be judged by the same rule, under the same step
lock, or the step ends with two live grants.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bot.agent_actions import AgentActions
from bot.audit import verify
from bot.clock import FakeClock
from bot.intake import create_request
from bot.model import public_record
from bot.operator import Actor, Operator
from bot.routing import Directory
from store.approvals import ApprovalStatements
from store.records import Approval
from store.repository import Store
from tests.support.samples import make_request


def _refund(amount: int) -> dict[str, Any]:
    return {
        "step": {"node": "refund"},
        "tool": {
            "name": "stripe.refunds.create",
            "arguments": {"charge": "ch_1", "amount": amount},
        },
    }


async def _claimed(store: Store, directory: Directory, clock: FakeClock) -> tuple[Approval, str]:
    created = await create_request(store, directory, clock, "acme", make_request(**_refund(100)))
    old = created.approval
    await Operator(store, directory, clock).approve_shown(old.id, old.hash, Actor("alice", "cli"))
    claimed = await AgentActions(store, directory, clock).claim("acme", old.id)
    clock.advance(minutes=1)  # the newer request is asked for later
    return old, claimed.claim_token


async def _row(store: Store, approval_id: str) -> Approval:
    async with store.read() as tx:
        row = await tx.get_approval(approval_id)
    assert row is not None
    return row


async def _assert_one_grant(store: Store, old: Approval, new: Approval) -> None:
    released = await _row(store, old.id)
    assert (released.state, released.superseded_by) == ("superseded", new.id)
    assert (released.claim_token, released.lease_until) == (None, None)
    assert public_record(released)["execution"] == "not_started"
    assert (await _row(store, new.id)).state == "pending"
    async with store.read() as tx:
        event = (await tx.events_for(old.id))[-1]
        jobs = await tx.outbox_jobs(approval_id=old.id)
    assert (event.type, event.data["from"], event.data["superseded_by"]) == (
        "superseded",
        "executing",
        new.id,
    )
    webhooks = [j.payload["body"]["event"] for j in jobs if j.kind == "webhook"]
    assert webhooks[-1] == "superseded"
    assert (await verify(store)).ok


async def test_a_release_racing_a_newer_request_of_its_step_leaves_one_grant(
    store: Store,
    directory: Directory,
    clock: FakeClock,
    db_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    old, token = await _claimed(store, directory, clock)
    # The create is held inside its transaction, just after it read the step's live
    # requests (the claimed one is not among them: it has started); the release is sent
    # then, and the create let go once the release got as far as it can.
    read, go, release_waits = asyncio.Event(), asyncio.Event(), asyncio.Event()
    earlier_requests, lock_step = ApprovalStatements.earlier_requests, ApprovalStatements.lock_step

    async def held_after_reading(self: ApprovalStatements, *args: Any, **kwargs: Any) -> Any:
        found = await earlier_requests(self, *args, **kwargs)
        read.set()
        await go.wait()
        return found

    async def seen_waiting(self: ApprovalStatements, *args: Any, **kwargs: Any) -> None:
        if read.is_set():  # the release's, while the create holds the step
            release_waits.set()
        await lock_step(self, *args, **kwargs)

    monkeypatch.setattr(ApprovalStatements, "earlier_requests", held_after_reading)
    monkeypatch.setattr(ApprovalStatements, "lock_step", seen_waiting)
    creating = asyncio.create_task(
        create_request(store, directory, clock, "acme", make_request(**_refund(250)))
    )
    await read.wait()
    releasing = asyncio.create_task(
        AgentActions(store, directory, clock).release("acme", old.id, token)
    )
    if not db_url.startswith("sqlite"):
        # PostgreSQL: the release runs until it commits or waits for the step's lock. On
        # SQLite it cannot begin before the create's write transaction ends.
        waiting = asyncio.create_task(release_waits.wait())
        await asyncio.wait({releasing, waiting}, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
    go.set()
    created, released = await asyncio.gather(creating, releasing)
    assert released.state == "superseded"
    await _assert_one_grant(store, old, created.approval)


async def test_a_release_after_a_newer_request_of_its_step_supersedes_it(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    old, token = await _claimed(store, directory, clock)
    new = await create_request(store, directory, clock, "acme", make_request(**_refund(250)))
    assert new.superseded == ()  # the claimed request started: left alone then
    released = await AgentActions(store, directory, clock).release("acme", old.id, token)
    assert (released.state, released.superseded_by) == ("superseded", new.approval.id)
    await _assert_one_grant(store, old, new.approval)


async def test_a_release_with_no_newer_request_of_its_step_hands_the_grant_back(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    old, token = await _claimed(store, directory, clock)
    other_run = make_request(run_id="run-2", **_refund(250))
    await create_request(store, directory, clock, "acme", other_run)
    released = await AgentActions(store, directory, clock).release("acme", old.id, token)
    assert (released.state, released.superseded_by) == ("approved", None)
