"""Waits (`GET /v1/approvals/{id}?wait=`, bot/waits.py) over real HTTP, on real SQLite and
PostgreSQL: the answer comes with the decision's commit, not at a poll.

What these tests prove:
- a held wait answers within a fraction of a second of the decision, carrying the decided
  record and the `Signoff-Wait` header; runs out with the unchanged record; answers at once
  when the request already left the state the caller saw (`seen`);
- the list (`?ids=...&wait=`, or any page) answers when any one of its requests moves;
- a decision committed through another connection pool (as another process's would be:
  LISTEN/NOTIFY on PostgreSQL, SQLite's data_version) wakes the wait too;
- open waits are bounded per tenant and per process (429 `too_many_waits`, Retry-After);
- shutting down answers every held wait at once;
- bad input (a wait over 60 s, not a number, an unknown `seen`, another tenant's request,
  too many ids) is a clear 4xx and writes nothing.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from bot.operator import Actor, Operator
from store.repository import Store
from tests.support.api_server import ALICE, GLOBEX_KEY, Api, Serve, assert_error, error_fields

# How soon after its decision a wait must answer here: far under any poll interval a client
# would use (the SDK's first poll is 0.5 s and backs off to 10 s).
PROMPT = 1.0


async def _held(api: Api, path: str) -> tuple[asyncio.Task, float]:
    """Start a wait and give it time to be held before the caller decides."""
    started = time.monotonic()
    task = asyncio.create_task(api.call("GET", path))
    await asyncio.sleep(0.2)
    assert not task.done(), "the wait answered before anything moved"
    return task, started


async def test_a_wait_answers_with_the_decision(api: Api) -> None:
    record = await api.create()
    task, _ = await _held(api, f"/v1/approvals/{record['id']}?wait=20")
    decided = time.monotonic()
    await api.approve(record)
    reply = await asyncio.wait_for(task, 5)
    assert time.monotonic() - decided < PROMPT
    assert reply.status == 200, reply.body
    assert (reply.body["id"], reply.body["state"]) == (record["id"], "approved")
    assert reply.body["decided_by"] is not None
    assert reply.headers["Signoff-Wait"] == "20"


async def test_a_wait_runs_out_with_the_unchanged_record(api: Api) -> None:
    record = await api.create()
    started = time.monotonic()
    reply = await api.call("GET", f"/v1/approvals/{record['id']}?wait=0.4")
    assert time.monotonic() - started >= 0.4
    assert (reply.status, reply.body["state"]) == (200, "pending")
    assert reply.headers["Signoff-Wait"] == "0.4"
    # A plain GET is no wait, and says nothing of one.
    plain = await api.call("GET", f"/v1/approvals/{record['id']}")
    assert "Signoff-Wait" not in plain.headers


async def test_a_request_already_past_the_seen_state_answers_at_once(api: Api) -> None:
    record = await api.approved()
    started = time.monotonic()
    reply = await api.call("GET", f"/v1/approvals/{record['id']}?wait=30")
    assert time.monotonic() - started < PROMPT
    assert reply.body["state"] == "approved"

    # Having seen it approved, the agent waits for it to leave approved: its claim.
    task, _ = await _held(api, f"/v1/approvals/{record['id']}?wait=30&seen=approved")
    claimed = await api.claim(record["id"])
    assert claimed.status == 200, claimed.body
    reply = await asyncio.wait_for(task, 5)
    assert reply.body["state"] == "executing"


async def test_a_batch_wait_answers_when_any_of_its_requests_moves(api: Api) -> None:
    records = [await api.create(run_id=f"run-{n}") for n in range(3)]
    ids = ",".join(r["id"] for r in records)
    task, _ = await _held(api, f"/v1/approvals?ids={ids}&wait=20")
    decided = time.monotonic()
    await api.approve(records[1])
    reply = await asyncio.wait_for(task, 5)
    assert time.monotonic() - decided < PROMPT
    assert reply.status == 200, reply.body
    states = {r["id"]: r["state"] for r in reply.body["approvals"]}
    assert states == {
        records[0]["id"]: "pending",
        records[1]["id"]: "approved",
        records[2]["id"]: "pending",
    }
    assert reply.body["next_cursor"] is None
    assert reply.headers["Signoff-Wait"] == "20"

    # Another tenant's id in the list is left out, as one that does not exist.
    other = await api.create(key=GLOBEX_KEY)
    listed = await api.call("GET", f"/v1/approvals?ids={records[0]['id']},{other['id']}")
    assert [r["id"] for r in listed.body["approvals"]] == [records[0]["id"]]
    assert "Signoff-Wait" not in listed.headers

    # Any page may be held: here the pending requests of one run, until one of them moves.
    task, _ = await _held(api, "/v1/approvals?run_id=run-2&state=pending&wait=20")
    await api.approve(records[2])
    reply = await asyncio.wait_for(task, 5)
    assert reply.body["approvals"] == []  # read again: run-2 has no pending request now
    empty = await api.call("GET", "/v1/approvals?run_id=nobody&wait=20")
    assert (empty.status, empty.body["approvals"]) == (200, [])  # nothing to wait on: at once


async def test_a_decision_through_another_pool_wakes_the_wait(api: Api, db_url: str) -> None:
    """Another process's decision: its own connections and its own Store, so nothing in this
    process hears of it but the database (NOTIFY on PostgreSQL, data_version on SQLite)."""
    record = await api.create()
    task, _ = await _held(api, f"/v1/approvals/{record['id']}?wait=20")
    elsewhere = Store.from_url(db_url)
    try:
        decided = time.monotonic()
        operator = Operator(elsewhere, api.directory, api.clock)
        await operator.approve_shown(record["id"], record["hash"], ALICE)
        reply = await asyncio.wait_for(task, 5)
    finally:
        await elsewhere.close()
    assert time.monotonic() - decided < PROMPT
    assert reply.body["state"] == "approved"


async def test_open_waits_are_bounded_per_tenant_and_per_process(serve: Serve) -> None:
    api = await serve(max_waits=2, max_waits_per_tenant=1)
    acme = await api.create()
    globex = await api.create(key=GLOBEX_KEY)
    first, _ = await _held(api, f"/v1/approvals/{acme['id']}?wait=20")

    refused = await api.call("GET", f"/v1/approvals/{acme['id']}?wait=20")
    error = assert_error(refused, 429, "too_many_waits")
    assert "max_waits_per_tenant" in error["message"]
    assert int(refused.headers["Retry-After"]) >= 1

    other = asyncio.create_task(
        api.call("GET", f"/v1/approvals/{globex['id']}?wait=20", key=GLOBEX_KEY)
    )
    await asyncio.sleep(0.2)
    assert not other.done()  # the other tenant still has room: the process has two
    third = await api.call("GET", f"/v1/approvals/{globex['id']}?wait=20", key=GLOBEX_KEY)
    assert "[server] max_waits" in assert_error(third, 429, "too_many_waits")["message"]

    await api.approve(acme)
    await Operator(api.store, api.directory, api.clock).approve_shown(
        globex["id"], globex["hash"], Actor("dave", "cli")
    )
    assert (await asyncio.wait_for(first, 5)).body["state"] == "approved"
    assert (await asyncio.wait_for(other, 5)).body["state"] == "approved"
    # Answered waits give their room back.
    again = await api.call("GET", f"/v1/approvals/{acme['id']}?wait=5")
    assert again.status == 200


async def test_shutting_down_answers_every_held_wait(serve: Serve) -> None:
    api = await serve()
    record = await api.create()
    task, _ = await _held(api, f"/v1/approvals/{record['id']}?wait=30")
    assert api.app is not None
    stopping = time.monotonic()
    await api.app.shutdown()
    reply = await asyncio.wait_for(task, 5)
    assert time.monotonic() - stopping < PROMPT
    assert (reply.status, reply.body["state"]) == (200, "pending")


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("wait=61", "wait"),
        ("wait=0", "wait"),
        ("wait=-1", "wait"),
        ("wait=soon", "wait"),
        ("wait=nan", "wait"),
        ("wait=inf", "wait"),
        ("wait=5&seen=decided", "seen"),
    ],
)
async def test_a_bad_wait_is_refused_naming_its_field(api: Api, query: str, field: str) -> None:
    record = await api.create()
    before = await api.snapshot()
    started = time.monotonic()
    reply = await api.call("GET", f"/v1/approvals/{record['id']}?{query}")
    assert time.monotonic() - started < PROMPT  # refused, not held
    assert error_fields(assert_error(reply, 422, "invalid_request")) == [field]
    batch = await api.call("GET", f"/v1/approvals?ids={record['id']}&{query}")
    assert error_fields(assert_error(batch, 422, "invalid_request")) == [field]
    assert await api.snapshot() == before


async def test_waits_on_what_is_not_the_callers_are_refused(api: Api) -> None:
    record = await api.create()
    before = await api.snapshot()
    # Another tenant's request answers as one that does not exist, without waiting.
    started = time.monotonic()
    reply = await api.call("GET", f"/v1/approvals/{record['id']}?wait=20", key=GLOBEX_KEY)
    assert_error(reply, 404, "not_found")
    assert time.monotonic() - started < PROMPT

    too_many = ",".join([record["id"]] * 101)
    assert error_fields(
        assert_error(
            await api.call("GET", f"/v1/approvals?ids={too_many}&wait=5"), 422, "invalid_request"
        )
    ) == ["ids"]
    not_ids = await api.call("GET", "/v1/approvals?ids=;drop&wait=5")
    assert error_fields(assert_error(not_ids, 422, "invalid_request")) == ["ids"]
    unknown = await api.call("GET", f"/v1/approvals/{record['id']}?wait=0.1&since=1")
    assert unknown.status == 200  # a plain GET's query was never checked; still is not
    assert await api.snapshot() == before
