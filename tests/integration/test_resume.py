"""Resume that re-judges, on real SQLite and PostgreSQL with a FakeClock.

What an agent gets when it comes back for a grant must be exactly what a human approved,
still allowed by today's configuration, and recoverable when the network loses an answer;
what it reports must be recorded whenever it arrives.
"""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from typing import Any

import pytest

from bot.agent_actions import OUTCOME_REPORTED, AgentActions, Claimed
from bot.audit import verify
from bot.canonical import approval_hash
from bot.clock import FakeClock
from bot.config import parse_config
from bot.errors import ApprovalCorrupt, ClaimMismatch, LeaseExhausted, NotPending, PolicyChanged
from bot.intake import create_request
from bot.model import State, public_record
from bot.operator import Actor, Operator
from bot.routing import Directory
from bot.sweeper import Sweeper
from store.records import Approval
from store.repository import Store
from tests.support.samples import TEST_CONFIG, make_request, tamper

ALICE = Actor("alice", "cli")
BOB = Actor("bob", "cli")
CAROL = Actor("carol", "cli")
DAVE = Actor("dave", "cli")


async def _create(store: Store, directory: Directory, clock: FakeClock, **body: Any) -> Approval:
    return (await create_request(store, directory, clock, "acme", make_request(**body))).approval


async def _approved(
    store: Store, directory: Directory, clock: FakeClock, by: Actor = ALICE, **body: Any
) -> Approval:
    created = await _create(store, directory, clock, **body)
    decision = await Operator(store, directory, clock).approve_shown(created.id, created.hash, by)
    return decision.approval


async def _row(store: Store, approval_id: str) -> Approval:
    async with store.read() as tx:
        row = await tx.get_approval(approval_id)
    assert row is not None
    return row


async def _events(store: Store, approval_id: str) -> list[Any]:
    async with store.read() as tx:
        return await tx.events_for(approval_id)


async def _webhooks(store: Store, approval_id: str) -> list[str]:
    async with store.read() as tx:
        jobs = await tx.outbox_jobs(approval_id=approval_id)
    return [j.payload["body"]["event"] for j in jobs if j.kind == "webhook"]


def _directory(change: Any) -> Directory:
    config = copy.deepcopy(TEST_CONFIG)
    change(config)
    return parse_config(config).directory()


# -- integrity -----------------------------------------------------------------------------

ATTACKER_ARGS = '{"charge": "ch_attacker", "amount": 999999}'


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("tool_args", ATTACKER_ARGS),
        ("tool_name", "stripe.payouts.create"),
        ("presentation", '{"title": "Refund €1.00 to Zoë"}'),
    ],
)
async def test_a_row_altered_after_approval_is_not_handed_out(
    store: Store, directory: Directory, clock: FakeClock, column: str, value: str
) -> None:
    approval = await _approved(store, directory, clock)
    await tamper(
        store, f"UPDATE approvals SET {column} = :v WHERE id = :id", v=value, id=approval.id
    )
    with pytest.raises(ApprovalCorrupt, match="altered"):
        await AgentActions(store, directory, clock).claim("acme", approval.id)
    row = await _row(store, approval.id)
    assert (row.state, row.claim_token) == ("approved", None)
    # The attempt is in the trail, which still verifies as a chain; the row does not.
    last = (await _events(store, approval.id))[-1]
    assert (last.type, last.data["action"], last.data["state"]) == (
        "integrity_failed",
        "claim",
        "approved",
    )
    report = await verify(store)
    assert [b.approval_id for b in report.problems] == [approval.id]
    assert "no longer hashes" in report.problems[0].problem


