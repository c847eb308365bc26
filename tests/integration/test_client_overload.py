"""SignoffClient under a busy server: a 429 (or a 503 with Retry-After) is asked again after
the wait the server names, within the client's budget, then raised as its typed error.

Against the real application on a loopback port (both databases) with its create gate held
full, and against a small aiohttp server that answers on cue what a busy server or a proxy
in front of it would (429 with or without signoff's body, 503 with or without Retry-After)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from bot.api import API
from signoff_client import Overloaded, SignoffClient, StoreUnavailable
from tests.support.api_server import ACME_KEY, Api, Serve
from tests.support.samples import request_body

# Retries come quickly here: the server says 1 s, the client caps each wait at this.
QUICK = 0.02


async def refused_so_far(api: Api) -> float:
    reply = await api.call("GET", "/metrics", key=None)
    for line in str(reply.body).splitlines():
        if line.startswith('signoff_creates_refused_total{reason="queue_full"}'):
            return float(line.split()[-1])
    return 0.0


async def test_a_refused_create_is_asked_again_after_retry_after_and_created(
    serve: Serve,
) -> None:
    api = await serve(max_creates_in_flight=1, max_creates_waiting=0)
    assert api.app is not None
    gate = api.app[API].admission
    async with SignoffClient(
        api.url, ACME_KEY, overload_wait_max=QUICK, overload_attempts=500
    ) as client:
        async with gate.admit():  # full: the client's creates are refused until it frees
            asking = asyncio.create_task(client.request(**request_body()))
            for _ in range(1000):  # until the server has refused it twice
                if await refused_so_far(api) >= 2:
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError("the create was never refused")
            assert not asking.done()
        async with asyncio.timeout(10):
            record = await asking
    assert record.state == "pending"
    rows, _ = await api.snapshot()
    assert [row[0] for row in rows] == [record.id]


async def test_the_client_gives_up_with_overloaded_after_its_attempts(serve: Serve) -> None:
    api = await serve(max_creates_in_flight=1, max_creates_waiting=0, overload_retry_after=2)
    assert api.app is not None
    async with SignoffClient(
        api.url, ACME_KEY, overload_wait_max=QUICK, overload_attempts=3
    ) as client:
        async with api.app[API].admission.admit():
            with pytest.raises(Overloaded) as raised:
                await client.request(**request_body())
    assert raised.value.retry_after == 2
    assert raised.value.code == "overloaded"
    assert await refused_so_far(api) == 3
    assert await api.snapshot() == ([], 0)


# -- a server answering on cue ----------------------------------------------------------------


@dataclass
class Cued:
    """A loopback server whose answers to each path are taken from a list, in turn (the last
    one repeats), with the moment each request arrived."""

    url: str = ""
    answers: dict[str, list[Callable[[], web.Response]]] = field(default_factory=dict)
    arrivals: dict[str, list[float]] = field(default_factory=dict)

    async def handle(self, request: web.Request) -> web.Response:
        seen = self.arrivals.setdefault(request.path, [])
        seen.append(time.monotonic())
        cues = self.answers[request.path]
        return cues[min(len(seen), len(cues)) - 1]()


@pytest.fixture
async def cued() -> AsyncIterator[Cued]:
    server = Cued()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", server.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    server.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield server
    await runner.cleanup()


def error(status: int, code: str, retry_after: str | None = None) -> Callable[[], web.Response]:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    body = {"error": {"code": code, "message": f"{code} now"}}
    return lambda: web.json_response(body, status=status, headers=headers)


def no_route() -> web.Response:
    return web.json_response({"capability": "payments.refund", "route": None})


ROUTE = "/v1/routes/match"


async def test_a_429_is_waited_out_as_long_as_asked_within_the_cap(cued: Cued) -> None:
    proxy = lambda: web.Response(status=429, text="slow down", headers={"Retry-After": "1"})  # noqa: E731
    cued.answers[ROUTE] = [proxy, no_route]
    async with SignoffClient(cued.url, "k", overload_wait_max=0.15) as client:
        assert await client.route("payments.refund") is None
    first, second = cued.arrivals[ROUTE]
    assert second - first >= 0.15  # Retry-After (1 s) as far as the cap allows


async def test_a_503_with_retry_after_is_retried_and_one_without_is_not(cued: Cued) -> None:
    cued.answers[ROUTE] = [error(503, "store_unavailable", "0"), no_route]
    async with SignoffClient(cued.url, "k") as client:
        assert await client.route("payments.refund") is None
        assert len(cued.arrivals[ROUTE]) == 2
        cued.answers["/v1/approvals/a1"] = [error(503, "store_unavailable")]
        with pytest.raises(StoreUnavailable):
            await client.get("a1")
    assert len(cued.arrivals["/v1/approvals/a1"]) == 1


async def test_the_wait_budget_ends_the_retries_with_the_typed_error(cued: Cued) -> None:
    cued.answers[ROUTE] = [error(429, "overloaded", "1")]
    async with SignoffClient(
        cued.url, "k", overload_wait_max=0.04, overload_budget=0.1, overload_attempts=100
    ) as client:
        started = time.monotonic()
        with pytest.raises(Overloaded):
            await client.route("payments.refund")
    assert 2 <= len(cued.arrivals[ROUTE]) <= 3  # about 0.1 s of 0.04-0.05 s waits
    assert time.monotonic() - started < 1


async def test_cancel_and_supersede_are_not_retried(cued: Cued) -> None:
    cued.answers["/v1/approvals/a1/cancel"] = [error(429, "overloaded", "0")]
    cued.answers["/v1/approvals/a1/supersede"] = [error(429, "overloaded", "0")]
    async with SignoffClient(cued.url, "k") as client:
        with pytest.raises(Overloaded):
            await client.cancel("a1")
        with pytest.raises(Overloaded):
            await client.supersede("a1", "newer plan")
    assert len(cued.arrivals["/v1/approvals/a1/cancel"]) == 1
    assert len(cued.arrivals["/v1/approvals/a1/supersede"]) == 1
