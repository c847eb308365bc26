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
from sqlalchemy import text

from bot.agent_actions import AgentActions, idempotency_key
from bot.audit import verify
from bot.clock import FakeClock
from bot.errors import ApprovalExpired, ClaimMismatch, NotPending
from bot.intake import create_request
from bot.metrics import Metrics
from bot.model import Kind, State, execution_of, public_record, recompute_hash
from bot.operator import Actor, Operator
from bot.routing import Directory
from bot.sweeper import Sweeper
from store.records import Approval
from store.repository import Store
from tests.support.databases import POSTGRES_ONLY
from tests.support.samples import make_request, tamper

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
    # Times as every card shows them, not the record's microseconds.
    assert original.claimed_at is not None and original.lease_until is not None
    started = f"{original.claimed_at:%Y-%m-%d %H:%M} UTC"
    assert f"started at {started}" in follow_up.presentation["summary"]
    assert f"lapsed at {original.lease_until:%Y-%m-%d %H:%M} UTC." in (
        follow_up.presentation["summary"]
    )
    assert {"label": "Started", "value": started} in follow_up.presentation["fields"]
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
    # The record names it too, for an agent that polls instead of taking webhooks.
    assert original.follow_up_id == follow_up.id
    assert public_record(original)["follow_up_id"] == follow_up.id
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


async def _lapse(
    store: Store, directory: Directory, clock: FakeClock, approval_id: str
) -> tuple[str, Approval]:
    """Claim, let the lease lapse, sweep; returns the claim's key and the follow-up."""
    claimed = await AgentActions(store, directory, clock).claim(
        "acme", approval_id, timedelta(minutes=1)
    )
    clock.advance(minutes=2)
    assert (await Sweeper(store, directory, clock).sweep()).lapsed == 1
    async with store.read() as tx:
        [follow_up] = [
            a
            for a in await tx.list_approvals(tenant="acme", state="pending")
            if a.kind == Kind.INTERRUPTED_SIDE_EFFECT
        ]
    return claimed.idempotency_key, follow_up


async def test_a_rerun_after_an_unknown_outcome_keeps_the_idempotency_key(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    """The follow-up may run a call that already took effect: the effect's API must see the
    same key, so it applies the call at most once."""
    original = await _approved(store, directory, clock)
    first_key, follow_up = await _lapse(store, directory, clock, original.id)
    operator = Operator(store, directory, clock)
    await operator.approve_shown(follow_up.id, follow_up.hash, BOB)
    second_key, again = await _lapse(store, directory, clock, follow_up.id)
    assert first_key == second_key == idempotency_key(original)
    # A follow-up of a follow-up still names the first request, and says so once.
    assert again.origin_id == original.id
    assert again.presentation["title"] == f"Outcome unknown: {original.presentation['title']}"
    labels = [f["label"] for f in again.presentation["fields"]]
    assert labels.count("Original approval") == 1
    assert again.presentation["fields"][0]["value"] == original.id


async def test_decision_metrics_count_each_request_once(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    metrics = Metrics()
    operator = Operator(store, directory, clock, metrics)
    actions = AgentActions(store, directory, clock, metrics)
    approved = (await create_request(store, directory, clock, "acme", make_request())).approval
    await operator.approve_shown(approved.id, approved.hash, ALICE)
    withdrawn = (
        await create_request(store, directory, clock, "acme", make_request(run_id="r-2"))
    ).approval
    await actions.supersede("acme", withdrawn.id, "balance changed")
    clock.advance(hours=25)  # the approved grant runs out unclaimed
    await Sweeper(store, directory, clock, metrics=metrics).sweep()

    def count(outcome: str) -> float | None:
        return metrics.registry.get_sample_value("signoff_decisions_total", {"outcome": outcome})

    # Approved once; its grant expiring later is not a second decision.
    assert (count("approved"), count("superseded"), count("expired")) == (1.0, 1.0, None)


async def test_one_broken_row_does_not_stop_the_sweeper(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    actions = AgentActions(store, directory, clock)
    broken = await _approved(store, directory, clock, run_id="r-broken")
    healthy = await _approved(store, directory, clock, run_id="r-healthy")
    await actions.claim("acme", broken.id, timedelta(minutes=1))  # lapses first
    await actions.claim("acme", healthy.id, timedelta(minutes=2))
    # A stray event squats the sequence number its next event needs: every attempt to record
    # the lapse fails on the (approval_id, seq) constraint.
    async with store.read() as tx:
        row = await tx.get_approval(broken.id)
    assert row is not None
    await tamper(
        store,
        "INSERT INTO approval_events (approval_id, seq, type, actor, at, data, prev_hash, hash) "
        "VALUES (:a, :seq, 'stray', 'x', :at, '{}', :h, :h)",
        a=broken.id,
        seq=row.audit_seq + 1,
        at=clock.now(),
        h="0" * 64,
    )
    clock.advance(minutes=5)
    assert (await Sweeper(store, directory, clock).sweep()).lapsed == 1
    async with store.read() as tx:
        states = {a.id: a.state for a in await tx.list_approvals(tenant="acme")}
    assert (states[broken.id], states[healthy.id]) == ("executing", "outcome_unknown")


# SQLite has one writer at a time: there is no row lock to skip there.
@POSTGRES_ONLY
async def test_the_sweeper_skips_a_row_another_transaction_holds(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    created = (await create_request(store, directory, clock, "acme", make_request())).approval
    clock.advance(hours=72)
    sweeper = Sweeper(store, directory, clock)
    async with store.engine.begin() as held:  # a decision in progress elsewhere
        await held.execute(
            text("SELECT id FROM approvals WHERE id = :id FOR UPDATE"), {"id": created.id}
        )
        assert (await asyncio.wait_for(sweeper.sweep(), 5)).expired == 0
    assert (await sweeper.sweep()).expired == 1


async def test_a_decision_on_an_expired_grant_names_the_grant_deadline(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    approval = await _approved(store, directory, clock)
    clock.advance(hours=25)
    assert (await Sweeper(store, directory, clock).sweep()).grants_expired == 1
    with pytest.raises(ApprovalExpired) as info:
        await Operator(store, directory, clock).reject_shown(approval.id, approval.hash, BOB)
    deadline = approval.grant_expires_at
    assert deadline is not None and deadline != approval.expires_at
    assert f"expired at {deadline:%Y-%m-%d %H:%M} UTC" in info.value.message
