"""The outbox runner and signed webhooks, on real SQLite and PostgreSQL, against a real
webhook receiver on loopback, with a FakeClock driving leases and backoff.

Proves: a decision's webhook arrives signed and verifiable; failures are retried with
exponential backoff and jitter under a stable delivery id and identical body bytes; after
the attempt limit the job is dead until requeued; a job whose worker died is taken over after
its lease (and the dead worker cannot settle it any more); two runners sharing the queue never
run one job twice while its lease holds.
"""

from __future__ import annotations

import asyncio
import copy
import json
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from bot.app import outbox_handlers, outbox_settings
from bot.canonical import MAX_DEPTH
from bot.clock import FakeClock
from bot.config import parse_config
from bot.destinations import is_public
from bot.errors import InvalidRequest, NotCanonical
from bot.intake import create_request
from bot.metrics import Metrics
from bot.operator import Actor, Operator
from bot.outbox.jobs import JobKind
from bot.outbox.runner import OutboxRunner, OutboxSettings
from bot.outbox.webhooks import WebhookSender
from bot.routing import Directory
from store.records import Approval
from store.repository import Store
from tests.support.samples import TEST_CONFIG, make_request, standard_webhook_signature

SECRET = "whsec_MfKQ9r8GKYqrTYlQX7VZ1h0QkCBqRy1n0eBd9CWr0ds="
NEXT_SECRET = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
SETTINGS = OutboxSettings(
    lease=timedelta(seconds=30),
    max_attempts=4,
    backoff_base=timedelta(seconds=10),
    backoff_max=timedelta(minutes=5),
)


@dataclass
class Receiver:
    """A webhook endpoint in this event loop: records requests, answers `status`."""

    url: str = ""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    gate: asyncio.Event | None = None
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.Response:
        self.received.append((dict(request.headers), await request.read()))
        self.arrived.set()
        if self.gate is not None:
            await self.gate.wait()
        return web.Response(status=self.status, headers=self.headers, text="x")


