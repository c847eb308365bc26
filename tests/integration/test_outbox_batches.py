"""What the outbox costs the database and the network, on SQLite and PostgreSQL.

Proves: jobs that end together are settled in one write transaction, the record of a posted
card (card_messages) in that same transaction, so a batch of card posts costs a claim and a
settle, not two writes per card; one outcome the database refuses does not take the batch
with it (the others are settled, it comes back after its lease); a card posted while its
request was being decided is brought up to date by the settle that records it; on SQLite a
decision's write goes before outbox writes already waiting (the outbox is slowed, never
starved); a busy runner's outcomes wait longer for each other, in fewer writes; the Slack and
Telegram clients and the webhook sender keep their connections open, so many calls travel
over a few connections.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from bot.agent_actions import AgentActions
from bot.card import Card
from bot.clock import FakeClock
from bot.config import parse_config
from bot.intake import create_request
from bot.operator import Actor, Operator
from bot.outbox.cards import CardJobs
from bot.outbox.jobs import JobKind
from bot.outbox.runner import OutboxRunner, OutboxSettings, Record
from bot.outbox.settler import Settler
from bot.outbox.webhooks import WebhookSender
from bot.routing import Directory
from bot.target import Target
from channels.base import MessageRef
from store.migrate import upgrade
from store.records import OutboxJob
from store.repository import Store, Tx
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram
from tests.support import slack_rig, telegram_rig
from tests.support.chat_server import Cleanup, serve
from tests.support.samples import TEST_CONFIG, make_request
from tests.support.store_writes import count_writes

CARDS = 10
HOUR = timedelta(hours=1)


@asynccontextmanager
async def _slack_server(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[slack_rig.SlackRig]:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-test")
    monkeypatch.setenv("SLACK_SIGNING_SECRET", slack_rig.SECRET)
    monkeypatch.setenv("SLACK_TEST_API_KEY", slack_rig.API_KEY)
    cleanup: Cleanup = []
    async with FakeSlack() as slack:
        config = parse_config(slack_rig.slack_config(slack))
        try:
            yield await serve(
                slack_rig.SlackRig, config, store, clock, slack_rig.API_KEY, cleanup, slack=slack
            )
        finally:
            for close in reversed(cleanup):
                await close()


async def test_a_batch_of_card_posts_is_one_claim_and_one_settle_that_records_each_card(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _slack_server(store, clock, monkeypatch) as rig:
        created = [await rig.create(run_id=f"run-{i}") for i in range(CARDS)]
        # The whole batch is settled together (a window no test would wait out).
        runner = OutboxRunner(
            store,
            rig.runner.handlers,
            clock,
            OutboxSettings(batch=CARDS, settle_window=60.0),
        )
        writes = count_writes(store, monkeypatch)
        assert await runner.run_once() == CARDS
        # Before: a claim, then per card a write for its record and one for its job.
        assert writes == [True, True]
        assert len(rig.slack.calls_to("chat.postMessage", ok=True)) == CARDS
        async with store.read() as tx:
            assert {job.state for job in await tx.outbox_jobs()} == {"done"}
            for record in created:
                [message] = await tx.card_messages_for(record["id"])
                assert (message.channel, message.shown_hash) == ("slack", record["hash"])


@dataclass
class _Gate:
    """A chat surface stand-in whose posts wait until the test lets them through."""

    name: str = "slack"
    open: asyncio.Event = field(default_factory=asyncio.Event)
    posting: asyncio.Event = field(default_factory=asyncio.Event)
    updated: list[tuple[MessageRef, Card]] = field(default_factory=list)
    edited: asyncio.Event = field(default_factory=asyncio.Event)

    expected: int = 1

    async def post_card(self, card: Card, target: Target) -> MessageRef:
        self.expected -= 1
        if self.expected <= 0:
            self.posting.set()  # all the posts the test expects are waiting
        await self.open.wait()
        return MessageRef("slack", target.where, f"{card.approval_id}.1")

    async def update_card(self, ref: MessageRef, card: Card) -> None:
        self.updated.append((ref, card))
        self.edited.set()

    async def send_notice(self, target: Target, text: str) -> None:
        raise AssertionError("no notice expected")

    async def send_reply(self, ref: MessageRef, text: str) -> None:
        raise AssertionError("no reply expected")


def _carded(directory_config: dict[str, Any] | None = None) -> Directory:
    config = copy.deepcopy(directory_config or TEST_CONFIG)
    config["slack"] = {}
    config["routes"][0]["notify"] = ["slack:C0FIN"]
    return parse_config(config).directory()


async def test_a_card_posted_while_its_request_was_decided_is_updated_after_its_settle(
    store: Store, clock: FakeClock
) -> None:
    directory = _carded()
    created = await create_request(store, directory, clock, "acme", make_request())
    gate = _Gate()
    cards = CardJobs(store, directory, clock, {"slack": gate})
    handlers = {JobKind.POST_CARD: cards.post, JobKind.UPDATE_CARD: cards.update}
    runner = OutboxRunner(store, handlers, clock, OutboxSettings())
    posting = asyncio.create_task(runner.run_once())
    await gate.posting.wait()
    # Decided while the card is on its way: that transition knew no message to update.
    await Operator(store, directory, clock).approve_shown(
        created.approval.id, created.approval.hash, Actor("alice", "cli")
    )
    gate.open.set()
    assert await posting == 1
    assert await runner.run_once() == 1  # the update the settle queued
    [(ref, card)] = gate.updated
    assert ref.message_id == f"{created.approval.id}.1"
    assert card.state == "approved"
    async with store.read() as tx:
        [message] = await tx.card_messages_for(created.approval.id)
    assert message.rendered_state == "approved"


async def test_a_batch_settle_updates_only_the_card_whose_request_moved_on_its_way(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Settled together, the posted cards' versions come with the batch's locks: the one
    request decided while the cards were on their way gets its card brought up to date,
    the others are left alone."""
    directory = _carded()
    made = [
        await create_request(store, directory, clock, "acme", make_request(run_id=f"run-{i}"))
        for i in range(3)
    ]
    gate = _Gate(expected=3)
    cards = CardJobs(store, directory, clock, {"slack": gate})
    handlers = {JobKind.POST_CARD: cards.post, JobKind.UPDATE_CARD: cards.update}
    settings = OutboxSettings(batch=3, settle_window=60.0)
    runner = OutboxRunner(store, handlers, clock, settings)
    posting = asyncio.create_task(runner.run_once())
    await gate.posting.wait()
    decided = made[1].approval
    await Operator(store, directory, clock).approve_shown(
        decided.id, decided.hash, Actor("alice", "cli")
    )
    writes = count_writes(store, monkeypatch)

    async def locked_alone(*_: object) -> None:
        raise AssertionError("a record of the batch locked its row itself")

    monkeypatch.setattr(Tx, "lock_version", locked_alone)
    gate.open.set()
    assert await posting == 3
    assert writes == [True]  # the three records and settles: one transaction
    monkeypatch.undo()
    async with store.read() as tx:
        updates = [j for j in await tx.outbox_jobs(state="queued") if j.kind == "update_card"]
    assert [j.approval_id for j in updates] == [decided.id]
    # A runner with the default window: this one would wait out its 60 s for a batch of one.
    assert await OutboxRunner(store, handlers, clock, OutboxSettings()).run_once() == 1
    [(ref, card)] = gate.updated
    assert (ref.message_id, card.state) == (f"{decided.id}.1", "approved")


