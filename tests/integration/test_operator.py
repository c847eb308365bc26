"""The Operator on real databases: every test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest

from bot import audit
from bot.clock import FakeClock
from bot.errors import (
    AlreadyVoted,
    ApprovalChanged,
    ApprovalCorrupt,
    ApprovalExpired,
    NotAnApprover,
    NotFound,
    NotPending,
    SelfApproval,
    UnknownPrincipal,
)
from bot.intake import create_request
from bot.operator import Actor, Operator
from bot.routing import Directory
from store.records import Approval
from store.repository import Store
from tests.support.samples import make_request, tamper

ALICE = Actor("alice", via="test")
BOB = Actor("bob", via="test")


async def _create(store: Store, directory: Directory, clock: FakeClock, **overrides) -> Approval:
    created = await create_request(store, directory, clock, "acme", make_request(**overrides))
    return created.approval


async def _state(store: Store, approval_id: str) -> Approval:
    async with store.read() as tx:
        approval = await tx.get_approval(approval_id)
    assert approval is not None
    return approval


async def _event_types(store: Store, approval_id: str) -> list[str]:
    async with store.read() as tx:
        return [e.type for e in await tx.events_for(approval_id)]


async def test_approve_records_decider_event_and_webhook_job(
    store: Store, directory: Directory, clock: FakeClock, operator: Operator
) -> None:
    approval = await _create(store, directory, clock)
    clock.advance(hours=2)
    decision = await operator.approve_shown(approval.id, approval.hash, ALICE, note="fine")

    assert decision.state == "approved"
    stored = await _state(store, approval.id)
    assert (stored.state, stored.decided_by, stored.decision_note) == ("approved", "alice", "fine")
    assert stored.decided_at == clock.now()
    assert stored.version == approval.version + 1
    assert await _event_types(store, approval.id) == ["requested", "approved"]
    async with store.read() as tx:
        jobs = await tx.outbox_jobs(approval_id=approval.id)
    # The webhook was queued in the decision's transaction, with a stable delivery id.
    assert [j.kind for j in jobs] == ["webhook"]
    assert jobs[0].payload["url"] == "http://127.0.0.1:9/hooks"
    assert jobs[0].payload["body"]["approval"]["state"] == "approved"
    assert jobs[0].payload["body"]["event"] == "approved"
    assert jobs[0].dedupe_key == f"webhook:{jobs[0].payload['delivery_id']}"


@pytest.mark.parametrize("action", ["approve", "reject", "cancel"])
async def test_decision_on_unknown_id_is_not_found(operator: Operator, action: str) -> None:
    with pytest.raises(NotFound):
        if action == "cancel":
            await operator.cancel("no-such-id", ALICE)
        else:
            await getattr(operator, f"{action}_shown")("no-such-id", "0" * 64, ALICE)


async def test_fifty_concurrent_decisions_make_exactly_one_transition(
    db_url: str, store: Store, directory: Directory, clock: FakeClock
) -> None:
    approval = await _create(store, directory, clock)
    # Every attempt gets its own Store: its own engine, connection and transaction, as if
    # each came from a different replica, so only the database can keep them apart.
    stores = [Store.from_url(db_url) for _ in range(50)]
    attempts = []
    for i, own in enumerate(stores):
        operator = Operator(own, directory, clock)
        actor = ALICE if i % 2 else BOB
        kind = ("approve", "reject", "cancel")[i % 3]
        if kind == "approve":
            attempts.append(operator.approve_shown(approval.id, approval.hash, actor))
        elif kind == "reject":
            attempts.append(operator.reject_shown(approval.id, approval.hash, actor, note="no"))
        else:
            attempts.append(operator.cancel(approval.id, actor))
    try:
        results = await asyncio.gather(*attempts, return_exceptions=True)
    finally:
        await asyncio.gather(*(own.close() for own in stores))

    winners = [r for r in results if not isinstance(r, BaseException)]
    losers = [r for r in results if isinstance(r, BaseException)]
    assert len(winners) == 1, results
    final = await _state(store, approval.id)
    assert final.state == winners[0].state
    assert len(losers) == 49
    for loser in losers:
        assert isinstance(loser, NotPending), repr(loser)
        assert loser.state == final.state
        assert final.state in str(loser)
    decided = {"approved", "rejected", "cancelled"}
    decisions = [t for t in await _event_types(store, approval.id) if t in decided]
    assert len(decisions) == 1
    async with store.read() as tx:
        jobs = await tx.outbox_jobs(approval_id=approval.id)
    assert [j.payload["body"]["event"] for j in jobs] == [final.state]
    assert (await audit.verify(store, approval.id)).ok


async def test_decided_after_71_hours_of_a_72_hour_ttl(
    store: Store, directory: Directory, clock: FakeClock, operator: Operator
) -> None:
    approval = await _create(store, directory, clock, approval_ttl="72h")
    clock.advance(hours=71)
    decision = await operator.approve_shown(approval.id, approval.hash, ALICE)
    assert decision.state == "approved"


async def test_at_exactly_the_ttl_the_request_has_expired(
    store: Store, directory: Directory, clock: FakeClock, operator: Operator
) -> None:
    approval = await _create(store, directory, clock, approval_ttl="72h")
    clock.advance(hours=72)
    with pytest.raises(ApprovalExpired):
        await operator.approve_shown(approval.id, approval.hash, ALICE)
    assert (await _state(store, approval.id)).state == "expired"


async def test_attempt_after_73_hours_expires_the_request_and_says_so(
    store: Store, directory: Directory, clock: FakeClock, operator: Operator
) -> None:
    approval = await _create(store, directory, clock, approval_ttl="72h")
    clock.advance(hours=73)
    with pytest.raises(ApprovalExpired) as refused:
        await operator.approve_shown(approval.id, approval.hash, ALICE)
    assert "expired at" in str(refused.value)

    stored = await _state(store, approval.id)
    assert stored.state == "expired"
    assert stored.decided_by is None
    assert await _event_types(store, approval.id) == ["requested", "expired"]
    async with store.read() as tx:
        events = await tx.events_for(approval.id)
        jobs = await tx.outbox_jobs(approval_id=approval.id)
    assert events[-1].data["on_attempt_by"] == "test:alice"
    assert [j.payload["body"]["event"] for j in jobs] == ["expired"]
    # A later attempt is told the same thing and writes nothing more.
    with pytest.raises(ApprovalExpired):
        await operator.reject_shown(approval.id, approval.hash, BOB)
    assert await _event_types(store, approval.id) == ["requested", "expired"]


async def test_shown_hash_differs_refused_and_nothing_written(
    store: Store, directory: Directory, clock: FakeClock, operator: Operator
) -> None:
    approval = await _create(store, directory, clock)
    other = "f" * 64
    for decide in (operator.approve_shown, operator.reject_shown):
        with pytest.raises(ApprovalChanged):
            await decide(approval.id, other, ALICE)
    stored = await _state(store, approval.id)
    assert stored == approval
    assert await _event_types(store, approval.id) == ["requested"]
    async with store.read() as tx:
        assert await tx.votes_for(approval.id) == []
        assert await tx.outbox_jobs(approval_id=approval.id) == []


@pytest.mark.parametrize("shown", [None, "", "abc", "F" * 64, "sha256:" + "f" * 64])
async def test_a_decision_must_name_a_full_hash(
    store: Store, directory: Directory, clock: FakeClock, operator: Operator, shown: str | None
) -> None:
    approval = await _create(store, directory, clock)
    with pytest.raises(ApprovalChanged, match="full 64-hex hash"):
        await operator.approve_shown(approval.id, shown, ALICE)  # type: ignore[arg-type]
    with pytest.raises(ApprovalChanged):
        await operator.reject_shown(approval.id, shown, ALICE)  # type: ignore[arg-type]
    assert await _state(store, approval.id) == approval
    assert await _event_types(store, approval.id) == ["requested"]


async def test_row_altered_behind_the_operators_back_is_corrupt(
    store: Store, directory: Directory, clock: FakeClock, operator: Operator
) -> None:
    approval = await _create(store, directory, clock)
    # Someone with database access changes what the human will approve, keeping the hash.
    await tamper(
        store,
        "UPDATE approvals SET presentation = :p WHERE id = :id",
        p='{"title": "Refund €1.00 to Zoë"}',
        id=approval.id,
    )
    with pytest.raises(ApprovalCorrupt):
        await operator.approve_shown(approval.id, approval.hash, ALICE)
    assert (await _state(store, approval.id)).state == "pending"
    assert await _event_types(store, approval.id) == ["requested"]


async def test_not_in_the_assignee_group_is_not_an_approver(
    store: Store, directory: Directory, clock: FakeClock, operator: Operator
) -> None:
    approval = await _create(store, directory, clock)
    with pytest.raises(NotAnApprover) as refused:
        await operator.approve_shown(approval.id, approval.hash, Actor("dave", via="test"))
    assert "group finance" in str(refused.value)
    with pytest.raises(NotAnApprover):
        await operator.reject_shown(approval.id, approval.hash, Actor("carol", via="test"))
    with pytest.raises(UnknownPrincipal):
        await operator.approve_shown(approval.id, approval.hash, Actor("mallory", via="test"))
    assert (await _state(store, approval.id)).state == "pending"
    assert await _event_types(store, approval.id) == ["requested"]


async def test_requester_may_not_approve_own_request_by_default(
    store: Store, directory: Directory, clock: FakeClock, operator: Operator
) -> None:
    approval = await _create(store, directory, clock, requested_by="sam")
    with pytest.raises(SelfApproval):
        await operator.approve_shown(approval.id, approval.hash, Actor("sam", via="test"))
    assert (await _state(store, approval.id)).state == "pending"
    # Rejecting one's own request is safe (fails closed) and allowed.
    decision = await operator.reject_shown(approval.id, approval.hash, Actor("sam", via="test"))
    assert decision.state == "rejected"


@pytest.mark.parametrize("requested_by", ["Sam", "sam ", " SAM", "sam\t"])
async def test_self_approval_guard_ignores_case_and_surrounding_space(
    store: Store, directory: Directory, clock: FakeClock, operator: Operator, requested_by: str
) -> None:
    approval = await _create(store, directory, clock, requested_by=requested_by)
    with pytest.raises(SelfApproval):
        await operator.approve_shown(approval.id, approval.hash, Actor("sam", via="test"))
    # Nor may sam choose who decides it.
    with pytest.raises(SelfApproval):
        await operator.delegate(approval.id, Actor("sam", via="test"), "alice")
    assert (await _state(store, approval.id)).state == "pending"


async def test_a_committed_decision_logs_its_event_and_the_new_state_apart(
    store: Store,
    directory: Directory,
    clock: FakeClock,
    operator: Operator,
    caplog: pytest.LogCaptureFixture,
) -> None:
    approval = await _create(store, directory, clock, requested_by="agent")
    with caplog.at_level(logging.INFO, logger="signoff.transitions"):
        await operator.approve_shown(approval.id, approval.hash, Actor("sam", via="test"))
    assert f"approval {approval.id}: event approved, state now approved, by test:sam" in [
        record.getMessage() for record in caplog.records
    ]


async def test_self_approval_allowed_when_the_route_says_so(
    store: Store, directory: Directory, clock: FakeClock, operator: Operator
) -> None:
    approval = await _create(store, directory, clock, capability="contracts.cancel")
    decision = await operator.approve_shown(approval.id, approval.hash, Actor("sam", via="test"))
    assert (decision.state, decision.approval.decided_by) == ("approved", "sam")


async def test_break_glass_decides_without_entitlement_and_is_recorded(
    store: Store, directory: Directory, clock: FakeClock, operator: Operator
) -> None:
    approval = await _create(store, directory, clock)
    actor = Actor("dave", via="cli", break_glass=True)
    decision = await operator.approve_shown(approval.id, approval.hash, actor)
    assert decision.approval.decided_by == "dave"
    assert decision.event.data["break_glass"] is True
    assert decision.event.actor == "cli:dave"


async def test_break_glass_is_only_for_the_cli(
    store: Store, directory: Directory, clock: FakeClock, operator: Operator
) -> None:
    approval = await _create(store, directory, clock)
    with pytest.raises(NotAnApprover, match="break-glass"):
        await operator.approve_shown(
            approval.id, approval.hash, Actor("dave", via="slack", break_glass=True)
        )
    assert (await _state(store, approval.id)).state == "pending"


async def test_cancel_needs_an_entitled_approver(
    store: Store, directory: Directory, clock: FakeClock, operator: Operator
) -> None:
    # The requester is named by the agent, so naming someone grants them nothing.
    first = await _create(store, directory, clock, run_id="r1", requested_by="dave")
    with pytest.raises(NotAnApprover):
        await operator.cancel(first.id, Actor("dave", via="test"))
    cancelled = await operator.cancel(first.id, BOB, "not needed")
    assert (cancelled.state, cancelled.approval.decision_note) == ("cancelled", "not needed")
    # A human cancel aimed at a pending request never revokes an approval that landed first.
    second = await _create(store, directory, clock, run_id="r2")
    await operator.approve_shown(second.id, second.hash, ALICE)
    with pytest.raises(NotPending) as refused:
        await operator.cancel(second.id, BOB)
    assert refused.value.state == "approved"
    assert (await _state(store, second.id)).state == "approved"


async def test_two_of_three_quorum_counts_distinct_principals(
    store: Store, directory: Directory, clock: FakeClock, operator: Operator
) -> None:
    approval = await _create(store, directory, clock, capability="quorum.transfer")
    assert approval.required_approvals == 2
    first = await operator.approve_shown(approval.id, approval.hash, ALICE)
    assert first.state == "pending"
    assert first.event.type == "voted"
    with pytest.raises(AlreadyVoted):
        await operator.approve_shown(approval.id, first.approval.hash, ALICE)
    second = await operator.approve_shown(approval.id, approval.hash, BOB)
    assert (second.state, second.approval.decided_by) == ("approved", "bob")
    assert second.event.data["votes"] == ["alice", "bob"]
    with pytest.raises(NotPending):
        await operator.approve_shown(approval.id, approval.hash, Actor("carol", via="test"))


async def test_one_rejection_rejects_a_quorum_request(
    store: Store, directory: Directory, clock: FakeClock, operator: Operator
) -> None:
    approval = await _create(store, directory, clock, capability="quorum.transfer")
    await operator.approve_shown(approval.id, approval.hash, ALICE)
    decision = await operator.reject_shown(approval.id, approval.hash, BOB, note="too much")
    assert (decision.state, decision.approval.decision_note) == ("rejected", "too much")


async def test_decision_survives_a_new_operator_on_a_new_connection(
    db_url: str, store: Store, directory: Directory, clock: FakeClock
) -> None:
    """Nothing is held in memory: a different Operator (another replica) decides days later."""
    approval = await _create(store, directory, clock)
    await store.close()
    clock.advance(timedelta(days=2))
    replica = Store.from_url(db_url)
    try:
        decision = await Operator(replica, directory, clock).approve_shown(
            approval.id, approval.hash, BOB
        )
        assert decision.approval.decided_by == "bob"
    finally:
        await replica.close()
