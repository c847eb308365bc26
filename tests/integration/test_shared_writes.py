"""Creates that wait for SQLite's write lock together share one transaction (group commit,
store/shared_writes.py).

Proves, on SQLite: creates queued behind another write commit in one transaction, each as it
was asked (none lost, none merged); a block that fails in a shared transaction is undone
alone, with the outbox leases it took, and the others commit, while a block under which
SQLite ends the whole transaction fails every block of the group (none is told it landed);
a request superseded by a later create of its step in the same transaction hands its card
job over without the stale request (its runner reads it afresh, and posts no card for it);
a decision queued before them is not overtaken by creates that arrive after it; a caller
cancelled while it waits (the one whose arrival started the group included) writes nothing
and holds no one up. On PostgreSQL a shared write is a write of its own, and the same
concurrent creates all land.
"""

from __future__ import annotations

import asyncio
import copy
import sqlite3
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

import pytest

from bot.clock import FakeClock
from bot.config import parse_config
from bot.errors import StoreUnavailable
from bot.intake import Created, create_request
from bot.routing import Directory
from store.records import OutboxJob
from store.repository import Block, Store, Tx
from store.shared_writes import TransactionLost
from tests.support.databases import SQLITE_ONLY
from tests.support.samples import TEST_CONFIG, make_request

CREATES = 8