@asynccontextmanager
async def serving() -> AsyncIterator[Receiver]:
    hooks = Receiver()
    app = web.Application()
    app.router.add_post("/hook", hooks.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    hooks.url = f"http://127.0.0.1:{runner.addresses[0][1]}/hook"
    try:
        yield hooks
    finally:
        if hooks.gate is not None:
            hooks.gate.set()
        await runner.cleanup()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with serving() as hooks:
        yield hooks


@pytest.fixture
def hooked(receiver: Receiver) -> Directory:
    config = copy.deepcopy(TEST_CONFIG)
    config["tenants"][0] = {
        "name": "acme",
        "webhook_url": receiver.url,
        "webhook_secret_env": "ACME_SECRET",
        # The tests' receivers, callbacks included, listen on loopback.
        "allow_private_callbacks": True,
    }
    return parse_config(config).directory()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as http:
        yield http


def _runner(
    store: Store,
    directory: Directory,
    clock: FakeClock,
    session: aiohttp.ClientSession,
    *,
    holder: str = "w1",
    environ: dict[str, str] | None = None,
    metrics: Metrics | None = None,
) -> OutboxRunner:
    sender = WebhookSender(
        session, directory, clock, environ={"ACME_SECRET": SECRET} if environ is None else environ
    )
    # Jitter pinned to its maximum so the schedule is exact; the jitter range is unit-tested.
    return OutboxRunner(
        store,
        {"webhook": sender},
        clock,
        SETTINGS,
        holder=holder,
        rand=lambda: 1.0,
        metrics=metrics,
    )


async def _approved(
    store: Store, directory: Directory, clock: FakeClock, run_id: str = "r", **body: Any
) -> Approval:
    created = await create_request(
        store, directory, clock, "acme", make_request(run_id=run_id, **body)
    )
    decision = await Operator(store, directory, clock).approve_shown(
        created.approval.id, created.approval.hash, Actor("alice", "cli")
    )
    return decision.approval


async def _job(store: Store, approval_id: str) -> Any:
    async with store.read() as tx:
        [job] = await tx.outbox_jobs(approval_id=approval_id)
    return job


async def test_a_decision_webhook_arrives_signed(
    store: Store,
    hooked: Directory,
    clock: FakeClock,
    receiver: Receiver,
    session: aiohttp.ClientSession,
) -> None:
    approval = await _approved(store, hooked, clock)
    assert await _runner(store, hooked, clock, session).run_once() == 1
    [(headers, body)] = receiver.received
    # Standard Webhooks, signed at the Operator's clock (a FakeClock here, so the signature is
    # recomputed from the specification rather than checked against the wall clock).
    timestamp = int(clock.now().timestamp())
    assert headers["webhook-id"] == f"{approval.id}.2"
    assert headers["webhook-timestamp"] == str(timestamp)
    assert headers["webhook-signature"] == standard_webhook_signature(
        SECRET, f"{approval.id}.2", timestamp, body
    )
    assert json.loads(body)["approval"]["state"] == "approved"
    job = await _job(store, approval.id)
    assert (job.state, job.attempts, job.locked_by) == ("done", 1, None)


async def test_failures_back_off_then_die_then_retry_delivers(
    store: Store,
    hooked: Directory,
    clock: FakeClock,
    receiver: Receiver,
    session: aiohttp.ClientSession,
) -> None:
    approval = await _approved(store, hooked, clock)
    metrics = Metrics()
    runner = _runner(store, hooked, clock, session, metrics=metrics)
    receiver.status = 503
    gaps = []
    for attempt in range(1, SETTINGS.max_attempts + 1):
        assert await runner.run_once() == 1
        job = await _job(store, approval.id)
        assert job.attempts == attempt
        if attempt < SETTINGS.max_attempts:
            assert job.state == "queued"
            assert "HTTP 503" in job.last_error
            gap = job.run_after - clock.now()
            gaps.append(gap.total_seconds())
            assert await runner.run_once() == 0  # not due yet
            clock.advance(gap)
    assert gaps == [10, 20, 40]  # base 10 s, doubling (jitter pinned at its maximum)
    job = await _job(store, approval.id)
    assert job.state == "dead"
    clock.advance(hours=1)
    assert await runner.run_once() == 0  # the dead stay dead
    await metrics.refresh(store, clock.now())
    assert 'signoff_outbox_dead_jobs{kind="webhook"} 1.0' in metrics.render().decode()

    # Every attempt carried the same delivery id and the same bytes.
    assert len({h["webhook-id"] for h, _ in receiver.received}) == 1
    assert len({body for _, body in receiver.received}) == 1

    async with store.write() as tx:
        assert await tx.requeue_job(job.id, now=clock.now()) is not None
    receiver.status = 200
    assert await runner.run_once() == 1
    assert (await _job(store, approval.id)).state == "done"
    assert len(receiver.received) == SETTINGS.max_attempts + 1


@pytest.mark.parametrize(
    ("retry_after", "wait"),
    [("120", timedelta(seconds=120)), ("99999999999", SETTINGS.backoff_max)],
    ids=["honoured", "capped at backoff_max"],
)
async def test_retry_after_is_honoured_within_the_backoff_ceiling(
    store: Store,
    hooked: Directory,
    clock: FakeClock,
    receiver: Receiver,
    session: aiohttp.ClientSession,
    retry_after: str,
    wait: timedelta,
) -> None:
    approval = await _approved(store, hooked, clock)
    receiver.status, receiver.headers = 429, {"Retry-After": retry_after}
    await _runner(store, hooked, clock, session).run_once()
    job = await _job(store, approval.id)
    assert job.run_after - clock.now() == wait


async def test_a_missing_secret_never_sends_unsigned(
    store: Store,
    hooked: Directory,
    clock: FakeClock,
    receiver: Receiver,
    session: aiohttp.ClientSession,
) -> None:
    approval = await _approved(store, hooked, clock)
    await _runner(store, hooked, clock, session, environ={}).run_once()
    assert receiver.received == []
    job = await _job(store, approval.id)
    assert "$ACME_SECRET: it is not set" in job.last_error


async def test_while_rotating_each_webhook_is_signed_with_both_secrets(
    store: Store,
    receiver: Receiver,
    clock: FakeClock,
    session: aiohttp.ClientSession,
) -> None:
    config = copy.deepcopy(TEST_CONFIG)
    config["tenants"][0] = {
        "name": "acme",
        "webhook_url": receiver.url,
        "webhook_secret_env": ["ACME_SECRET", "ACME_NEXT_SECRET"],
    }
    rotating = parse_config(config).directory()
    approval = await _approved(store, rotating, clock)
    environ = {"ACME_SECRET": SECRET, "ACME_NEXT_SECRET": NEXT_SECRET}
    await _runner(store, rotating, clock, session, environ=environ).run_once()
    [(headers, body)] = receiver.received
    timestamp, delivery = int(clock.now().timestamp()), f"{approval.id}.2"
    assert headers["webhook-signature"].split(" ") == [
        standard_webhook_signature(secret, delivery, timestamp, body)
        for secret in (SECRET, NEXT_SECRET)
    ]


async def test_a_secret_no_receiver_could_rebuild_is_never_used(
    store: Store,
    hooked: Directory,
    clock: FakeClock,
    receiver: Receiver,
    session: aiohttp.ClientSession,
) -> None:
    approval = await _approved(store, hooked, clock)
    await _runner(store, hooked, clock, session, environ={"ACME_SECRET": "s3cret"}).run_once()
    assert receiver.received == []
    job = await _job(store, approval.id)
    assert "$ACME_SECRET: it does not start with whsec_" in job.last_error


async def test_a_dead_workers_job_is_taken_over_after_its_lease(
    store: Store,
    hooked: Directory,
    clock: FakeClock,
    receiver: Receiver,
    session: aiohttp.ClientSession,
) -> None:
    approval = await _approved(store, hooked, clock)
    receiver.gate = asyncio.Event()
    crashed = _runner(store, hooked, clock, session, holder="crashed")
    stuck = asyncio.create_task(crashed.run_once())
    await receiver.arrived.wait()
    stuck.cancel()  # the process dies mid-delivery: no release, no settle
    with pytest.raises(asyncio.CancelledError):
        await stuck
    assert (await _job(store, approval.id)).locked_by == "crashed"

    receiver.gate.set()
    survivor = _runner(store, hooked, clock, session, holder="survivor")
    assert await survivor.run_once() == 0  # the lease still holds
    clock.advance(SETTINGS.lease)
    assert await survivor.run_once() == 1
    job = await _job(store, approval.id)
    assert (job.state, job.attempts) == ("done", 2)
    # The crashed worker, were it to come back, can no longer settle the job.
    async with store.write() as tx:
        assert not await tx.finish_job(job.id, "crashed", now=clock.now())


async def test_two_runners_never_run_a_leased_job_twice(
    db_url: str,
    hooked: Directory,
    clock: FakeClock,
    receiver: Receiver,
    session: aiohttp.ClientSession,
) -> None:
    stores = [Store.from_url(db_url), Store.from_url(db_url)]
    try:
        approvals = [await _approved(stores[0], hooked, clock, f"r-{i}") for i in range(30)]
        runners = [_runner(s, hooked, clock, session, holder=f"w{i}") for i, s in enumerate(stores)]

        async def drain(runner: OutboxRunner) -> int:
            total = 0
            while n := await runner.run_once():
                total += n
            return total

        counts = await asyncio.gather(*(drain(r) for r in runners))
        assert sum(counts) == 30
        deliveries = [h["webhook-id"] for h, _ in receiver.received]
        assert sorted(deliveries) == sorted(f"{a.id}.2" for a in approvals)
    finally:
        for s in stores:
            await s.close()


async def test_stopping_releases_held_jobs_without_counting_the_attempt(
    store: Store,
    hooked: Directory,
    clock: FakeClock,
    receiver: Receiver,
    session: aiohttp.ClientSession,
) -> None:
    approval = await _approved(store, hooked, clock)
    receiver.gate = asyncio.Event()
    runner = _runner(store, hooked, clock, session)
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop))
    await receiver.arrived.wait()
    stop.set()
    task.cancel()  # shutdown gave up waiting on the in-flight delivery
    with pytest.raises(asyncio.CancelledError):
        await task
    job = await _job(store, approval.id)
    assert (job.state, job.locked_by, job.attempts) == ("queued", None, 0)


