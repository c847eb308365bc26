"""Claim, complete, lease lapse and the sweeper, on real SQLite and PostgreSQL with a FakeClock.

What a resumed agent reads must be true: a claim starts execution, only `complete` finishes
it, a lease that lapses is `outcome_unknown` (never a guess) and raises an
interrupted_side_effect approval for the same call; clocks that run out expire rows, and a
decision racing the sweeper on one row produces exactly one outcome.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from bot.audit import verify
from bot.clock import FakeClock
from bot.errors import ApprovalExpired, ClaimMismatch, NotPending
from bot.execution import AgentActions, idempotency_key
from bot.intake import create_request
from bot.model import Kind, State, execution_of, recompute_hash
from bot.operator import Actor, Operator
from bot.routing import Directory
from bot.sweeper import Sweeper
from store.records import Approval
from store.repository import Store
from tests.conftest import make_request

ALICE = Actor("alice", "cli")
BOB = Actor("bob", "cli")


async def _approved(
    store: Store, directory: Directory, clock: FakeClock, **body: object
) -> Approval:
    created = await create_request(store, directory, clock, "acme", make_request(**body))
    decision = await Operator(store, directory, clock).approve_shown(
        created.approval.id, created.approval.hash, ALICE
    )
    return decision.approval


async def _jobs(store: Store, approval_id: str) -> list:
    async with store.read() as tx:
        return await tx.outbox_jobs(approval_id=approval_id)


async def test_lease_lapse_is_outcome_unknown_and_raises_an_interrupted_side_effect(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    approval = await _approved(store, directory, clock, step={"node": 3}, resume={"t": 1})
    actions = AgentActions(store, directory, clock)
    claimed = await actions.claim("acme", approval.id, timedelta(minutes=5))
    assert execution_of(claimed.approval.state) == "started"

    sweeper = Sweeper(store, directory, clock)
    clock.advance(minutes=4)
    assert (await sweeper.sweep()).lapsed == 0  # the lease still runs
    clock.advance(minutes=2)
    report = await sweeper.sweep()
    assert report.lapsed == 1

    async with store.read() as tx:
        original = await tx.get_approval(approval.id)
        follow_ups = [
            a for a in await tx.list_approvals(tenant="acme") if a.origin_id == approval.id
        ]
    assert original is not None
    assert original.state == State.OUTCOME_UNKNOWN
    assert execution_of(original.state) == "started"  # it ran; the outcome is not known
    [follow_up] = follow_ups
    assert follow_up.kind == Kind.INTERRUPTED_SIDE_EFFECT
    assert follow_up.state == State.PENDING
    # The same call, routed like the original, resuming the same way.
    assert (follow_up.tool_name, follow_up.tool_args) == (approval.tool_name, approval.tool_args)
    assert (follow_up.run_id, follow_up.step, follow_up.resume) == (
        approval.run_id,
        approval.step,
        approval.resume,
    )
    assert follow_up.approvers == approval.approvers
    assert follow_up.hash == recompute_hash(follow_up) != approval.hash
    assert "outcome was never reported" in follow_up.presentation["summary"]
    assert follow_up.presentation["fields"][0] == {
        "label": "Original approval",
        "value": approval.id,
    }
    # The original's webhook says so, naming the follow-up.
    [webhook] = [
        j for j in await _jobs(store, approval.id) if j.payload["body"]["event"] == "lease_lapsed"
    ]
    body = webhook.payload["body"]
    assert body["approval"]["state"] == "outcome_unknown"
    assert body["approval"]["execution"] == "started"
    assert body["follow_up_id"] == follow_up.id
    # A late report cannot rewrite the record into a known outcome.
    with pytest.raises(NotPending, match="lease lapsed") as info:
        await actions.complete("acme", approval.id, claimed.claim_token, "succeeded")
    assert info.value.state == "outcome_unknown"
    assert (await verify(store)).ok
    # The follow-up is an ordinary approval: a human decides whether to run it again.
    again = await Operator(store, directory, clock).approve_shown(follow_up.id, follow_up.hash, BOB)
    assert again.state == State.APPROVED


async def test_claim_has_exactly_one_winner_under_concurrency(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    approval = await _approved(store, directory, clock)
    actions = AgentActions(store, directory, clock)
    results = await asyncio.gather(
        *(actions.claim("acme", approval.id) for _ in range(25)), return_exceptions=True
    )
    winners = [r for r in results if not isinstance(r, BaseException)]
    losers = [r for r in results if isinstance(r, BaseException)]
    assert len(winners) == 1
    assert all(isinstance(e, NotPending) and e.state == "executing" for e in losers), losers
    assert winners[0].idempotency_key == idempotency_key(approval)


async def test_complete_requires_the_claim_token_and_is_idempotent(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    approval = await _approved(store, directory, clock)
    actions = AgentActions(store, directory, clock)
    claimed = await actions.claim("acme", approval.id)
    with pytest.raises(ClaimMismatch):
        await actions.complete("acme", approval.id, "not-the-token", "succeeded")
    done = await actions.complete("acme", approval.id, claimed.claim_token, "failed", {"e": 1})
    assert (done.state, execution_of(done.state)) == ("failed", "finished")
    assert done.outcome == {"status": "failed", "result": {"e": 1}}
    again = await actions.complete("acme", approval.id, claimed.claim_token, "failed", {"e": 1})
    assert again.version == done.version  # no second transition
    with pytest.raises(NotPending):  # a different outcome is not a retry
        await actions.complete("acme", approval.id, claimed.claim_token, "succeeded")


async def test_an_unclaimed_grant_expires_on_claim_and_in_the_sweeper(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    first = await _approved(store, directory, clock, run_id="r-1")
    second = await _approved(store, directory, clock, run_id="r-2")
    clock.advance(hours=24)  # the route's grant_ttl
    with pytest.raises(ApprovalExpired):
        await AgentActions(store, directory, clock).claim("acme", first.id)
    assert (await Sweeper(store, directory, clock).sweep()).grants_expired == 1
    async with store.read() as tx:
        states = [(await tx.get_approval(a.id)).state for a in (first, second)]  # type: ignore[union-attr]
    assert states == ["expired", "expired"]
    assert (await verify(store)).ok


async def test_sweeper_expires_a_backlog_in_bounded_batches(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    for i in range(7):
        await create_request(store, directory, clock, "acme", make_request(run_id=f"r-{i}"))
    clock.advance(hours=72)
    sweeper = Sweeper(store, directory, clock, batch=3)
    assert (await sweeper.sweep()).expired == 3
    assert (await sweeper.sweep_all()).expired == 4
    async with store.read() as tx:
        assert {a.state for a in await tx.list_approvals()} == {"expired"}


async def test_a_decision_racing_the_sweeper_has_exactly_one_outcome(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    created = [
        (
            await create_request(store, directory, clock, "acme", make_request(run_id=f"r-{i}"))
        ).approval
        for i in range(20)
    ]
    # Exactly at the deadline: the sweeper and a decider both judge the row as due.
    clock.advance(hours=72)
    operator = Operator(store, directory, clock)
    sweeper = Sweeper(store, directory, clock)
    outcomes = await asyncio.gather(
        sweeper.sweep(),
        *(operator.approve_shown(a.id, a.hash, ALICE) for a in created),
        return_exceptions=True,
    )
    report, decisions = outcomes[0], outcomes[1:]
    assert all(isinstance(d, ApprovalExpired) for d in decisions), decisions
    async with store.read() as tx:
        rows = [await tx.get_approval(a.id) for a in created]
        events = [await tx.events_for(a.id) for a in created]
    assert {r.state for r in rows if r} == {"expired"}
    # One expiry event per row, whoever wrote it; the sweeper counts only the ones it wrote.
    expiries = [e for trail in events for e in trail if e.type == "expired"]
    assert len(expiries) == 20
    assert report.expired == sum(1 for e in expiries if "on_attempt_by" not in e.data)
    assert (await verify(store)).ok


async def test_agent_withdrawals_and_their_webhooks(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    actions = AgentActions(store, directory, clock)
    pending = (await create_request(store, directory, clock, "acme", make_request())).approval
    superseded = await actions.supersede("acme", pending.id, "balance changed")
    assert (superseded.state, superseded.decision_note) == ("superseded", "balance changed")
    approved = await _approved(store, directory, clock, run_id="r-2")
    cancelled = await actions.cancel("acme", approved.id, "user withdrew")
    assert cancelled.state == "cancelled"
    for approval_id, state in ((pending.id, "superseded"), (approved.id, "cancelled")):
        bodies = [j.payload["body"] for j in await _jobs(store, approval_id)]
        assert bodies[-1]["approval"]["state"] == state
    with pytest.raises(NotPending):
        await actions.cancel("acme", approved.id)
