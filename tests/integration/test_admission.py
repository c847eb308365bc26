"""Humans first: the create gate (bot.admission) on the real application on a loopback port,
both databases. A full gate or a late event loop answers a create 429 with Retry-After and
writes nothing; room again admits; claims, completes, reads, cancels and Slack clicks are
never refused; and a burst far over the bound ends in 201s that are all stored and 429s,
nothing else; creates past the slots wait their turn. The gate's inputs are set directly
(its slots held, its lateness fixed), so nothing here waits for real load."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from bot.admission import Admission, LoopLag
from bot.api import API
from store.repository import Store
from tests.support.api_server import Api, Reply, Serve
from tests.support.samples import request_body
from tests.support.slack_rig import API_KEY, CHANNEL, SlackRig


@dataclass
class FixedLag:
    """A loop lateness that stays where the test puts it."""

    late: float = 0.0


def gate_of(api: Api) -> Admission:
    assert api.app is not None
    return api.app[API].admission


def assert_overloaded(reply: Reply, retry_after: int = 1) -> None:
    assert reply.status == 429, reply.body
    assert reply.headers["Retry-After"] == str(retry_after)
    error = reply.body["error"]
    assert error["code"] == "overloaded"
    assert error["retry_after"] == retry_after
    assert "retry" in error["message"]


async def refusals(api: Api, reason: str) -> float:
    reply = await api.call("GET", "/metrics", key=None)
    assert reply.status == 200
    for line in str(reply.body).splitlines():
        if line.startswith(f'signoff_creates_refused_total{{reason="{reason}"}}'):
            return float(line.split()[-1])
    return 0.0


async def test_a_full_gate_answers_429_with_retry_after_writes_nothing_and_admits_again(
    serve: Serve,
) -> None:
    api = await serve(max_creates_in_flight=1, max_creates_waiting=0, overload_retry_after=3)
    gate = gate_of(api)
    async with gate.admit():  # a create in flight: the one slot is taken, no queue
        reply = await api.call("POST", "/v1/approvals", request_body())
        assert_overloaded(reply, retry_after=3)
        assert await api.snapshot() == ([], 0)  # no approval, no card or webhook job
    assert gate.in_flight == 0
    created = await api.call("POST", "/v1/approvals", request_body())
    assert created.status == 201, created.body
    rows, _ = await api.snapshot()
    assert [row[0] for row in rows] == [created.body["id"]]
    assert await refusals(api, "queue_full") == 1


async def test_creates_past_the_slots_wait_their_turn_and_only_a_full_queue_is_refused(
    serve: Serve,
) -> None:
    """Agents that send a few creates at once are served, not refused: past the slots they
    wait in order; only past the queue are they answered 429."""
    api = await serve(max_creates_in_flight=1, max_creates_waiting=2)
    gate = gate_of(api)
    async with gate.admit():  # the one slot is taken
        waiting = [
            asyncio.create_task(api.call("POST", "/v1/approvals", request_body(run_id=r)))
            for r in ("w-1", "w-2")
        ]
        async with asyncio.timeout(10):
            while gate.waiting < 2:  # noqa: ASYNC110 - the gate has no event to wait on
                await asyncio.sleep(0.01)
        assert_overloaded(await api.call("POST", "/v1/approvals", request_body(run_id="w-3")))
        assert await api.snapshot() == ([], 0)  # the waiting ones have written nothing yet
    replies = await asyncio.gather(*waiting)
    assert [reply.status for reply in replies] == [201, 201]
    rows, _ = await api.snapshot()
    assert {row[0] for row in rows} == {reply.body["id"] for reply in replies}
    assert (gate.in_flight, gate.waiting) == (0, 0)


async def test_a_late_loop_refuses_creates_but_always_lets_one_through(serve: Serve) -> None:
    api = await serve(max_creates_in_flight=8, create_lag_limit=0.05)
    gate = gate_of(api)
    gate.lag = FixedLag(late=0.2)
    # Nothing in flight: one create is always admitted, so creates slow down, never stop.
    assert (await api.call("POST", "/v1/approvals", request_body(run_id="r-1"))).status == 201
    async with gate.admit():
        assert_overloaded(await api.call("POST", "/v1/approvals", request_body(run_id="r-2")))
        gate.lag = FixedLag(late=0.01)  # the loop caught up
        reply = await api.call("POST", "/v1/approvals", request_body(run_id="r-2"))
        assert reply.status == 201, reply.body
    assert await refusals(api, "lag") == 1
    rows, _ = await api.snapshot()
    assert len(rows) == 2


async def test_claims_completes_reads_and_cancels_are_never_refused(serve: Serve) -> None:
    api = await serve(max_creates_in_flight=1, create_lag_limit=0.05)
    first = await api.approved(run_id="r-1")
    second = await api.create(run_id="r-2")
    gate = gate_of(api)
    gate.lag = FixedLag(late=10.0)
    async with gate.admit():
        assert_overloaded(await api.call("POST", "/v1/approvals", request_body(run_id="r-3")))
        claimed = await api.claim(first["id"], {"lease": "5m"})
        assert claimed.status == 200, claimed.body
        token = claimed.body["claim_token"]
        path = f"/v1/approvals/{first['id']}"
        renewed = await api.call("POST", f"{path}/renew", {"claim_token": token})
        assert renewed.status == 200, renewed.body
        done = {"claim_token": token, "outcome": "succeeded", "result": {"ref": "re_1"}}
        completed = await api.call("POST", f"{path}/complete", done)
        assert completed.status == 200, completed.body
        assert (await api.call("GET", path)).status == 200
        assert (await api.call("GET", "/v1/approvals")).status == 200
        cancelled = await api.call("POST", f"/v1/approvals/{second['id']}/cancel", {})
        assert cancelled.status == 200, cancelled.body
    assert (await api.get(first["id"]))["execution"] == "finished"


async def test_the_gate_reads_the_one_lateness_probe_of_the_process(serve: Serve) -> None:
    api = await serve()
    probe = LoopLag.acquire()  # what the outbox runner takes: the same probe, not a second
    try:
        assert gate_of(api).lag is probe
    finally:
        probe.release()
    assert gate_of(api).lag is probe  # the gate still holds it


@pytest.mark.parametrize("bound", [1, 3])
async def test_a_burst_far_over_the_bound_gets_201s_all_stored_and_429s_nothing_else(
    serve: Serve, bound: int
) -> None:
    api = await serve(max_creates_in_flight=bound, max_creates_waiting=bound)
    n = 60
    bodies = [request_body(run_id=f"burst-{i}") for i in range(n)]
    async with asyncio.timeout(60):
        replies = await asyncio.gather(*(api.call("POST", "/v1/approvals", b) for b in bodies))
    statuses = [r.status for r in replies]
    assert set(statuses) <= {201, 429}, statuses
    assert statuses.count(429) > 0  # sixty at once over a bound of a few
    for reply in replies:
        if reply.status == 429:
            assert_overloaded(reply)
    accepted = {r.body["id"] for r in replies if r.status == 201}
    rows, _ = await api.snapshot()
    assert {row[0] for row in rows} == accepted
    assert gate_of(api).in_flight == 0
    # The refused ones, asked again (as the client does after Retry-After), are all created.
    refused = [b for b, r in zip(bodies, replies, strict=True) if r.status == 429]
    for body in refused:
        assert (await api.call("POST", "/v1/approvals", body)).status == 201
    rows, _ = await api.snapshot()
    assert len(rows) == n


# -- a Slack click while creates are refused ----------------------------------------------------


def _one_create_at_a_time(data: dict[str, Any]) -> None:
    data["server"] = {"max_creates_in_flight": 1}


@pytest.fixture
async def slack_rig(start_slack: Callable[..., Awaitable[SlackRig]], store: Store) -> SlackRig:
    return await start_slack(store, configure=_one_create_at_a_time)


async def test_a_slack_click_is_served_while_creates_are_refused(slack_rig: SlackRig) -> None:
    rig = slack_rig
    record = await rig.create()
    card = await rig.card_for(record["id"])
    assert rig.app is not None
    gate = rig.app[API].admission
    gate.lag = FixedLag(late=10.0)
    async with gate.admit():
        async with rig.http.post(
            f"{rig.url}/v1/approvals",
            json=request_body(run_id="refused"),
            headers={"Authorization": f"Bearer {API_KEY}"},
        ) as response:
            assert response.status == 429
        started = time.monotonic()
        click = rig.slack.click_body("U0ALICE", CHANNEL, card["ts"], "signoff_approve")
        assert await rig.send(click) == 200
        assert time.monotonic() - started < 3  # Slack's ack window
        await rig.settle(record["id"], 2)
    approved = await rig.state(record["id"])
    assert (approved.state, approved.decided_by) == ("approved", "alice")