async def test_a_hung_receiver_does_not_hold_up_other_webhooks(
    store: Store,
    hooked: Directory,
    clock: FakeClock,
    receiver: Receiver,
    session: aiohttp.ClientSession,
) -> None:
    receiver.gate = asyncio.Event()  # the tenant's receiver accepts and never answers
    await _approved(store, hooked, clock, "r-slow")
    runner = _runner(store, hooked, clock, session)
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop, drain=0.1))
    try:
        await asyncio.wait_for(receiver.arrived.wait(), 5)
        async with serving() as other:
            fast = await _approved(store, hooked, clock, "r-fast", callback_url=other.url)
            runner.wake()
            # Well inside the hung delivery's 10 s timeout.
            await asyncio.wait_for(other.arrived.wait(), 5)
            [(headers, _)] = other.received
            assert headers["webhook-id"] == f"{fast.id}.2"
    finally:
        stop.set()
        await task


@pytest.mark.alone  # it measures the event loop's lag
async def test_while_the_server_is_busy_the_outbox_keeps_busy_concurrency_jobs_in_flight(
    store: Store, hooked: Directory, clock: FakeClock
) -> None:
    config = copy.deepcopy(TEST_CONFIG)
    config["outbox"] = {
        "concurrency": 16,
        "busy_concurrency": 2,
        "busy_lag": 0.01,
        "per_destination": 16,
        "per_tenant": 16,
        "poll_interval": 0.01,
    }
    settings = outbox_settings(parse_config(config))
    gate = asyncio.Event()
    in_flight = 0
    changed = asyncio.Condition()

    async def held(job: object) -> None:
        nonlocal in_flight
        async with changed:
            in_flight += 1
            changed.notify_all()
        await gate.wait()
        in_flight -= 1

    async def flood() -> None:
        # What a flood of requests does to the server's loop: every turn runs 20 ms late.
        while True:
            time.sleep(0.02)  # noqa: ASYNC251 - blocking the loop is the point
            await asyncio.sleep(0)

    async def until(count: int) -> None:
        async with changed:
            await changed.wait_for(lambda: in_flight == count)

    # Twelve webhook jobs, due a minute from the runner's start.
    start = clock.now()
    clock.advance(minutes=1)
    for i in range(12):
        await _approved(store, hooked, clock, f"r-{i}")
    due = clock.now()
    clock.set(start)
    runner = OutboxRunner(store, {"webhook": held}, clock, settings)
    stop = asyncio.Event()
    busy = asyncio.create_task(flood())
    task = asyncio.create_task(runner.run(stop, drain=0.1))
    try:
        await asyncio.sleep(0.2)  # the runner has seen the loop running late
        clock.set(due)
        runner.wake()
        await asyncio.wait_for(until(2), 5)
        await asyncio.sleep(0.3)  # ten more jobs are due meanwhile
        assert in_flight == 2
        busy.cancel()
        # The flood is over: the runner catches up (12 = its kind's share of 16 slots).
        await asyncio.wait_for(until(12), 5)
    finally:
        busy.cancel()
        gate.set()
        stop.set()
        await task


