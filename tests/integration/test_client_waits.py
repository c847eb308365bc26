"""The SDK's waits against the edges a real server does not reach on demand, on a stub speaking
the record JSON of the API: a server without waits (no `Signoff-Wait` header: the client polls
with backoff, and reads a batch one id at a time), a wait refused with 429 `too_many_waits`
and Retry-After (asked again), and a held wait longer than the client's own timeout (not cut
off). The waits against a real `signoff serve` are tests/frameworks/test_sdk_wait.py."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from signoff_client import SignoffClient

IDS = ("a1b2c3d4-0000-4000-8000-000000000001", "a1b2c3d4-0000-4000-8000-000000000002")


def record(approval_id: str, state: str) -> dict[str, Any]:
    """An approval as GET /v1/approvals/{id} answers it."""
    return {
        "id": approval_id,
        "tenant": "acme",
        "run_id": "run-1",
        "state": state,
        "execution": "not_started",
        "hash": "0" * 64,
        "kind": "tool_call",
        "capability": "payments.refund",
        "tool": {"name": "refund", "arguments": {"charge": "ch_1", "amount": 12000}},
        "presentation": {"title": "Refund €120.00"},
        "assignee": "alice",
        "decided_by": None if state == "pending" else "alice",
        "decided_at": None,
        "expires_at": None,
        "origin_id": None,
        "answer": {"text": "Leeds"} if state == "answered" else None,
        "question": None,
        "votes": [],
        "edited": False,
    }


@dataclass
class Stub:
    """What the stub saw, and how it answers: `states(n)` is each id's state at the n-th
    request (from 0); `waits` whether it honours `wait` (holding it `hold` seconds and
    answering with Signoff-Wait); `refuse` how many waits it refuses with 429 first."""

    states: Callable[[int], dict[str, str]]
    waits: bool = False
    hold: float = 0.0
    refuse: int = 0
    seen: list[tuple[float, str, dict[str, str]]] = field(default_factory=list)

    async def one(self, request: web.Request) -> web.Response:
        states = self._saw(request)
        approval_id = request.match_info["id"]
        if approval_id not in states:
            error = {"code": "not_found", "message": "no such approval"}
            return web.json_response({"error": error}, status=404)
        return await self._answer(request, record(approval_id, states[approval_id]))

    async def many(self, request: web.Request) -> web.Response:
        states = self._saw(request)
        if not self.waits:  # an older server refuses the parameters it does not know
            fields = [
                {"field": f, "message": "Extra inputs are not permitted"} for f in ("ids", "wait")
            ]
            error = {"code": "invalid_request", "message": "invalid request", "fields": fields}
            return web.json_response({"error": error}, status=422)
        ids = request.query["ids"].split(",")
        found = [record(i, states[i]) for i in reversed(ids) if i in states]  # newest first
        return await self._answer(request, {"approvals": found, "next_cursor": None})

    def _saw(self, request: web.Request) -> dict[str, str]:
        self.seen.append((time.monotonic(), request.path, dict(request.query)))
        return self.states(len(self.seen) - 1)

    async def _answer(self, request: web.Request, body: dict[str, Any]) -> web.Response:
        if not self.waits or "wait" not in request.query:
            return web.json_response(body)
        if self.refuse > 0:
            self.refuse -= 1
            error = {"code": "too_many_waits", "message": "too many open waits"}
            return web.json_response({"error": error}, status=429, headers={"Retry-After": "0.3"})
        states = body["approvals"] if "approvals" in body else [body]
        if all(a["state"] == request.query.get("seen", "pending") for a in states):
            await asyncio.sleep(min(self.hold, float(request.query["wait"])))
        return web.json_response(body, headers={"Signoff-Wait": request.query["wait"]})


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Stub], Any]]:
    runners: list[web.AppRunner] = []

    async def start(stub: Stub) -> str:
        app = web.Application()
        app.router.add_get("/v1/approvals/{id}", stub.one)
        app.router.add_get("/v1/approvals", stub.many)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        runners.append(runner)
        return f"http://127.0.0.1:{runner.addresses[0][1]}"

    yield start
    for runner in runners:
        await runner.cleanup()


def gaps(stub: Stub) -> list[float]:
    times = [t for t, _, _ in stub.seen]
    return [round(b - a, 2) for a, b in itertools.pairwise(times)]


async def test_a_server_without_waits_is_polled_with_backoff(serve: Any) -> None:
    # Decided at the 5th read: the client asked to wait once, saw no header, then polled.
    stub = Stub(lambda n: {IDS[0]: "pending" if n < 4 else "approved"})
    url = await serve(stub)
    async with SignoffClient(url, "key", poll_first=0.1, poll_most=0.25) as client:
        started = time.monotonic()
        decided = await client.wait(IDS[0], max_wait=10)
    assert decided.state == "approved"
    assert [q.get("wait") for _, _, q in stub.seen] == ["10.000", None, None, None, None]
    # Backoff from poll_first, doubling, capped at poll_most: 0.1, 0.2, 0.25, 0.25.
    assert [g >= w for g, w in zip(gaps(stub), (0.1, 0.2, 0.25, 0.25), strict=True)] == [True] * 4
    assert time.monotonic() - started < 3


async def test_polling_ends_at_the_deadline_with_the_record_as_it_stands(serve: Any) -> None:
    stub = Stub(lambda n: {IDS[0]: "pending"})
    url = await serve(stub)
    async with SignoffClient(url, "key") as client:
        started = time.monotonic()
        still = await client.wait(IDS[0], max_wait=0.6, first=0.05, most=0.1)
        answer = await client.answer(IDS[0], max_wait=0.1, first=0.05)
    assert still.state == "pending" and answer is None
    assert 0.6 <= time.monotonic() - started < 2.5
    assert len(stub.seen) >= 6  # polled: 0.05, 0.1, 0.1, ... (no held wait to lean on)


async def test_a_batch_against_a_server_without_waits_is_read_one_id_at_a_time(
    serve: Any,
) -> None:
    unknown = "a1b2c3d4-0000-4000-8000-00000000dead"
    stub = Stub(lambda n: {IDS[0]: "pending", IDS[1]: "pending" if n < 5 else "rejected"})
    url = await serve(stub)
    async with SignoffClient(url, "key", poll_first=0.05, poll_most=0.05) as client:
        started = time.monotonic()
        found = await client.wait_any([IDS[0], unknown, IDS[1]], max_wait=10)
        assert time.monotonic() - started < 3  # back once IDS[1] was decided
        asked = len(stub.seen)
        both = await client.wait_all(list(IDS), max_wait=0.3)
    # The server refused the batch form: each id was read on its own.
    assert [(r.id, r.state) for r in found] == [(IDS[0], "pending"), (IDS[1], "rejected")]
    assert stub.seen[0][1] == "/v1/approvals" and "ids" in stub.seen[0][2]
    assert {path for _, path, _ in stub.seen[1:asked]} == {
        f"/v1/approvals/{i}" for i in (*IDS, unknown)
    }
    assert [r.state for r in both] == ["pending", "rejected"]  # the time ran out on IDS[0]


async def test_too_many_waits_is_asked_again_after_retry_after(serve: Any) -> None:
    # Refused twice (Retry-After 0.3 s), then held; decided on the 4th request. The polling
    # fallback's first delay is 30 s: the test fails if the client fell back to it.
    stub = Stub(lambda n: {IDS[0]: "pending" if n < 3 else "approved"}, waits=True, refuse=2)
    stub.hold = 0.2
    url = await serve(stub)
    async with SignoffClient(url, "key", poll_first=30, poll_most=30) as client:
        started = time.monotonic()
        decided = await client.wait(IDS[0], max_wait=20)
    assert decided.state == "approved"
    assert all(q["wait"] and q["seen"] == "pending" for _, _, q in stub.seen)
    assert [g >= 0.3 for g in gaps(stub)[:2]] == [True, True]
    assert time.monotonic() - started < 5


async def test_refused_until_the_deadline_the_record_as_it_stands(serve: Any) -> None:
    stub = Stub(lambda n: {IDS[0]: "pending"}, waits=True, refuse=100)
    url = await serve(stub)
    async with SignoffClient(url, "key") as client:
        still = await client.wait(IDS[0], max_wait=0.8)
    assert still.state == "pending"
    # Refused at 0 and about 0.3 and 0.6 s (as Retry-After says, not at once), then read.
    assert 3 <= len(stub.seen) <= 5 and all(g >= 0.29 for g in gaps(stub)[:-1])
    assert "wait" not in stub.seen[-1][2]


async def test_a_held_wait_outlasts_the_clients_timeout(serve: Any) -> None:
    # The client's timeout is 0.5 s; the server holds each wait 1.2 s before answering
    # "still pending", and the decision lands in the third. Cut off, it would raise.
    stub = Stub(lambda n: {IDS[0]: "pending" if n < 2 else "answered"}, waits=True, hold=1.2)
    url = await serve(stub)
    async with SignoffClient(url, "key", timeout=0.5, poll_first=30, poll_most=30) as client:
        answer = await client.answer(IDS[0], max_wait=30)
    assert answer == "Leeds"
    assert [g >= 1.2 for g in gaps(stub)] == [True, True]  # renewed at once, not polled
    # Each wait asked for what was left of the deadline (60 s at most).
    asked = [float(q["wait"]) for _, _, q in stub.seen]
    assert asked[0] == 30.0 and asked == sorted(asked, reverse=True)


async def test_a_long_deadline_is_held_60_seconds_at_a_time(serve: Any) -> None:
    stub = Stub(lambda n: {IDS[0]: "approved"}, waits=True)
    url = await serve(stub)
    async with SignoffClient(url, "key") as client:
        await client.wait(IDS[0], max_wait=3600)
        with pytest.raises(ValueError):
            await client.wait_any([str(i) for i in range(101)])
    assert stub.seen[0][2] == {"wait": "60.000", "seen": "pending"}