def _counting_transactions(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Every write transaction `store` begins from now on (shared ones once)."""
    begun: list[bool] = []
    transaction = store._transaction

    def counted(background: bool) -> Any:
        begun.append(background)
        return transaction(background)

    monkeypatch.setattr(store, "_transaction", counted)
    return begun


@asynccontextmanager
async def _lock_held(store: Store) -> AsyncIterator[None]:
    """A write holding the lock (on SQLite, this process's writers queue behind it)."""
    async with store.write():
        yield


async def _queued(*tasks: Awaitable[Any]) -> list[asyncio.Task[Any]]:
    """Start `tasks` and let each run until it waits (for the lock, on SQLite)."""
    started = [asyncio.ensure_future(task) for task in tasks]
    for _ in range(20):
        await asyncio.sleep(0)
    return started


async def test_creates_waiting_together_commit_once_and_each_lands(
    store: Store, clock: FakeClock, directory: Directory, monkeypatch: pytest.MonkeyPatch
) -> None:
    begun = _counting_transactions(store, monkeypatch)
    async with _lock_held(store):
        creates = await _queued(
            *(
                create_request(store, directory, clock, "acme", make_request(run_id=f"run-{i}"))
                for i in range(CREATES)
            )
        )
    results: list[Created] = await asyncio.gather(*creates)
    # SQLite: the held write, then one transaction for all the creates queued behind it.
    # PostgreSQL: a transaction each (its writers do not queue for one lock).
    sqlite = store.engine.dialect.name == "sqlite"
    assert len(begun) == (2 if sqlite else 1 + CREATES)
    assert all(result.created for result in results)
    assert len({result.approval.id for result in results}) == CREATES
    async with store.read() as tx:
        for result in results:
            stored = await tx.get_approval(result.approval.id)
            assert stored is not None and stored.run_id == result.approval.run_id
            assert [event.type for event in await tx.events_for(stored.id)] == ["requested"]


class _Leases:
    """An outbox runner's side of leasing at birth (store/commits.py): what it was handed."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.handed: list[tuple[list[OutboxJob], int]] = []

    def lease(self, kind: str) -> tuple[str, datetime]:
        return "here", self.clock.now() + timedelta(minutes=1)

    def take(self, jobs: list[OutboxJob], leased: int) -> None:
        self.handed.append((list(jobs), leased))


def _job(clock: FakeClock, key: str, fail: bool = False) -> Block:
    """A block queueing one outbox job under `key` (then failing, if asked)."""

    async def block(tx: Tx) -> str:
        await tx.enqueue("webhook", {"key": key}, now=clock.now(), dedupe_key=key)
        if fail:
            raise RuntimeError(f"{key} refused")
        return key

    return block


async def _job_keys(store: Store) -> list[str]:
    async with store.read() as tx:
        return sorted(str(job.dedupe_key) for job in await tx.outbox_jobs())


async def _around(store: Store, clock: FakeClock, middle: Block) -> tuple[list[Any], _Leases]:
    """`middle` in a shared transaction between blocks queueing jobs "a" and "c": each
    caller's outcome (or error), and what the runner was handed."""
    leases = _Leases(clock)
    undo = store.commits.hand_to(leases)
    async with _lock_held(store):
        queued = await _queued(
            store.write_shared(_job(clock, "a")),
            store.write_shared(middle),
            store.write_shared(_job(clock, "c")),
        )
    outcomes = await asyncio.gather(*queued, return_exceptions=True)
    undo()
    return outcomes, leases


@SQLITE_ONLY
async def test_a_block_that_fails_in_a_shared_transaction_is_undone_alone(
    store: Store, clock: FakeClock
) -> None:
    outcomes, leases = await _around(store, clock, _job(clock, "b", fail=True))
    assert outcomes[0] == "a" and outcomes[2] == "c"
    assert isinstance(outcomes[1], RuntimeError) and str(outcomes[1]) == "b refused"
    assert await _job_keys(store) == ["a", "c"]
    # b's lease came back on its own (no job); a's and c's jobs went over at the one commit.
    assert [([job.dedupe_key for job in jobs], n) for jobs, n in leases.handed] == [
        ([], 1),
        (["a", "c"], 2),
    ]


@SQLITE_ONLY
async def test_a_block_under_which_sqlite_ends_the_transaction_fails_the_whole_group(
    store: Store, clock: FakeClock
) -> None:
    async def ended(tx: Tx) -> None:
        # What SQLite may do on an I/O error or a full disk: roll the whole transaction
        # back, not only the failing statement.
        await tx.enqueue("webhook", {}, now=clock.now(), dedupe_key="b")
        driver = (await tx.conn.get_raw_connection()).driver_connection
        await driver.write_now("ROLLBACK")
        raise sqlite3.OperationalError("disk I/O error")

    outcomes, leases = await _around(store, clock, ended)
    # "a" ran before "b" and was rolled back with it: no caller may be told it landed.
    assert all(isinstance(outcome, TransactionLost) for outcome in outcomes), outcomes
    assert isinstance(outcomes[0], StoreUnavailable)
    assert await _job_keys(store) == []
    assert [([job.dedupe_key for job in jobs], n) for jobs, n in leases.handed] == [([], 2)]
    # The connection went back sound: the next write lands.
    assert await store.write_shared(_job(clock, "d")) == "d"
    assert await _job_keys(store) == ["d"]


@SQLITE_ONLY
async def test_a_decision_queued_before_creates_is_not_overtaken_by_them(
    store: Store, clock: FakeClock
) -> None:
    order: list[str] = []

    def shared(name: str) -> Block:
        async def block(tx: Tx) -> None:
            await tx.enqueue("webhook", {}, now=clock.now(), dedupe_key=name)
            order.append(name)

        return block

    async def decision() -> None:
        async with store.write() as tx:
            await tx.enqueue("webhook", {}, now=clock.now(), dedupe_key="decision")
            order.append("decision")

    async with _lock_held(store):
        # A create waits for the lock (its group forming), then a decision, then another
        # create: that one must not join the first create's group, ahead of the decision.
        first = await _queued(store.write_shared(shared("create-1")))
        then = await _queued(decision())
        last = await _queued(store.write_shared(shared("create-2")))
    await asyncio.gather(*first, *then, *last)
    assert order == ["create-1", "decision", "create-2"]


@SQLITE_ONLY
@pytest.mark.parametrize("gone", [0, 1], ids=["the one that started the group", "another"])
async def test_a_caller_cancelled_while_it_waits_writes_nothing_and_holds_no_one_up(
    store: Store, clock: FakeClock, gone: int
) -> None:
    keys = ["first", "second", "third"]
    async with _lock_held(store):
        queued = await _queued(*(store.write_shared(_job(clock, key)) for key in keys))
        queued[gone].cancel()  # a client gone, or the server stopping
        await _queued()
    async with asyncio.timeout(5):
        outcomes = await asyncio.gather(*queued, return_exceptions=True)
    assert isinstance(outcomes[gone], asyncio.CancelledError)
    kept = [key for i, key in enumerate(keys) if i != gone]
    assert [o for i, o in enumerate(outcomes) if i != gone] == kept
    assert await _job_keys(store) == sorted(kept)


@SQLITE_ONLY
async def test_a_request_superseded_in_its_own_group_hands_over_no_stale_card(
    store: Store, clock: FakeClock
) -> None:
    config = copy.deepcopy(TEST_CONFIG)
    config["slack"] = {}
    config["routes"][0]["notify"] = ["slack:C0FIN"]
    directory = parse_config(config).directory()
    leases = _Leases(clock)
    undo = store.commits.hand_to(leases)
    step = {"name": "refund"}
    async with _lock_held(store):
        queued = await _queued(
            *(
                create_request(
                    store,
                    directory,
                    clock,
                    "acme",
                    make_request(
                        step=step,
                        tool={"name": "stripe.refunds.create", "arguments": {"amount": amount}},
                    ),
                )
                for amount in (100, 200)
            )
        )
    older, newer = await asyncio.gather(*queued)
    undo()
    assert [s.approval.id for s in newer.superseded] == [older.approval.id]
    [(jobs, _)] = leases.handed
    carried = {job.approval_id: job.subject for job in jobs if job.kind == "post_card"}
    # The older request's job carries nothing (it moved after its job was queued); the
    # newer one's carries the request as committed.
    assert carried[older.approval.id] is None
    newest = carried[newer.approval.id]
    assert newest is not None and newest.state == "pending"