async def test_a_job_outliving_its_own_lease_is_not_started_twice_by_its_worker(
    store: Store, hooked: Directory, clock: FakeClock
) -> None:
    approval = await _approved(store, hooked, clock)
    calls = 0
    gate = asyncio.Event()
    started = asyncio.Event()

    async def slow(job: object) -> None:
        nonlocal calls
        calls += 1
        started.set()
        await gate.wait()

    settings = OutboxSettings(lease=timedelta(seconds=30), poll_interval=0.01)
    runner = OutboxRunner(store, {"webhook": slow}, clock, settings, holder="w1")
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop))
    await started.wait()
    clock.advance(seconds=31)  # the lease runs out while the attempt is in flight
    for _ in range(20):  # let the runner poll (and re-claim) a few times
        await asyncio.sleep(0.01)
    gate.set()
    stop.set()
    await task
    assert calls == 1
    assert (await _job(store, approval.id)).state == "done"


async def test_delivered_jobs_are_pruned_after_keep_done_and_dead_ones_kept(
    store: Store,
    hooked: Directory,
    clock: FakeClock,
    receiver: Receiver,
    session: aiohttp.ClientSession,
) -> None:
    delivered = await _approved(store, hooked, clock, "r-ok")
    runner = _runner(store, hooked, clock, session)
    assert await runner.run_once() == 1
    failing = await _approved(store, hooked, clock, "r-dead")
    receiver.status = 500
    for _ in range(SETTINGS.max_attempts):
        await runner.run_once()
        clock.advance(SETTINGS.backoff_max)
    assert (await _job(store, failing.id)).state == "dead"

    clock.set((await _job(store, delivered.id)).done_at + SETTINGS.keep_done)
    assert await runner.prune() == 0  # exactly keep_done old: still kept
    clock.advance(seconds=1)
    assert await runner.prune() == 1
    async with store.read() as tx:
        assert await tx.outbox_jobs(approval_id=delivered.id) == []
    clock.advance(days=30)  # long past keep_done for the dead job too
    assert await runner.prune() == 0
    assert (await _job(store, failing.id)).state == "dead"