async def test_a_card_handed_over_at_birth_posts_without_reading_its_request_back(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The card job of a request created beside a running runner carries the request as its
    commit left it: the card goes out with no read of the approval; and a decision made
    while that card is on its way still reaches the card."""
    directory = _carded()
    gate = _Gate()
    cards = CardJobs(store, directory, clock, {"slack": gate})
    handlers = {JobKind.POST_CARD: cards.post, JobKind.UPDATE_CARD: cards.update}
    runner = OutboxRunner(store, handlers, clock, OutboxSettings(poll_interval=30.0))
    stop = asyncio.Event()
    running = asyncio.create_task(runner.run(stop, drain=0.01))
    try:
        async with asyncio.timeout(5):
            for _ in range(500):  # until it runs and takes this process's jobs
                if store.commits.taker is runner:
                    break
                await asyncio.sleep(0.01)
            reads: list[str] = []
            read = store.read
            monkeypatch.setattr(store, "read", lambda: reads.append("read") or read())
            created = await create_request(store, directory, clock, "acme", make_request())
            await gate.posting.wait()
            assert reads == []  # handed over with its request: nothing read back
            monkeypatch.setattr(store, "read", read)
            await Operator(store, directory, clock).approve_shown(
                created.approval.id, created.approval.hash, Actor("alice", "cli")
            )
            gate.open.set()
            await gate.edited.wait()
    finally:
        stop.set()
        await running
    [(ref, card)] = gate.updated
    assert ref.message_id == f"{created.approval.id}.1"
    assert card.state == "approved"


@pytest.mark.parametrize("batch", [1, 10], ids=["one job at a time", "all in one batch"])
async def test_a_card_whose_request_moved_three_times_is_edited_once_with_the_last_state(
    store: Store, clock: FakeClock, batch: int
) -> None:
    """Approved, claimed and completed before the outbox came round: each transition queued
    an update of the card, and only the newest one edits it (the others would be
    overwritten at once); every job still ends done."""
    directory = _carded()
    created = await create_request(store, directory, clock, "acme", make_request())
    gate = _Gate()
    gate.open.set()
    cards = CardJobs(store, directory, clock, {"slack": gate})
    handlers = {JobKind.POST_CARD: cards.post, JobKind.UPDATE_CARD: cards.update}
    runner = OutboxRunner(store, handlers, clock, OutboxSettings(batch=batch))
    assert await runner.run_once() == 1  # the card is posted
    approval_id = created.approval.id
    await Operator(store, directory, clock).approve_shown(
        approval_id, created.approval.hash, Actor("alice", "cli")
    )
    actions = AgentActions(store, directory, clock)
    claimed = await actions.claim("acme", approval_id)
    await actions.complete("acme", approval_id, claimed.claim_token, "succeeded")
    ran = 0
    while attempted := await runner.run_once():
        ran += attempted
    assert ran == 3  # one update per transition was queued and each ran...
    [(ref, card)] = gate.updated  # ...but the card was edited once
    assert ref.message_id == f"{approval_id}.1"
    assert card.state == "executed" and card.executed_at is not None
    async with store.read() as tx:
        card_jobs = [job for job in await tx.outbox_jobs() if job.kind in handlers]
        [message] = await tx.card_messages_for(approval_id)
    assert [job.state for job in card_jobs] == ["done"] * 4
    assert message.rendered_state == "executed"


async def test_a_batch_whose_request_is_being_decided_still_records_every_card(
    store: Store, clock: FakeClock
) -> None:
    """A batch settle never waits for a row lock while holding others (it could deadlock
    with a transition locking two requests): it writes its outcomes one by one instead."""
    directory = _carded()
    first, second = [
        (await create_request(store, directory, clock, "acme", make_request(run_id=r))).approval
        for r in ("r1", "r2")
    ]
    gate = _Gate(expected=2)
    cards = CardJobs(store, directory, clock, {"slack": gate})
    settings = OutboxSettings(batch=2, settle_window=60.0)
    runner = OutboxRunner(store, {JobKind.POST_CARD: cards.post}, clock, settings)
    posting = asyncio.create_task(runner.run_once())
    await gate.posting.wait()
    async with store.write() as tx:  # a transition holding the first request's row
        await tx.lock_approval(first.id)
        gate.open.set()
        await asyncio.sleep(0.2)
    assert await posting == 2
    async with store.read() as tx:
        assert {job.state for job in await tx.outbox_jobs()} == {"done"}
        for approval in (first, second):
            [message] = await tx.card_messages_for(approval.id)
            assert message.shown_hash == approval.hash


async def test_an_outcome_the_database_refuses_leaves_the_rest_of_its_batch_settled(
    store: Store, clock: FakeClock
) -> None:
    async with store.write() as tx:
        for i in range(3):
            await tx.enqueue("notice", {"n": i}, now=clock.now(), dedupe_key=f"n{i}")

    async def refused(tx: Tx, _locked: int | None) -> None:
        await tx.enqueue("notice", {}, now=clock.now(), approval_id="no-such-approval")

    async def handler(job: OutboxJob) -> Record | None:
        return Record(refused) if job.payload["n"] == 1 else None

    settings = OutboxSettings(batch=3, settle_window=60.0, lease=OutboxSettings().lease)
    runner = OutboxRunner(store, {"notice": handler}, clock, settings, holder="w1")
    assert await runner.run_once() == 3
    async with store.read() as tx:
        jobs = {job.payload["n"]: job for job in await tx.outbox_jobs()}
    assert (jobs[0].state, jobs[2].state) == ("done", "done")
    # Not written: still leased, so it runs again once the lease is over, as after a crash.
    assert (jobs[1].state, jobs[1].locked_by) == ("queued", "w1")
    clock.advance(settings.lease)
    # A runner with the default window: this one would wait out its 60 s for a batch of one.
    again = OutboxRunner(store, {"notice": handler}, clock, OutboxSettings(), holder="w1")
    assert await again.run_once() == 1


async def test_on_sqlite_a_decision_writes_before_waiting_outbox_writes(tmp_path: Path) -> None:
    store = Store.from_url(f"sqlite+aiosqlite:///{tmp_path}/turns.db")
    await upgrade(store.engine)
    order: list[str] = []

    async def write(name: str, background: bool) -> None:
        async with store.write(background=background):
            order.append(name)

    try:
        async with store.write(background=True):
            waiting = [asyncio.create_task(write(f"outbox{i}", True)) for i in range(2)]
            waiting += [asyncio.create_task(write(f"click{i}", False)) for i in range(10)]
            await asyncio.sleep(0.05)  # every one of them is queued behind this write
        await asyncio.gather(*waiting)
    finally:
        await store.close()
    # Clicks first; an outbox write passed over eight times in a row gets the next turn.
    assert order == [*(f"click{i}" for i in range(8)), "outbox0", "click8", "click9", "outbox1"]


async def test_slack_card_posts_and_homes_reuse_a_few_connections(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _slack_server(store, clock, monkeypatch) as rig:
        for batch in range(3):
            for i in range(CARDS):
                await rig.create(run_id=f"run-{batch}-{i}")
            await rig.drain()
        calls = len(rig.slack.calls)
        assert len(rig.slack.calls_to("chat.postMessage", ok=True)) == 3 * CARDS
        # A client that opened a connection per call would have used `calls` of them.
        assert rig.slack.connections <= calls // 2


async def test_telegram_card_posts_reuse_a_few_connections(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", telegram_rig.TOKEN)
    monkeypatch.setenv("TELEGRAM_WEBHOOK_SECRET", telegram_rig.SECRET)
    monkeypatch.setenv("TELEGRAM_TEST_API_KEY", telegram_rig.API_KEY)
    cleanup: Cleanup = []
    async with FakeTelegram(telegram_rig.TOKEN) as tg:
        config = parse_config(telegram_rig.telegram_config(tg, [f"telegram:{telegram_rig.GROUP}"]))
        rig = await serve(
            telegram_rig.TelegramRig, config, store, clock, telegram_rig.API_KEY, cleanup, tg=tg
        )
        try:
            for batch in range(3):
                for i in range(CARDS):
                    await rig.create(run_id=f"run-{batch}-{i}")
                await rig.drain()
            assert len(tg.calls_to("sendMessage", ok=True)) == 3 * CARDS
            assert tg.connections <= len(tg.calls) // 2
        finally:
            for close in reversed(cleanup):
                await close()


@dataclass
class _Receiver:
    peers: set[Any] = field(default_factory=set)
    count: int = 0

    async def handle(self, request: web.Request) -> web.Response:
        assert request.transport is not None
        self.peers.add(request.transport.get_extra_info("peername"))
        self.count += 1
        return web.Response(text="ok")


async def test_webhooks_to_one_receiver_reuse_a_few_connections(
    store: Store, clock: FakeClock
) -> None:
    receiver = _Receiver()
    app = web.Application()
    app.router.add_post("/hook", receiver.handle)
    server = web.AppRunner(app, access_log=None)
    await server.setup()
    await web.TCPSite(server, "127.0.0.1", 0).start()
    config = copy.deepcopy(TEST_CONFIG)
    config["tenants"][0] |= {
        "webhook_url": f"http://127.0.0.1:{server.addresses[0][1]}/hook",
        "webhook_secret_env": "ACME_SECRET",
    }
    directory = parse_config(config).directory()
    secret = "whsec_MfKQ9r8GKYqrTYlQX7VZ1h0QkCBqRy1n0eBd9CWr0ds="
    operator = Operator(store, directory, clock)
    for i in range(3 * CARDS):
        created = await create_request(store, directory, clock, "acme", make_request(run_id=f"{i}"))
        await operator.approve_shown(
            created.approval.id, created.approval.hash, Actor("alice", "cli")
        )
    settings = OutboxSettings()
    try:
        async with aiohttp.ClientSession() as session:
            sender = WebhookSender(session, directory, clock, environ={"ACME_SECRET": secret})
            runner = OutboxRunner(store, {"webhook": sender}, clock, settings)
            while await runner.run_once():
                pass
    finally:
        await server.cleanup()
    assert receiver.count == 3 * CARDS
    assert len(receiver.peers) <= settings.batch < receiver.count


async def _settles_spaced(store: Store, clock: FakeClock, window: float) -> int:
    """Claim six jobs, have their outcomes arrive 30 ms apart at a Settler whose window is
    told by a callable (as the runner's is, by how late its loop runs); how many write
    transactions settled them."""
    async with store.write() as tx:
        for i in range(6):
            await tx.enqueue("notice", {"n": i}, now=clock.now(), dedupe_key=f"s-{window}-{i}")
    holder = f"settler-{window}"
    async with store.write() as tx:
        jobs = await tx.claim_jobs(
            holder, now=clock.now(), lease_until=clock.now() + HOUR, limit=6, kinds=["notice"]
        )
    assert len(jobs) == 6
    writes = 0
    write = store.write

    def counted(*, background: bool = False) -> Any:
        nonlocal writes
        writes += 1
        return write(background=background)

    store.write = counted  # type: ignore[method-assign]
    try:
        settler = Settler(store, holder, clock, lambda: window, batch=20)
        futures = []
        for job in jobs:
            futures.append(settler.submit(job, "done"))
            await asyncio.sleep(0.03)
        assert await asyncio.gather(*futures) == [True] * 6
    finally:
        store.write = write  # type: ignore[method-assign]
    return writes


async def test_outcomes_wait_the_window_the_runner_names_at_each_settle(
    store: Store, clock: FakeClock
) -> None:
    """A runner whose loop runs late names `busy_settle_window` (50 ms): outcomes arriving
    over 150 ms then share one write; with no window each is written on its own."""
    assert await _settles_spaced(store, clock, window=0.5) == 1
    assert await _settles_spaced(store, clock, window=0.0) >= 4
