"""Routing and delegation, judged on the Operator's clock (a FakeClock moving days forward),
on SQLite and PostgreSQL: delegation windows and scopes, cards to delegates, escalation
along a route's chain, N-of-M with concurrent voters, self-approval, hand-off of one request,
and the refusals (loops, approvers outside the route, non-approvers).

Decisions go through the Operator as every surface does; a "second server" is a second
Operator with its own connection pool on the same database. What reaches chat is checked
at the outbox: the post_card and notice jobs queued, and their targets.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest

from bot.app import outbox_handlers
from bot.clock import FakeClock
from bot.config import parse_config
from bot.delegations import Delegations
from bot.errors import (
    AlreadyVoted,
    ApproversOutsideRoute,
    DelegationLoop,
    NoRoute,
    NotAnApprover,
    NotPending,
    SelfApproval,
)
from bot.intake import create_request, validate_request
from bot.metrics import Metrics
from bot.operator import Actor, Operator
from bot.outbox.jobs import JobKind
from bot.outbox.runner import OutboxRunner, OutboxSettings
from bot.routing import Directory
from bot.sweeper import Sweeper
from store.records import Approval
from store.repository import Store
from tests.support.samples import request_body

CONFIG: dict[str, Any] = {
    "tenants": [{"name": "acme"}],
    "telegram": {},  # its routes notify telegram:dm (the tests read the jobs, no bot runs)
    "principals": {
        "alice": {"name": "Alice Ng", "telegram": 111},
        "bob": {"name": "Bob Stone", "telegram": 222},
        "carol": {"name": "Carol Diaz", "telegram": 333},
        "dave": {"name": "Dave Roe", "telegram": 444},
        "erin": {"name": "Erin Outsider", "telegram": 555},
        "sam": {"name": "Sam Requester", "telegram": 666},
    },
    "groups": {"treasury": {"members": ["alice", "bob", "carol"]}},
    "routes": [
        {
            "tenant": "acme",
            "capability": "payments.*",
            "approvers": ["alice"],
            "notify": ["telegram:dm"],
            "approval_ttl": "72h",
            "escalation": [{"after": "24h", "to": "carol"}],
        },
        {
            "tenant": "acme",
            "capability": "payroll.*",
            "approvers": ["alice"],
            "approval_ttl": "5d",
            "escalation": [{"after": "24h", "to": "carol"}, {"after": "12h", "to": "dave"}],
        },
        {
            "tenant": "acme",
            "capability": "contracts.*",
            "approvers": ["alice"],
            "notify": ["telegram:dm"],
            "approval_ttl": "10d",
        },
        {
            "tenant": "acme",
            "capability": "treasury.*",
            "approvers": ["group:treasury"],
            "notify": ["telegram:dm"],
            "required_approvals": 2,
        },
        {
            "tenant": "acme",
            "capability": "expenses.*",
            "approvers": ["alice", "sam"],
            "allow_self_approval": True,
        },
        {
            "tenant": "acme",
            "capability": "refunds.*",
            "approvers": ["alice", "sam"],
            "notify": ["telegram:dm"],
        },
    ],
}


@dataclass
class World:
    store: Store
    clock: FakeClock
    directory: Directory
    operator: Operator
    delegations: Delegations
    runner: OutboxRunner

    async def request(self, capability: str = "payments.refund", **overrides: Any) -> Approval:
        body = request_body(capability=capability, run_id=f"run-{capability}", **overrides)
        created = await create_request(
            self.store, self.directory, self.clock, "acme", validate_request(body)
        )
        return created.approval

    def day(self, n: int) -> None:
        """Move the clock to day `n` (day 0 is when the world was made)."""
        self.clock.set(self.start + timedelta(days=n))

    async def approve(self, approval: Approval, who: str, operator: Operator | None = None) -> Any:
        return await (operator or self.operator).approve_shown(
            approval.id, approval.hash, Actor(who, "telegram")
        )

    def sweeper(self) -> Sweeper:
        return Sweeper(self.store, self.directory, self.clock)

    async def row(self, approval_id: str) -> Approval:
        async with self.store.read() as tx:
            row = await tx.get_approval(approval_id)
        assert row is not None
        return row

    async def events(self, approval_id: str) -> list[Any]:
        async with self.store.read() as tx:
            return await tx.events_for(approval_id)

    async def targets(self, approval_id: str | None = None, kind: str = "post_card") -> list[str]:
        async with self.store.read() as tx:
            jobs = await tx.outbox_jobs(approval_id=approval_id)
        return sorted(str(j.payload["target"]) for j in jobs if j.kind == kind)

    start: datetime


@pytest.fixture
async def world(store: Store, clock: FakeClock) -> AsyncIterator[World]:
    directory = parse_config(copy.deepcopy(CONFIG)).directory()
    delegations = Delegations(store, directory, clock)
    edges = (JobKind.DELEGATION_STARTED, JobKind.DELEGATION_ENDED)
    handlers = outbox_handlers(store, directory, clock, {}, kinds=edges)
    runner = OutboxRunner(store, handlers, clock, OutboxSettings())
    operator = Operator(store, directory, clock)
    yield World(store, clock, directory, operator, delegations, runner, clock.now())


async def _run_due(world: World) -> None:
    """Run the delegation jobs that are due now (card and notice jobs stay queued)."""
    while await world.runner.run_once():
        pass


# -- delegation windows ------------------------------------------------------------------------


async def test_a_delegate_gets_new_requests_and_decides_within_the_window(
    world: World, db_url: str
) -> None:
    await world.delegations.create(
        "alice", "bob", created_by="cli", ends_at=world.start + timedelta(days=5)
    )
    world.day(1)
    approval = await world.request("contracts.cancel")
    assert approval.assignee == "alice"  # alice keeps her authority; bob decides for her
    assert "Bob Stone decides as delegate until" in (approval.assigned_note or "")
    requested = (await world.events(approval.id))[0]
    assert requested.data["delegated_to"] == "bob"
    assert await world.targets(approval.id) == ["telegram:@alice", "telegram:@bob"]

    world.day(4)
    other = Store.from_url(db_url)  # a second server on the same database
    try:
        second = Operator(other, world.directory, world.clock)
        decision = await world.approve(approval, "bob", operator=second)
    finally:
        await other.close()
    assert (decision.approval.state, decision.approval.decided_by) == ("approved", "bob")
    assert decision.event.data["as_delegate_of"] == "alice"


async def test_after_the_window_the_delegate_is_refused_and_the_principal_is_not(
    world: World,
) -> None:
    await world.delegations.create(
        "alice", "bob", created_by="cli", ends_at=world.start + timedelta(days=5)
    )
    world.day(1)
    approval = await world.request("contracts.cancel")  # routed to bob; waits 10 days
    world.day(6)
    with pytest.raises(NotAnApprover, match="assigned to Alice Ng"):
        await world.approve(approval, "bob")
    decision = await world.approve(approval, "alice")
    assert (decision.approval.state, decision.approval.decided_by) == ("approved", "alice")


async def test_a_scoped_delegation_covers_only_its_capabilities(world: World) -> None:
    await world.delegations.create("alice", "bob", created_by="cli", scope="payments.*")
    contract = await world.request("contracts.cancel")
    assert contract.assigned_note is None
    assert await world.targets(contract.id) == ["telegram:@alice"]
    with pytest.raises(NotAnApprover):
        await world.approve(contract, "bob")
    payment = await world.request("payments.refund")
    assert (await world.approve(payment, "bob")).approval.state == "approved"


async def test_a_pending_request_gets_a_card_to_the_delegate_when_the_delegation_starts(
    world: World,
) -> None:
    approval = await world.request()
    assert await world.targets(approval.id) == ["telegram:@alice"]
    await world.delegations.create(
        "alice",
        "bob",
        created_by="cli",
        starts_at=world.start + timedelta(hours=6),
        ends_at=world.start + timedelta(days=3),
    )
    await _run_due(world)
    assert await world.targets(approval.id) == ["telegram:@alice"]  # not started yet
    with pytest.raises(NotAnApprover):
        await world.approve(approval, "bob")
    world.clock.advance(hours=6)
    await _run_due(world)
    assert await world.targets(approval.id) == ["telegram:@alice", "telegram:@bob"]
    notices = await world.targets(kind="notice")
    assert notices == ["telegram:@alice", "telegram:@bob"]
    async with world.store.read() as tx:
        [notice] = [j for j in await tx.outbox_jobs() if j.kind == "notice"][:1]
    assert "Bob Stone decides for Alice Ng" in notice.payload["text"]
    assert "1 pending request sent on" in notice.payload["text"]
    # ...and at its end both hear that it ended.
    world.day(3)
    await _run_due(world)
    async with world.store.read() as tx:
        texts = [j.payload["text"] for j in await tx.outbox_jobs() if j.kind == "notice"]
    assert sum("Delegation ended" in t for t in texts) == 2


async def test_the_delegate_of_any_approver_away_gets_the_card(world: World) -> None:
    await world.delegations.create("sam", "dave", created_by="cli")
    refund = await world.request("refunds.create", requested_by="bob")
    assert refund.assigned_note is None  # alice, the assignee, is not away
    assert await world.targets(refund.id) == [
        "telegram:@alice",
        "telegram:@dave",
        "telegram:@sam",
    ]
    assert (await world.approve(refund, "dave")).event.data["as_delegate_of"] == "sam"


async def test_revoking_ends_the_authority_at_once(world: World) -> None:
    delegation = await world.delegations.create("alice", "bob", created_by="cli")
    approval = await world.request()
    await world.delegations.revoke(delegation.id, by="cli")
    with pytest.raises(NotAnApprover):
        await world.approve(approval, "bob")
    with pytest.raises(NotPending, match="already revoked"):
        await world.delegations.revoke(delegation.id, by="cli")
    short = await world.delegations.create(
        "alice", "carol", created_by="cli", ends_at=world.start + timedelta(days=1)
    )
    world.day(2)
    with pytest.raises(NotPending, match="already ended"):
        await world.delegations.revoke(short.id, by="cli")


async def test_delegation_does_not_chain(world: World) -> None:
    await world.delegations.create("alice", "bob", created_by="cli")
    await world.delegations.create("bob", "carol", created_by="cli")
    approval = await world.request("contracts.cancel")
    with pytest.raises(NotAnApprover):
        await world.approve(approval, "carol")


@pytest.mark.parametrize(
    "chain",
    [
        [("alice", "bob"), ("bob", "alice")],
        [("alice", "bob"), ("bob", "carol"), ("carol", "alice")],
    ],
    ids=["two", "three"],
)
async def test_a_delegation_loop_is_refused_at_creation(
    world: World, chain: list[tuple[str, str]]
) -> None:
    for principal, to in chain[:-1]:
        await world.delegations.create(principal, to, created_by="cli")
    principal, to = chain[-1]
    with pytest.raises(DelegationLoop, match="circle"):
        await world.delegations.create(principal, to, created_by="cli")
    assert len(await world.delegations.list()) == len(chain) - 1


async def test_two_halves_of_a_circle_created_at_once_do_not_both_succeed(
    world: World, db_url: str
) -> None:
    stores = [Store.from_url(db_url) for _ in range(2)]
    try:
        makers = [Delegations(s, world.directory, world.clock) for s in stores]
        for _ in range(5):
            results = await asyncio.gather(
                makers[0].create("alice", "bob", created_by="cli"),
                makers[1].create("bob", "alice", created_by="cli"),
                return_exceptions=True,
            )
            [made] = [r for r in results if not isinstance(r, BaseException)]
            [refused] = [r for r in results if isinstance(r, BaseException)]
            assert isinstance(refused, DelegationLoop), refused
            await world.delegations.revoke(made.id, by="cli")
    finally:
        for s in stores:
            await s.close()


# -- escalation --------------------------------------------------------------------------------


async def test_escalation_moves_the_request_and_never_approves_it(world: World) -> None:
    metrics = Metrics()
    sweeper = world.sweeper()
    approval = await world.request()
    world.clock.advance(hours=23)
    assert (await sweeper.sweep()).escalated == 0
    world.clock.advance(hours=1)
    assert (await sweeper.sweep()).escalated == 1
    moved = await world.row(approval.id)
    assert (moved.assignee, moved.escalation_level, moved.escalate_at) == ("carol", 1, None)
    assert moved.assigned_note == "escalated to Carol Diaz after 24 h without a decision"
    event = (await world.events(approval.id))[-1]
    assert (event.type, event.data["from"], event.data["to"]) == ("escalated", "alice", "carol")
    assert await world.targets(approval.id) == ["telegram:@alice", "telegram:@carol"]
    await metrics.refresh(world.store, world.clock.now())
    assert b'signoff_pending_past_last_escalation{tenant="acme"} 1.0' in metrics.render()
    # Both carol (the new assignee) and alice (the original approver) may decide...
    await world.operator.precheck(approval.id, approval.hash, Actor("carol", "cli"), "approve")
    await world.operator.precheck(approval.id, approval.hash, Actor("alice", "cli"), "approve")
    # ...but nobody does: at the TTL it expires, never approved.
    world.clock.advance(hours=48)
    report = await sweeper.sweep()
    assert (report.expired, report.escalated) == (1, 0)
    final = await world.row(approval.id)
    assert (final.state, final.decided_by) == ("expired", None)
    assert "approved" not in [e.type for e in await world.events(approval.id)]


async def test_carol_can_decide_an_escalated_request(world: World) -> None:
    sweeper = world.sweeper()
    approval = await world.request()
    world.clock.advance(hours=25)
    await sweeper.sweep()
    decision = await world.approve(approval, "carol")
    assert (decision.approval.state, decision.approval.decided_by) == ("approved", "carol")


# -- N-of-M ------------------------------------------------------------------------------------


async def test_two_of_three_voting_at_once_approves_exactly_once(world: World) -> None:
    approval = await world.request("treasury.transfer")
    results = await asyncio.gather(
        *(world.approve(approval, who) for who in ("alice", "bob", "carol")),
        return_exceptions=True,
    )
    decisions = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, BaseException)]
    assert len(decisions) == 2, results
    assert [d.approval.state for d in decisions].count("approved") == 1
    assert len(refused) == 1 and isinstance(refused[0], NotPending), refused
    async with world.store.read() as tx:
        votes = await tx.votes_for(approval.id)
    assert len(votes) == 2
    row = await world.row(approval.id)
    assert row.state == "approved" and row.decided_by in {v.principal for v in votes}


async def test_one_rejection_before_the_quorum_rejects(world: World) -> None:
    approval = await world.request("treasury.transfer")
    first = await world.approve(approval, "alice")
    assert first.approval.state == "pending"
    assert first.event.data["votes"] == ["alice"]
    rejected = await world.operator.reject_shown(
        approval.id, approval.hash, Actor("bob", "cli"), "no"
    )
    assert rejected.approval.state == "rejected"
    with pytest.raises(NotPending):
        await world.approve(approval, "carol")


async def test_a_delegate_and_the_principal_count_as_one_vote(world: World) -> None:
    await world.delegations.create("alice", "dave", created_by="cli")
    approval = await world.request("treasury.transfer")
    await world.approve(approval, "dave")  # for alice
    with pytest.raises(AlreadyVoted, match="alice"):
        await world.approve(approval, "alice")
    assert (await world.row(approval.id)).state == "pending"
    assert (await world.approve(approval, "bob")).approval.state == "approved"


# -- self-approval, hand-off, routes -----------------------------------------------------------


async def test_self_approval_is_refused_unless_the_route_allows_it(world: World) -> None:
    refund = await world.request("refunds.create", requested_by="sam")
    with pytest.raises(SelfApproval):
        await world.approve(refund, "sam")
    expense = await world.request("expenses.create", requested_by="sam")
    assert (await world.approve(expense, "sam")).approval.state == "approved"


async def test_a_delegate_of_the_requester_may_not_approve_for_them(world: World) -> None:
    await world.delegations.create("sam", "dave", created_by="cli")
    refund = await world.request("refunds.create", requested_by="sam")
    with pytest.raises(SelfApproval, match="stands in for sam"):
        await world.approve(refund, "dave")


async def test_hand_off_by_an_entitled_approver_works(world: World) -> None:
    approval = await world.request("contracts.cancel")
    decision = await world.operator.delegate(
        approval.id, Actor("alice", "cli"), "dave", "I am off tomorrow"
    )
    moved = decision.approval
    assert (moved.state, moved.assignee, moved.version) == ("pending", "dave", 2)
    assert moved.assigned_note == "handed over by Alice Ng"
    assert decision.event.type == "delegated"
    assert (decision.event.data["from"], decision.event.data["to"]) == ("alice", "dave")
    assert await world.targets(approval.id) == ["telegram:@alice", "telegram:@dave"]
    async with world.store.read() as tx:
        updates = [j for j in await tx.outbox_jobs(approval_id=approval.id)]
    assert all(j.kind == "post_card" for j in updates)  # no card was posted yet to update
    assert (await world.approve(approval, "dave")).approval.decided_by == "dave"


async def test_hand_off_by_anyone_else_is_refused(world: World) -> None:
    approval = await world.request("contracts.cancel")
    with pytest.raises(NotAnApprover):
        await world.operator.delegate(approval.id, Actor("erin", "cli"), "erin")
    assert (await world.row(approval.id)).assignee == "alice"


async def test_a_request_naming_approvers_outside_its_route_is_refused(world: World) -> None:
    with pytest.raises(ApproversOutsideRoute):
        await world.request("contracts.cancel", approvers=["erin"])
    with pytest.raises(NoRoute):
        await world.request("unrouted.thing")


async def test_every_earlier_assignee_keeps_their_authority(world: World) -> None:
    sweeper = world.sweeper()
    approval = await world.request("payroll.run")
    world.clock.advance(hours=24)
    await sweeper.sweep()
    world.clock.advance(hours=12)
    await sweeper.sweep()
    moved = await world.row(approval.id)
    assert (moved.assignee, moved.escalation_level, moved.approvers) == (
        "dave",
        2,
        ["alice", "carol"],
    )
    decision = await world.approve(approval, "carol")  # her card's buttons still work
    assert decision.approval.decided_by == "carol"


async def test_a_hand_off_restarts_the_current_escalation_wait(world: World) -> None:
    sweeper = world.sweeper()
    approval = await world.request("payroll.run")
    world.clock.advance(hours=20)
    await world.operator.delegate(approval.id, Actor("alice", "cli"), "bob")
    world.clock.advance(hours=20)  # 40 h after the request, 20 h after the hand-off
    assert (await sweeper.sweep()).escalated == 0
    world.clock.advance(hours=4)
    assert (await sweeper.sweep()).escalated == 1
    moved = await world.row(approval.id)
    assert (moved.assignee, moved.approvers) == ("carol", ["alice", "bob"])


@pytest.mark.parametrize(
    ("who", "to", "requested_by", "error", "match"),
    [
        ("dave", "dave", None, NotAnApprover, "only as the delegate of alice"),
        ("sam", "erin", "sam", SelfApproval, "may not choose who decides"),
        ("alice", "sam", "sam", SelfApproval, "may not be handed it"),
    ],
    ids=["a delegate handing on", "the requester handing off", "handing to the requester"],
)
async def test_hand_offs_that_would_pass_on_authority_wrongly_are_refused(
    world: World, who: str, to: str, requested_by: str | None, error: type, match: str
) -> None:
    await world.delegations.create("alice", "dave", created_by="cli")
    refund = await world.request("refunds.create", requested_by=requested_by or "bob")
    with pytest.raises(error, match=match):
        await world.operator.delegate(refund.id, Actor(who, "cli"), to)
    assert (await world.row(refund.id)).assignee == "alice"


async def test_the_delegate_of_a_group_member_gets_the_card(world: World) -> None:
    await world.delegations.create("alice", "erin", created_by="cli")
    transfer = await world.request("treasury.transfer")
    assert "telegram:@erin" in await world.targets(transfer.id)
    # ...and one already pending when the delegation starts gets it then.
    await world.delegations.create("bob", "dave", created_by="cli")
    await _run_due(world)
    assert "telegram:@dave" in await world.targets(transfer.id)