async def test_the_handler_table_performs_every_kind_of_job_a_transition_can_queue(
    store: Store, clock: FakeClock
) -> None:
    """A job kind without a handler would sit queued forever: the one table the server,
    the worker and the test servers use covers every JobKind, and one that leaves webhooks
    out must say so rather than get a table that silently lacks them."""
    directory = parse_config(copy.deepcopy(TEST_CONFIG)).directory()
    async with aiohttp.ClientSession() as session:
        table = outbox_handlers(store, directory, clock, {}, session)
    assert set(table) == set(JobKind)
    assert all(callable(handler) for handler in table.values())
    chat_only = outbox_handlers(store, directory, clock, {}, kinds=[JobKind.POST_CARD])
    assert set(chat_only) == {JobKind.POST_CARD}
    with pytest.raises(ValueError, match="webhook jobs need an HTTP session"):
        outbox_handlers(store, directory, clock, {})


# -- callbacks may reach public addresses only -------------------------------------------


def _guarded(directory: Directory) -> Directory:
    """The same tenant without allow_private_callbacks: the production default."""
    tenant = directory.tenants["acme"]
    tenants = dict(directory.tenants, acme=replace(tenant, allow_private_callbacks=False))
    return replace(directory, tenants=tenants)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8700/v1/approvals",
        "http://localhost:8700/metrics",
        "http://api.localhost/x",
        "http://[::1]/x",
        "http://[::ffff:127.0.0.1]/x",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.1.2.3/hook",
        "http://192.168.0.10/hook",
        "http://100.64.0.1/hook",
        "http://0.0.0.0/hook",
        "https://user@agents.example/hook",
        "https://user:pw@agents.example/hook",
    ],
)
async def test_a_callback_the_text_shows_to_be_private_is_refused_at_creation(
    store: Store, hooked: Directory, clock: FakeClock, url: str
) -> None:
    with pytest.raises(InvalidRequest, match="callback_url cannot be called back") as info:
        await _approved(store, _guarded(hooked), clock, "r-ssrf", callback_url=url)
    assert [f["field"] for f in info.value.fields] == ["callback_url"]


async def test_a_tenant_may_allow_private_callbacks_but_never_userinfo(
    store: Store, hooked: Directory, clock: FakeClock
) -> None:
    ok = await _approved(store, hooked, clock, "r-1", callback_url="http://127.0.0.1:9/hook")
    assert ok.callback_url == "http://127.0.0.1:9/hook"
    with pytest.raises(InvalidRequest, match="user name or password"):
        await _approved(store, hooked, clock, "r-2", callback_url="http://u@127.0.0.1:9/hook")
    public = await _approved(
        store, _guarded(hooked), clock, "r-3", callback_url="https://agents.example/hook"
    )
    assert public.callback_url == "https://agents.example/hook"


async def test_a_callback_that_resolves_to_a_private_address_is_dead_at_once(
    store: Store, hooked: Directory, clock: FakeClock, session: aiohttp.ClientSession
) -> None:
    """Created while the tenant allowed it (or before DNS changed): at send time the name is
    resolved again and only public addresses are connected to; none is, so the job is dead
    after one attempt, naming why, and nothing is sent."""
    name = socket.gethostname()
    addresses = {info[4][0] for info in socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)}
    if any(is_public(a) for a in addresses):
        pytest.skip(f"{name} resolves to a public address here: {addresses}")
    async with serving() as other:
        port = other.url.split(":")[2].split("/")[0]
        approval = await _approved(
            store, hooked, clock, "r-dns", callback_url=f"http://{name}:{port}/hook"
        )
        runner = _runner(store, _guarded(hooked), clock, session)
        try:
            while await runner.run_once():
                pass
        finally:
            await runner.handlers["webhook"].close()  # type: ignore[attr-defined]
        assert other.received == []
    async with store.read() as tx:
        [job] = await tx.outbox_jobs(approval_id=approval.id)
    assert (job.state, job.attempts) == ("dead", 1)
    assert "resolves only to addresses a callback may not reach" in (job.last_error or "")


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("8.8.8.8", True),
        ("2001:4860:4860::8888", True),
        ("127.0.0.2", False),
        ("::1", False),
        ("::ffff:10.0.0.1", False),
        ("fe80::1%eth0", False),
        ("fc00::1", False),
        ("224.0.0.1", False),
        ("192.0.2.1", False),
    ],
)
def test_only_public_unicast_addresses_are_public(address: str, public: bool) -> None:
    assert is_public(address) is public