async def test_a_row_rehashed_after_approval_is_caught_by_what_its_approver_was_shown(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    """An intruder who also rewrites the hash column makes the row consistent with itself,
    but not with the hash the human was shown, which the chained trail keeps."""
    approval = await _approved(store, directory, clock)
    args = json.loads(ATTACKER_ARGS)
    forged = approval_hash(
        approval.kind, approval.capability, approval.presentation, approval.tool_name, args
    )
    await tamper(
        store,
        "UPDATE approvals SET tool_args = :a, hash = :h WHERE id = :id",
        a=ATTACKER_ARGS,
        h=forged,
        id=approval.id,
    )
    with pytest.raises(ApprovalCorrupt, match="were shown"):
        await AgentActions(store, directory, clock).claim("acme", approval.id)
    assert (await _row(store, approval.id)).state == "approved"
    assert not (await verify(store, approval.id)).ok


async def test_audit_verify_names_every_altered_approval(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    made = [await _approved(store, directory, clock, run_id=f"run-{i}") for i in range(3)]
    for target in (made[0], made[2]):
        await tamper(
            store,
            "UPDATE approvals SET tool_args = :v WHERE id = :id",
            v=ATTACKER_ARGS,
            id=target.id,
        )
    report = await verify(store)
    assert sorted(b.approval_id for b in report.problems) == sorted([made[0].id, made[2].id])
    assert report.approvals_checked == 3


async def test_completion_of_an_altered_row_is_refused_and_recorded(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    approval = await _approved(store, directory, clock)
    actions = AgentActions(store, directory, clock)
    claimed = await actions.claim("acme", approval.id)
    await tamper(
        store, "UPDATE approvals SET tool_args = :v WHERE id = :id", v=ATTACKER_ARGS, id=approval.id
    )
    with pytest.raises(ApprovalCorrupt):
        await actions.complete("acme", approval.id, claimed.claim_token, "succeeded")
    assert (await _row(store, approval.id)).state == "executing"
    assert (await _events(store, approval.id))[-1].data["action"] == "complete"


# -- policy, judged again at claim ---------------------------------------------------------


def _without_alice(config: dict[str, Any]) -> None:
    config["groups"]["finance"]["members"] = ["bob", "sam"]


def _without_the_route(config: dict[str, Any]) -> None:
    config["routes"] = [r for r in config["routes"] if r["capability"] != "payments.*"]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (_without_alice, "alice, who approved it, may no longer decide"),
        (_without_the_route, "no route"),
    ],
    ids=["decider removed", "route removed"],
)
async def test_a_grant_todays_config_no_longer_allows_is_superseded_at_claim(
    store: Store, directory: Directory, clock: FakeClock, change: Any, says: str
) -> None:
    approval = await _approved(store, directory, clock)
    restarted = AgentActions(store, _directory(change), clock)  # the server, with the new config
    with pytest.raises(PolicyChanged, match=says) as info:
        await restarted.claim("acme", approval.id)
    assert info.value.state == "superseded"
    row = await _row(store, approval.id)
    assert row.state == "superseded" and row.claim_token is None
    assert row.decision_note is not None and says in row.decision_note
    assert await _webhooks(store, approval.id) == ["approved", "superseded"]
    with pytest.raises(NotPending):
        await restarted.claim("acme", approval.id)
    assert (await verify(store)).ok


async def test_authority_that_came_through_escalation_or_a_hand_off_still_holds(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    operator = Operator(store, directory, clock)
    actions = AgentActions(store, directory, clock)
    # Nobody answered for a day: the chain sends it to carol, who approves.
    escalated = await _create(store, directory, clock, run_id="escalated")
    clock.advance(hours=25)
    assert (await Sweeper(store, directory, clock).sweep()).escalated == 1
    await operator.approve_shown(escalated.id, escalated.hash, CAROL)
    assert (await actions.claim("acme", escalated.id)).approval.state == "executing"
    # Alice hands one to dave, who is in no route, and he approves it.
    handed = await _create(store, directory, clock, run_id="handed")
    await operator.delegate(handed.id, ALICE, "dave")
    await operator.approve_shown(handed.id, handed.hash, DAVE)
    # His authority came from alice: once she may no longer decide, neither may he.
    with pytest.raises(PolicyChanged, match="dave"):
        await AgentActions(store, _directory(_without_alice), clock).claim("acme", handed.id)


async def test_a_break_glass_grant_is_not_rejudged_by_the_route(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    approval = await _create(store, directory, clock)
    glass = Actor("carol", "cli", break_glass=True)
    await Operator(store, directory, clock).approve_shown(approval.id, approval.hash, glass)
    claimed = await AgentActions(store, _directory(_without_alice), clock).claim(
        "acme", approval.id
    )
    assert claimed.approval.state == "executing"


# -- recoverable claims --------------------------------------------------------------------


async def test_a_lost_claim_answer_is_recovered_with_the_same_key(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    approval = await _approved(store, directory, clock)
    actions = AgentActions(store, directory, clock)
    first = await actions.claim("acme", approval.id, timedelta(minutes=5), key="k-1")
    events = len(await _events(store, approval.id))
    again = await actions.claim("acme", approval.id, timedelta(minutes=5), key="k-1")
    assert again.claim_token == first.claim_token
    assert again.approval.lease_until == first.approval.lease_until
    assert len(await _events(store, approval.id)) == events  # nothing moved
    with pytest.raises(NotPending, match="another caller holds it"):
        await actions.claim("acme", approval.id, key="k-2")
    with pytest.raises(NotPending):
        await actions.claim("acme", approval.id)  # no key: as before
    clock.advance(minutes=6)  # the claim is no longer live: the key recovers nothing
    with pytest.raises(NotPending):
        await actions.claim("acme", approval.id, key="k-1")


async def test_release_hands_the_grant_back_with_its_clock_unchanged(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    approval = await _approved(store, directory, clock)
    actions = AgentActions(store, directory, clock)
    claimed = await actions.claim("acme", approval.id, key="k-1")
    with pytest.raises(ClaimMismatch):
        await actions.release("acme", approval.id, "not-the-token")
    released = await actions.release("acme", approval.id, claimed.claim_token)
    assert (released.state, public_record(released)["execution"]) == ("approved", "not_started")
    assert (released.claim_token, released.lease_until, released.claim_key) == (None, None, None)
    assert released.grant_expires_at == approval.grant_expires_at
    assert (await _events(store, approval.id))[-1].type == "released"
    # The old key recovers nothing; anyone may claim it again.
    other = await actions.claim("acme", approval.id, key="k-1")
    assert other.claim_token != claimed.claim_token
    clock.advance(minutes=11)  # past the default 10 min lease
    with pytest.raises(LeaseExhausted, match="ran out"):
        await actions.release("acme", approval.id, other.claim_token)


async def test_renew_extends_the_lease_up_to_a_day_from_the_claim(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    approval = await _approved(store, directory, clock)
    actions = AgentActions(store, directory, clock)
    claimed = await actions.claim("acme", approval.id, timedelta(minutes=10))
    start = clock.now()
    clock.advance(minutes=5)
    renewed = await actions.renew("acme", approval.id, claimed.claim_token, timedelta(hours=1))
    assert renewed.lease_until == clock.now() + timedelta(hours=1)
    assert (await _events(store, approval.id))[-1].type == "renewed"
    # Asking for less than is held changes nothing.
    same = await actions.renew("acme", approval.id, claimed.claim_token, timedelta(minutes=1))
    assert same.lease_until == renewed.lease_until
    clock.advance(minutes=50)
    capped = await actions.renew("acme", approval.id, claimed.claim_token, timedelta(hours=24))
    assert capped.lease_until == start + timedelta(hours=24)
    with pytest.raises(LeaseExhausted, match="longest a claim may"):
        await actions.renew("acme", approval.id, claimed.claim_token, timedelta(hours=1))
    with pytest.raises(ClaimMismatch):
        await actions.renew("acme", approval.id, "not-the-token")
    clock.advance(hours=24)
    with pytest.raises(LeaseExhausted, match="ran out"):
        await actions.renew("acme", approval.id, claimed.claim_token)


# -- the newest request of a step ----------------------------------------------------------


def _refund(amount: int, **body: Any) -> dict[str, Any]:
    return {
        "step": {"node": "refund"},
        "tool": {
            "name": "stripe.refunds.create",
            "arguments": {"charge": "ch_1", "amount": amount},
        },
        **body,
    }


async def test_the_newest_request_of_a_step_is_its_only_grant(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    old = await _approved(store, directory, clock, **_refund(100))
    pending = await _create(store, directory, clock, **_refund(150))  # replaces the grant
    created = await create_request(store, directory, clock, "acme", make_request(**_refund(250)))
    new = created.approval
    assert [t.approval.id for t in created.superseded] == [pending.id]
    for older, by in ((old, pending.id), (pending, new.id)):
        row = await _row(store, older.id)
        assert (row.state, row.superseded_by) == ("superseded", by)
        assert public_record(row)["superseded_by"] == by
        assert (await _webhooks(store, older.id))[-1] == "superseded"
    with pytest.raises(NotPending):
        await AgentActions(store, directory, clock).claim("acme", old.id)
    assert (await _row(store, new.id)).state == "pending"
    # The same call again is the same request and replaces nothing.
    again = await create_request(store, directory, clock, "acme", make_request(**_refund(250)))
    assert (again.created, again.superseded) == (False, ())
    assert (await verify(store)).ok


async def test_a_started_call_and_requests_without_a_step_are_left_alone(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    started = await _approved(store, directory, clock, **_refund(100))
    await AgentActions(store, directory, clock).claim("acme", started.id)
    other_run = await _create(store, directory, clock, **_refund(100, run_id="run-2"))
    no_step = await _create(store, directory, clock, step=None)
    await _create(store, directory, clock, **_refund(250))
    await _create(store, directory, clock, step=None, tool={"name": "t", "arguments": {"x": 1}})
    states = [(await _row(store, a.id)).state for a in (started, other_run, no_step)]
    assert states == ["executing", "pending", "pending"]


# -- late reports --------------------------------------------------------------------------


async def _claimed_past_its_lease(
    store: Store, directory: Directory, clock: FakeClock
) -> tuple[Approval, AgentActions, Claimed]:
    """An approved call claimed for 5 minutes, 6 minutes ago (the sweeper has not run)."""
    approval = await _approved(store, directory, clock)
    actions = AgentActions(store, directory, clock)
    claimed = await actions.claim("acme", approval.id, timedelta(minutes=5))
    clock.advance(minutes=6)
    return approval, actions, claimed


async def test_a_report_after_the_lease_but_before_the_sweep_is_recorded_as_late(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    approval, actions, claimed = await _claimed_past_its_lease(store, directory, clock)
    done = await actions.complete("acme", approval.id, claimed.claim_token, "succeeded", {"r": 1})
    assert (done.state, done.follow_up_id) == ("executed", None)
    assert (await _events(store, approval.id))[-1].data["late"] is True
    assert (await Sweeper(store, directory, clock).sweep()).lapsed == 0


async def test_a_report_after_the_sweep_tells_the_truth_and_withdraws_the_question(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    approval, actions, claimed = await _claimed_past_its_lease(store, directory, clock)
    assert (await Sweeper(store, directory, clock).sweep()).lapsed == 1
    lapsed = await _row(store, approval.id)
    assert lapsed.state == "outcome_unknown" and lapsed.follow_up_id is not None
    with pytest.raises(ClaimMismatch):
        await actions.complete("acme", approval.id, "not-the-token", "succeeded")
    done = await actions.complete("acme", approval.id, claimed.claim_token, "failed", {"e": "x"})
    assert (done.state, done.outcome) == ("failed", {"status": "failed", "result": {"e": "x"}})
    event = (await _events(store, approval.id))[-1]
    assert (event.type, event.data["late"]) == ("failed", True)
    follow_up = await _row(store, lapsed.follow_up_id)
    assert (follow_up.state, follow_up.decision_note) == (State.SUPERSEDED, OUTCOME_REPORTED)
    # One webhook per transition the agent did not cause itself (it made the report), and
    # one for the question that is withdrawn.
    assert await _webhooks(store, approval.id) == ["approved", "lease_lapsed"]
    assert await _webhooks(store, follow_up.id) == ["superseded"]
    # A retry of the same report returns it; the row moves no further.
    again = await actions.complete("acme", approval.id, claimed.claim_token, "failed", {"e": "x"})
    assert again.version == done.version
    assert (await verify(store)).ok


async def test_a_late_report_leaves_a_follow_up_a_human_already_ran_alone(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    approval, actions, claimed = await _claimed_past_its_lease(store, directory, clock)
    await Sweeper(store, directory, clock).sweep()
    follow_up_id = (await _row(store, approval.id)).follow_up_id
    assert follow_up_id is not None
    follow_up = await _row(store, follow_up_id)
    await Operator(store, directory, clock).approve_shown(follow_up.id, follow_up.hash, BOB)
    await actions.claim("acme", follow_up.id)
    await actions.complete("acme", approval.id, claimed.claim_token, "succeeded")
    assert (await _row(store, follow_up.id)).state == "executing"


async def test_a_recovered_claim_is_checked_again_for_alterations(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    approval = await _approved(store, directory, clock)
    actions = AgentActions(store, directory, clock)
    await actions.claim("acme", approval.id, key="k-1")
    await tamper(
        store, "UPDATE approvals SET tool_args = :v WHERE id = :id", v=ATTACKER_ARGS, id=approval.id
    )
    with pytest.raises(ApprovalCorrupt):
        await actions.claim("acme", approval.id, key="k-1")


async def test_an_edited_decision_event_is_caught_at_claim(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    """Rewriting the row, its hash and the hash in the decision event makes them agree, but
    the event no longer matches its own hash in the chain."""
    approval = await _approved(store, directory, clock)
    args = json.loads(ATTACKER_ARGS)
    forged = approval_hash(
        approval.kind, approval.capability, approval.presentation, approval.tool_name, args
    )
    decided = (await _events(store, approval.id))[-1]
    await tamper(
        store,
        "UPDATE approvals SET tool_args = :a, hash = :h WHERE id = :id",
        a=ATTACKER_ARGS,
        h=forged,
        id=approval.id,
    )
    await tamper(
        store,
        "UPDATE approval_events SET data = :d WHERE id = :id",
        d=json.dumps(decided.data | {"shown_hash": forged}),
        id=decided.id,
    )
    with pytest.raises(ApprovalCorrupt, match="audit trail is broken"):
        await AgentActions(store, directory, clock).claim("acme", approval.id)


async def test_a_lapse_of_an_altered_call_raises_no_follow_up_that_would_launder_it(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    approval = await _approved(store, directory, clock)
    await AgentActions(store, directory, clock).claim("acme", approval.id, timedelta(minutes=5))
    await tamper(
        store, "UPDATE approvals SET tool_args = :v WHERE id = :id", v=ATTACKER_ARGS, id=approval.id
    )
    clock.advance(minutes=6)
    assert (await Sweeper(store, directory, clock).sweep()).lapsed == 1
    row = await _row(store, approval.id)
    assert (row.state, row.follow_up_id) == ("outcome_unknown", None)
    assert "altered" in (await _events(store, approval.id))[-1].data["integrity"]


async def test_a_follow_up_inherits_the_authority_of_the_approval_it_reruns(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    """Alice hands the request to dave, dave to bob; bob approves and the run's lease lapses.
    Dave, who holds the request by hand-off, approves the re-run: nothing in the config
    changed, so its claim goes through."""
    operator = Operator(store, directory, clock)
    actions = AgentActions(store, directory, clock)
    approval = await _create(store, directory, clock)
    await operator.delegate(approval.id, ALICE, "dave")
    await operator.delegate(approval.id, DAVE, "bob")
    await operator.approve_shown(approval.id, approval.hash, BOB)
    await actions.claim("acme", approval.id, timedelta(minutes=5))
    clock.advance(minutes=6)
    await Sweeper(store, directory, clock).sweep()
    follow_up = await _row(store, str((await _row(store, approval.id)).follow_up_id))
    await operator.approve_shown(follow_up.id, follow_up.hash, DAVE)
    assert (await actions.claim("acme", follow_up.id)).approval.state == "executing"


async def test_the_same_people_listed_one_by_one_keep_their_authority(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    approval = await _approved(store, directory, clock)  # route: group:finance, alice decided

    def one_by_one(config: dict[str, Any]) -> None:
        config["routes"][0]["approvers"] = ["alice", "bob", "sam"]

    claimed = await AgentActions(store, _directory(one_by_one), clock).claim("acme", approval.id)
    assert claimed.approval.state == "executing"
