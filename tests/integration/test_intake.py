"""Creating requests on real databases (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from bot.canonical import approval_hash
from bot.clock import FakeClock
from bot.errors import ApproversOutsideRoute, InvalidRequest, NoRoute, UnknownTenant
from bot.intake import create_request
from bot.routing import Directory
from store.repository import Store
from tests.support.samples import make_request, request_body


async def _counts(store: Store) -> tuple[int, int]:
    async with store.read() as tx:
        approvals = await tx.list_approvals(limit=1000)
        events = sum([len(await tx.events_for(a.id)) for a in approvals])
    return len(approvals), events


async def test_create_routes_hashes_and_records_the_request(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    body = request_body()
    created = await create_request(store, directory, clock, "acme", make_request())
    approval = created.approval
    assert created.created
    assert approval.state == "pending"
    assert approval.assignee == "group:finance"
    assert approval.expires_at == clock.now() + timedelta(hours=72)
    # The hash is over what the agent sent, so the agent can compute it on its side.
    assert approval.hash == approval_hash(
        "tool_call",
        body["capability"],
        body["presentation"],
        body["tool"]["name"],
        body["tool"]["arguments"],
    )
    async with store.read() as tx:
        events = await tx.events_for(approval.id)
    assert [e.type for e in events] == ["requested"]
    assert events[0].data["hash"] == approval.hash
    assert events[0].actor == "agent:acme"


async def test_same_request_twice_is_one_row_and_one_event(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    first = await create_request(store, directory, clock, "acme", make_request())
    clock.advance(minutes=5)
    second = await create_request(store, directory, clock, "acme", make_request())
    assert not second.created
    assert second.approval == first.approval
    assert await _counts(store) == (1, 1)
    # Another run, or another call in the same run, is a new approval.
    await create_request(store, directory, clock, "acme", make_request(run_id="run-2"))
    other_call = make_request(tool={"name": "stripe.refunds.create", "arguments": {"amount": 1}})
    await create_request(store, directory, clock, "acme", other_call)
    assert await _counts(store) == (3, 3)


async def test_concurrent_identical_creates_make_one_row(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    results = await asyncio.gather(
        *(create_request(store, directory, clock, "acme", make_request()) for _ in range(20))
    )
    assert sum(r.created for r in results) == 1
    assert len({r.approval.id for r in results}) == 1
    assert await _counts(store) == (1, 1)


@pytest.mark.parametrize(
    ("tenant", "overrides", "error", "says"),
    [
        ("acme", {"capability": "hr.fire"}, NoRoute, "no route matches"),
        ("initech", {}, UnknownTenant, "unknown tenant 'initech'"),
        ("acme", {"approvers": ["dave"]}, ApproversOutsideRoute, "never widen"),
        ("acme", {"approval_ttl": "10d"}, InvalidRequest, "longer than the route allows"),
        ("acme", {"required_approvals": 9}, InvalidRequest, "exceeds"),
    ],
    ids=["no-route", "unknown-tenant", "widened-approvers", "ttl-beyond-route", "quorum-too-big"],
)
async def test_refused_requests_write_nothing(
    store: Store,
    directory: Directory,
    clock: FakeClock,
    tenant: str,
    overrides: dict,
    error: type[Exception],
    says: str,
) -> None:
    with pytest.raises(error) as refused:
        await create_request(store, directory, clock, tenant, make_request(**overrides))
    assert says in str(refused.value)
    assert await _counts(store) == (0, 0)


async def test_request_may_narrow_its_approvers(
    store: Store, directory: Directory, clock: FakeClock
) -> None:
    created = await create_request(
        store, directory, clock, "acme", make_request(approvers=["bob"], approval_ttl="1h")
    )
    assert created.approval.approvers == ["bob"]
    assert created.approval.assignee == "bob"
    assert created.approval.expires_at == clock.now() + timedelta(hours=1)
