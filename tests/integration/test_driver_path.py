"""The hot statements run on the driver's own connection (store/fast_path.py) and must be
indistinguishable from Core: the records they hand back are what a read returns afterwards,
and their failures are judged as Core's are (a refused value is bad input, a missing table
says to upgrade, a constraint violation stays an integrity error)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from sqlalchemy.exc import IntegrityError

from bot import audit
from bot.chat_memory import ChatMemory
from bot.errors import InvalidRequest, SchemaOutOfDate
from bot.intake import create_request, validate_request
from bot.operator import Actor, Operator
from store.repository import Store
from tests.support.databases import POSTGRES_ONLY
from tests.support.samples import approval_record, request_body


async def test_records_from_the_driver_path_are_what_a_read_returns(
    store: Store, directory, clock
) -> None:
    body = request_body(
        run_id="run-driver",
        step={"node": "refund", "n": 1.5},
        preconditions={"balance_at_least": 12000, "list": [1, "two", None, True]},
        resume={"thread": "t-ü", "nested": {"deep": [{"x": None}]}},
    )
    created = await create_request(store, directory, clock, "acme", validate_request(body))
    async with store.read() as tx:
        assert await tx.get_approval(created.approval.id) == created.approval
        (event,) = await tx.events_for(created.approval.id)
    assert event.type == "requested" and event.hash == created.approval.audit_head

    decision = await Operator(store, directory, clock).approve_shown(
        created.approval.id, created.approval.hash, Actor("alice", via="test")
    )
    async with store.read() as tx:
        stored = await tx.get_approval(created.approval.id)
        events = await tx.events_for(created.approval.id)
    assert stored == decision.approval
    assert [e.type for e in events] == ["requested", "approved"]
    assert audit.chain_problem(stored, events) is None


async def test_a_constraint_violation_on_the_driver_path_stays_an_integrity_error(
    store: Store, directory, clock
) -> None:
    created = await create_request(
        store, directory, clock, "acme", validate_request(request_body(run_id="run-dup"))
    )
    async with store.read() as tx:
        (event,) = await tx.events_for(created.approval.id)
    again = {f.name: getattr(event, f.name) for f in dataclasses.fields(event) if f.name != "id"}
    with pytest.raises(IntegrityError):
        async with store.write() as tx:
            await tx.get_approval(created.approval.id)  # the transaction is open: driver path
            await tx.insert_event(again)  # the same (approval_id, seq) again


async def test_a_missing_table_on_the_driver_path_says_to_upgrade(store: Store, clock) -> None:
    async with store.engine.begin() as conn:
        await conn.exec_driver_sql("DROP TABLE outbox")
    with pytest.raises(SchemaOutOfDate, match="signoff db upgrade"):
        async with store.write() as tx:
            await tx.get_approval("x")
            await tx.enqueue("webhook", {"x": 1}, now=clock.now())


@POSTGRES_ONLY  # SQLite ignores lengths
async def test_a_value_refused_on_the_driver_path_is_invalid_input(store: Store) -> None:
    too_long = dataclasses.asdict(approval_record(tenant="t" * 200))  # the column holds 128
    del too_long["votes"]  # read from `votes`, not a column
    with pytest.raises(InvalidRequest, match="refused a value"):
        async with store.write() as tx:
            await tx.get_approval("x")
            await tx.insert_approval(too_long)


async def test_card_messages_and_votes_read_on_the_driver_path_are_what_was_written(
    store: Store, directory, clock
) -> None:
    created = await create_request(
        store, directory, clock, "acme", validate_request(request_body(run_id="run-cards"))
    )
    aid, now = created.approval.id, clock.now()
    async with store.write() as tx:
        await tx.get_approval(aid)  # the transaction is open: what follows takes the driver
        posted = await tx.insert_card_message(
            {
                "approval_id": aid,
                "channel": "slack",
                "address": "C0FINANCE",
                "message_id": "1700000000.000100",
                "shown_hash": created.approval.hash,
                "rendered_state": "pending",
                "created_at": now,
                "updated_at": now,
            }
        )
        again = await tx.insert_card_message(  # a message recorded twice is found, not added
            {k: v for k, v in dataclasses.asdict(posted).items() if k != "id"}
        )
        vote = {"approval_id": aid, "principal": "alice", "decision": "approve"}
        assert await tx.insert_vote({**vote, "as_delegate_of": None, "note": "ok", "at": now})
    assert again == posted
    async with store.read() as tx:
        assert await tx.card_message(posted.id) == posted
        assert await tx.card_message_at("slack", "C0FINANCE", "1700000000.000100") == posted
        assert await tx.card_message_at("slack", "C0FINANCE", "1700000000.000200") is None
        assert await tx.card_messages_for(aid) == [posted]
        [recorded] = await tx.votes_for(aid)
    assert (recorded.principal, recorded.decision, recorded.note, recorded.at) == (
        "alice",
        "approve",
        "ok",
        now,
    )


async def test_a_delivery_recorded_alone_is_seen_at_once_by_another_replica(
    store: Store, db_url: str, clock
) -> None:
    # The replay guard's record is one statement, written without BEGIN and COMMIT on
    # PostgreSQL (Store.write_alone): it must be committed when it returns, not left open on
    # a pooled connection where another replica would not see it.
    here = ChatMemory(store, clock)
    assert await here.first_delivery("slack", "v0=replayed") is True
    replica = Store.from_url(db_url)
    try:
        there = ChatMemory(replica, clock)
        # Left uncommitted, the first record would hold this insert waiting for its row
        # lock (PostgreSQL): fail, not hang.
        async with asyncio.timeout(10):
            assert await there.first_delivery("slack", "v0=replayed") is False
        assert await there.first_delivery("slack", "v0=new") is True
    finally:
        await replica.close()
    assert await here.first_delivery("slack", "v0=new") is False


async def test_a_card_read_with_its_request_is_the_card_and_the_request(
    store: Store, directory, clock
) -> None:
    created = await create_request(
        store, directory, clock, "acme", validate_request(request_body(run_id="run-card"))
    )
    now = clock.now()
    async with store.write() as tx:
        card = await tx.insert_card_message(
            {
                "approval_id": created.approval.id,
                "channel": "slack",
                "address": "C0FIN",
                "message_id": "1700000000.000100",
                "shown_hash": created.approval.hash,
                "rendered_state": created.approval.state,
                "created_at": now,
                "updated_at": now,
            }
        )
    async with store.read() as tx:
        # The card update's one read gives what the two reads it replaced gave.
        assert await tx.card_with_approval(card.id) == (
            await tx.card_message(card.id),
            await tx.get_approval(created.approval.id),
        )
        assert await tx.card_with_approval(card.id + 1) is None