async def test_a_receivers_error_page_is_read_no_further_than_its_message(
    store: Store, hooked: Directory, clock: FakeClock, session: aiohttp.ClientSession
) -> None:
    big = "E" * (5 * 1024 * 1024)

    async def error_page(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=500, text=big)

    app = web.Application()
    app.router.add_post("/hook", error_page)
    site_runner = web.AppRunner(app, access_log=None)
    await site_runner.setup()
    await web.TCPSite(site_runner, "127.0.0.1", 0).start()
    try:
        url = f"http://127.0.0.1:{site_runner.addresses[0][1]}/hook"
        approval = await _approved(store, hooked, clock, "r-big", callback_url=url)
        await _runner(store, hooked, clock, session).run_once()
    finally:
        await site_runner.cleanup()
    async with store.read() as tx:
        [job] = await tx.outbox_jobs(approval_id=approval.id)
    assert job.state == "queued" and job.attempts == 1
    assert job.last_error is not None and "HTTP 500" in job.last_error
    assert len(job.last_error) < 400


def _nested(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = {"n": value}
    return value


async def test_whatever_create_accepts_its_webhook_can_carry(
    store: Store,
    hooked: Directory,
    clock: FakeClock,
    session: aiohttp.ClientSession,
    receiver: Receiver,
) -> None:
    """The webhook holds the record a level deeper than the request held it: the deepest
    request create accepts is still delivered, and one level more is refused at create, not
    left to fail at send time where the agent would never hear the decision."""
    deepest = {"name": "t", "arguments": {"deep": _nested(MAX_DEPTH - 4)}}  # 63 levels in all
    approval = await _approved(store, hooked, clock, "r-deep", tool=deepest)
    await _runner(store, hooked, clock, session).run_once()
    [(_, raw)] = receiver.received
    assert json.loads(raw)["approval"]["tool"] == deepest
    too_deep = {"name": "t", "arguments": {"deep": _nested(MAX_DEPTH - 3)}}
    with pytest.raises(NotCanonical, match="nested deeper than 63 levels"):
        await _approved(store, hooked, clock, "r-deeper", tool=too_deep)
    assert approval.state == "approved"


async def test_a_tenant_whose_receiver_hangs_does_not_delay_another_tenants_webhook(
    store: Store, receiver: Receiver, clock: FakeClock, session: aiohttp.ClientSession
) -> None:
    """Forty webhooks to a receiver that accepts and never answers take at most their
    destination's share of the runner's slots; the other tenant's webhook goes out at once
    instead of after the hung ones' timeout."""
    receiver.gate = asyncio.Event()  # acme's receiver hangs
    async with serving() as other:
        config = copy.deepcopy(TEST_CONFIG)
        config["tenants"] = [
            {"name": "acme", "webhook_url": receiver.url, "webhook_secret_env": "ACME_SECRET"},
            {"name": "globex", "webhook_url": other.url, "webhook_secret_env": "ACME_SECRET"},
        ]
        directory = parse_config(config).directory()
        for i in range(40):
            await _approved(store, directory, clock, f"r-{i}")
        created = await create_request(
            store, directory, clock, "globex", make_request(capability="billing.refund")
        )
        await Operator(store, directory, clock).approve_shown(
            created.approval.id, created.approval.hash, Actor("dave", "cli")
        )
        runner = _runner(store, directory, clock, session)
        stop = asyncio.Event()
        task = asyncio.create_task(runner.run(stop, drain=0.1))
        try:
            await asyncio.wait_for(other.arrived.wait(), 5)  # the hung ones wait 10 s
            assert len(receiver.received) <= SETTINGS.per_destination
        finally:
            stop.set()
            receiver.gate.set()
            await task
