"""The SDK (signoff_client) against the real application on a loopback port: the agent's whole
loop (request, wait, claim, execute with the idempotency key, complete), and server
refusals arriving as signoff's own error classes."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from bot.app import build_app
from bot.clock import FakeClock
from bot.config import parse_config
from bot.operator import Actor, Operator
from bot.routing import Directory
from signoff_client import SignoffClient
from signoff_client.errors import InvalidRequest, NotFound, NotPending, Unauthorized
from store.repository import Store
from tests.support.samples import TEST_CONFIG, request_body


@pytest.fixture
async def base_url(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[str]:
    config = copy.deepcopy(TEST_CONFIG)
    config["tenants"] = [
        {"name": "acme", "api_key_env": "SDK_TEST_ACME_KEY"},
        {"name": "globex", "api_key_env": "SDK_TEST_GLOBEX_KEY"},
    ]
    monkeypatch.setenv("SDK_TEST_ACME_KEY", "acme-key")
    monkeypatch.setenv("SDK_TEST_GLOBEX_KEY", "globex-key")
    runner = web.AppRunner(build_app(parse_config(config), store, clock=clock, background=False))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


def _body() -> dict[str, object]:
    body = request_body(step={"node": "refund"}, resume={"thread": "t-1"})
    return body


async def test_the_agent_loop_end_to_end(
    base_url: str, store: Store, directory: Directory, clock: FakeClock
) -> None:
    async with SignoffClient(base_url, "acme-key") as client:
        approval = await client.request(**_body())
        assert (approval.state, approval.execution) == ("pending", "not_started")
        assert (await client.request(**_body())).id == approval.id  # idempotent

        still = await client.wait(approval.id, max_wait=0.2, first=0.05)
        assert still.state == "pending"  # time ran out: the record as it stands

        async def human() -> None:
            await asyncio.sleep(0.1)
            await Operator(store, directory, clock).approve_shown(
                approval.id, approval.hash, Actor("alice", "cli")
            )

        decided, _ = await asyncio.gather(
            client.wait(approval.id, max_wait=10, first=0.05), human()
        )
        assert (decided.state, decided.decided_by) == ("approved", "alice")

        claim = await client.claim(approval.id, lease="2m")
        assert claim.tool == {
            "name": approval.tool["name"],
            "arguments": approval.tool["arguments"],
        }
        assert (claim.step, claim.resume) == ({"node": "refund"}, {"thread": "t-1"})
        assert len(claim.idempotency_key) == 64
        with pytest.raises(NotPending) as info:
            await client.claim(approval.id)
        assert info.value.state == "executing"

        done = await client.complete(approval.id, claim.claim_token, "succeeded", {"id": "re_1"})
        assert (done.state, done.execution) == ("executed", "finished")
        assert done.raw["outcome"] == {"status": "succeeded", "result": {"id": "re_1"}}


async def test_refusals_arrive_as_signoff_errors(base_url: str) -> None:
    async with SignoffClient(base_url, "acme-key") as acme:
        approval = await acme.request(**_body())
        with pytest.raises(InvalidRequest) as info:
            await acme.request(run_id="r", capability="payments.refund")
        assert {f["field"] for f in info.value.fields} >= {"tool", "presentation"}
        cancelled = await acme.cancel(approval.id, "user withdrew")
        assert cancelled.state == "cancelled"
        with pytest.raises(NotPending):
            await acme.supersede(approval.id, "too late")
    async with SignoffClient(base_url, "globex-key") as globex:
        with pytest.raises(NotFound):
            await globex.get(approval.id)
        records, cursor = await globex.list()
        assert (records, cursor) == ([], None)
    async with SignoffClient(base_url, "wrong") as stranger:
        with pytest.raises(Unauthorized):
            await stranger.get(approval.id)


async def test_the_record_names_every_vote_of_a_quorum(
    base_url: str, store: Store, directory: Directory, clock: FakeClock
) -> None:
    async with SignoffClient(base_url, "acme-key") as client:
        approval = await client.request(**request_body(capability="quorum.migrate"))
        assert approval.votes == ()
        operator = Operator(store, directory, clock)
        await operator.approve_shown(approval.id, approval.hash, Actor("alice", "web"))
        clock.advance(minutes=5)
        await operator.approve_shown(approval.id, approval.hash, Actor("bob", "telegram"))
        decided = await client.get(approval.id)
    assert (decided.state, decided.decided_by) == ("approved", "bob")
    assert [(v.principal, v.decision, v.via) for v in decided.votes] == [
        ("alice", "approve", "web"),
        ("bob", "approve", "telegram"),
    ]
    assert decided.votes[1].at == decided.raw["decided_at"]
