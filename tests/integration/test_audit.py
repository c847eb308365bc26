"""The hash-chained audit trail, verified and tampered with on real databases."""

from __future__ import annotations

import pytest

from bot import audit
from bot.clock import FakeClock
from bot.errors import NotFound
from bot.intake import create_request
from bot.operator import Actor, Operator
from store.records import Approval
from store.repository import Store
from tests.support.samples import make_request, tamper


async def _history(store: Store, operator: Operator, clock: FakeClock) -> list[Approval]:
    """Three approvals with a few events each: approved, rejected, pending with a vote."""
    made = []
    for run, capability in (("a", "payments.refund"), ("b", "payments.refund"), ("c", "quorum.x")):
        created = await create_request(
            store,
            operator.directory,
            clock,
            "acme",
            make_request(run_id=run, capability=capability),
        )
        made.append(created.approval)
        clock.advance(minutes=1)
    alice = Actor("alice", via="test")
    await operator.approve_shown(made[0].id, made[0].hash, alice, note="ok")
    await operator.reject_shown(made[1].id, made[1].hash, alice, note="no")
    await operator.approve_shown(made[2].id, made[2].hash, alice)
    return made


async def test_clean_database_verifies(store: Store, operator: Operator, clock: FakeClock) -> None:
    await _history(store, operator, clock)
    report = await audit.verify(store)
    assert report.ok, report.broken
    assert (report.events_checked, report.approvals_checked) == (6, 3)


async def test_edited_event_is_named_as_the_first_broken_link(
    store: Store, operator: Operator, clock: FakeClock
) -> None:
    made = await _history(store, operator, clock)
    async with store.read() as tx:
        target = (await tx.events_for(made[1].id))[1]  # the rejection
    await tamper(
        store,
        "UPDATE approval_events SET data = :d WHERE id = :id",
        d='{"note": "approved after all"}',
        id=target.id,
    )
    report = await audit.verify(store)
    assert not report.ok
    assert report.broken is not None
    assert (report.broken.event_id, report.broken.approval_id) == (target.id, made[1].id)
    assert "altered" in report.broken.problem
    # The other approvals' chains are still intact when checked one by one.
    assert (await audit.verify(store, made[0].id)).ok
    assert not (await audit.verify(store, made[1].id)).ok


async def test_deleted_events_break_the_chain(
    store: Store, operator: Operator, clock: FakeClock
) -> None:
    made = await _history(store, operator, clock)
    async with store.read() as tx:
        first, second = await tx.events_for(made[0].id)
    # Delete the first event: the second no longer starts the chain.
    await tamper(store, "DELETE FROM approval_events WHERE id = :id", id=first.id)
    report = await audit.verify(store, made[0].id)
    assert report.broken is not None and report.broken.event_id == second.id
    # Delete the whole trail of another approval: noticed too.
    await tamper(store, "DELETE FROM approval_events WHERE approval_id = :a", a=made[2].id)
    assert not (await audit.verify(store, made[2].id)).ok


async def test_verify_unknown_approval_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound):
        await audit.verify(store, "nope")


async def test_cutting_off_the_newest_event_is_detected(
    store: Store, operator: Operator, clock: FakeClock
) -> None:
    """Deleting a decision event leaves a valid-looking prefix; the approval's recorded chain
    head no longer matches it."""
    made = await _history(store, operator, clock)
    async with store.read() as tx:
        requested, rejected = await tx.events_for(made[1].id)
    await tamper(store, "DELETE FROM approval_events WHERE id = :id", id=rejected.id)
    report = await audit.verify(store)
    assert report.broken is not None
    assert (report.broken.approval_id, report.broken.event_id) == (made[1].id, requested.id)
    assert "newer events were deleted" in report.broken.problem


async def test_moving_the_recorded_head_is_detected(
    store: Store, operator: Operator, clock: FakeClock
) -> None:
    made = await _history(store, operator, clock)
    await tamper(
        store, "UPDATE approvals SET audit_head = :h WHERE id = :id", h="a" * 64, id=made[0].id
    )
    report = await audit.verify(store, made[0].id)
    assert report.broken is not None
    assert "chain head does not match" in report.broken.problem
    assert (await audit.verify(store, made[1].id)).ok


@pytest.mark.parametrize(
    ("column", "value", "says"),
    [
        ("state", "approved", "trail ends in 'pending'"),
        ("decided_by", "mallory", "decided by 'mallory'"),
        ("hash", "e" * 64, "hash recorded when it was requested"),
    ],
)
async def test_a_row_edited_without_its_trail_is_detected(
    store: Store, operator: Operator, clock: FakeClock, column: str, value: str, says: str
) -> None:
    """The simplest tamper: flip the row itself (a pending request marked approved, another
    decider, another hash). The row no longer agrees with the end of its trail."""
    made = await _history(store, operator, clock)
    target = made[2]  # pending, one vote towards its quorum
    await tamper(store, f"UPDATE approvals SET {column} = :v WHERE id = :id", v=value, id=target.id)
    report = await audit.verify(store)
    assert report.broken is not None
    assert report.broken.approval_id == target.id
    assert says in report.broken.problem


@pytest.mark.parametrize("page", [1, 2, 1000])
async def test_verification_pages_through_every_chain(
    store: Store, operator: Operator, clock: FakeClock, page: int
) -> None:
    made = await _history(store, operator, clock)
    assert (await audit.verify(store, page=page)).events_checked == 6
    async with store.read() as tx:
        last = (await tx.events_for(made[0].id))[-1]
    await tamper(
        store, "UPDATE approval_events SET actor = 'cli:mallory' WHERE id = :id", id=last.id
    )
    report = await audit.verify(store, page=page)
    assert report.broken is not None and report.broken.event_id == last.id


async def test_reordered_events_break_the_chain(
    store: Store, operator: Operator, clock: FakeClock
) -> None:
    made = await _history(store, operator, clock)
    async with store.read() as tx:
        first, second = await tx.events_for(made[0].id)
    # Swap the two events' places in the sequence (through -1: (approval_id, seq) is unique).
    for event_id, seq in ((first.id, -1), (second.id, 1), (first.id, 2)):
        await tamper(
            store, "UPDATE approval_events SET seq = :s WHERE id = :id", s=seq, id=event_id
        )
    report = await audit.verify(store, made[0].id)
    assert report.broken is not None and report.broken.event_id == second.id
