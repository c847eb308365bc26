"""Standing grants on SQLite and PostgreSQL, with a FakeClock: "approve, and allow the same
for ..." given through the Operator as a surface gives it, later requests filed through the
real agent API (bot.app on a loopback port) and claimed there.

Proves that a request inside a live grant is approved at once by it (a row with its hash,
an `approved` event naming the grant and its giver, `approved_by_grant` on the record and the
webhook) and that one outside it in any way (another run, a larger amount, another charge,
the giver no longer entitled, the delegation it was given under ended, its uses or lifetime
spent, revoked) waits for a person; that the route bounds what may be granted; that a claim
after a revoke is refused as a policy change; and that a revoke racing a covered create
leaves exactly one outcome.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bot import audit, standing
from bot.app import CORE
from bot.card import card_for
from bot.clock import FakeClock
from bot.config import parse_config
from bot.delegations import Delegations
from bot.errors import GrantRefused, NotAnApprover
from bot.operator import Actor, Operator
from bot.standing import GrantScope
from store.repository import Store
from tests.support.chat_server import ChatServer, serve
from tests.support.samples import TEST_CONFIG, request_body

API_KEY = "acme-grants-key"
START = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
ALICE = Actor("alice", "web")
EIGHT_HOURS = GrantScope(timedelta(hours=8))


class Rig(ChatServer):
    async def ask(self, **overrides: Any) -> tuple[int, dict[str, Any]]:
        async with self.http.post(
            f"{self.url}/v1/approvals",
            json=request_body(**overrides),
            headers={"Authorization": f"Bearer {self.api_key}"},
        ) as response:
            return response.status, await response.json()

    async def claim(self, approval_id: str) -> tuple[int, dict[str, Any]]:
        async with self.http.post(
            f"{self.url}/v1/approvals/{approval_id}/claim",
            json={},
            headers={"Authorization": f"Bearer {self.api_key}"},
        ) as response:
            return response.status, await response.json()

    def operator(self) -> Operator:
        return Operator(self.store, self.directory, self.clock)

    async def allow(self, record: dict[str, Any], scope: GrantScope = EIGHT_HOURS) -> str:
        _, grant = await self.operator().approve_and_allow(
            record["id"], record["hash"], ALICE, scope
        )
        return grant.id


def _call(amount: int, charge: str = "ch_1") -> dict[str, Any]:
    return {"name": "stripe.refunds.create", "arguments": {"charge": charge, "amount": amount}}


@pytest.fixture
async def rig(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Rig]:
    monkeypatch.setenv("GRANTS_TEST_API_KEY", API_KEY)
    raw = copy.deepcopy(TEST_CONFIG)
    raw["tenants"][0]["api_key_env"] = "GRANTS_TEST_API_KEY"
    raw["routes"][1]["max_grant_lifetime"] = "1h"  # contracts.*
    raw["routes"].insert(
        0,
        {
            "tenant": "acme",
            "capability": "payments.payout",
            "approvers": ["alice"],
            "grants": False,
        },
    )
    config = parse_config(raw)
    clock.set(START)
    cleanup: list[Callable[[], Awaitable[None]]] = []
    served = await serve(Rig, config, store, clock, API_KEY, cleanup)
    yield served
    for close in reversed(cleanup):
        await close()


async def test_a_request_inside_a_grant_is_approved_by_it_at_once(rig: Rig) -> None:
    first = await rig.create()
    scope = GrantScope(timedelta(hours=8), equal=("charge",), at_most=("amount",))
    grant_id = await rig.allow(first, scope)

    status, later = await rig.ask(run_id="run-2", tool=_call(9000))
    assert status == 201, later
    assert later["state"] == "approved" and later["approved_by_grant"] == grant_id
    assert later["decided_by"] == "alice"
    events = await rig.events(later["id"])
    assert [e.type for e in events] == ["requested", "approved"]
    assert events[1].actor == "grant:alice"
    assert events[1].data["standing_grant"] == grant_id
    assert events[1].data["shown_hash"] == later["hash"]
    # The agent hears it as any approval, and runs exactly its own call.
    async with rig.store.read() as tx:
        hooks = [j.payload["body"] for j in await tx.outbox_jobs(approval_id=later["id"])]
    assert [h["approval"]["approved_by_grant"] for h in hooks if "approval" in h] == [grant_id]
    status, claimed = await rig.claim(later["id"])
    assert status == 200, claimed
    assert claimed["tool"] == _call(9000)
    assert (await audit.verify(rig.store)).ok


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        ({"tool": _call(12001)}, "a larger amount"),
        ({"tool": _call(100, charge="ch_2")}, "another charge"),
        ({"tool": {"name": "stripe.payouts.create", "arguments": {}}}, "another tool"),
        ({"capability": "payments.other"}, "another capability"),
    ],
)
async def test_a_request_outside_the_grant_waits_for_a_person(
    rig: Rig, overrides: dict[str, Any], why: str
) -> None:
    first = await rig.create()
    await rig.allow(first, GrantScope(timedelta(hours=8), equal=("charge",), at_most=("amount",)))
    status, later = await rig.ask(run_id="run-2", **overrides)
    assert status == 201, later
    assert (later["state"], later["approved_by_grant"]) == ("pending", None), why


async def test_a_grant_ends_with_its_run_its_uses_its_lifetime_and_its_revoke(rig: Rig) -> None:
    first = await rig.create()
    in_run = await rig.allow(first, GrantScope(timedelta(hours=8), this_run=True, max_uses=2))
    _, other_run = await rig.ask(run_id="run-2", tool=_call(1))
    assert other_run["state"] == "pending"
    used = [(await rig.ask(tool=_call(n)))[1] for n in (2, 3, 4)]
    assert [r["approved_by_grant"] for r in used] == [in_run, in_run, None]  # two uses

    second = await rig.create(run_id="run-3")
    timed = await rig.allow(second)
    rig.clock.advance(timedelta(hours=8))
    _, late = await rig.ask(run_id="run-3", tool=_call(5))
    assert late["state"] == "pending", "past its lifetime"

    third = await rig.create(run_id="run-4")
    revocable = await rig.allow(third)
    _, before = await rig.ask(run_id="run-4", tool=_call(6))
    assert before["approved_by_grant"] == revocable
    revoked = await standing.revoke(rig.store, rig.directory, rig.clock.now(), revocable, "alice")
    assert revoked.revoked_by == "alice" and revoked.uses == 1
    _, after = await rig.ask(run_id="run-4", tool=_call(7))
    assert after["state"] == "pending"
    # What it approved and nobody claimed yet no longer runs: the claim re-judges it.
    status, refused = await rig.claim(before["id"])
    assert status == 409 and refused["error"]["code"] == "policy_changed", refused
    assert "was revoked by alice" in refused["error"]["message"]
    assert timed != revocable
    # The trail of the approval it was given from says who ended it.
    assert (await rig.events(third["id"]))[-1].type == "grant_revoked"


async def test_only_its_giver_or_an_operator_may_revoke_a_grant(rig: Rig) -> None:
    grant_id = await rig.allow(await rig.create())
    with pytest.raises(NotAnApprover, match="only alice, who gave it, or an operator"):
        await standing.revoke(rig.store, rig.directory, rig.clock.now(), grant_id, "bob")


async def test_the_route_bounds_what_may_be_granted(rig: Rig) -> None:
    operator = rig.operator()
    record = await rig.create()
    with pytest.raises(GrantRefused, match="at most 8 h"):
        await operator.approve_and_allow(
            record["id"], record["hash"], ALICE, GrantScope(timedelta(hours=9))
        )
    quorum = await rig.create(capability="quorum.move", run_id="run-q")
    with pytest.raises(GrantRefused, match="it needs a quorum"):
        await operator.approve_and_allow(quorum["id"], quorum["hash"], ALICE, EIGHT_HOURS)
    payout = await rig.create(capability="payments.payout", run_id="run-p")
    with pytest.raises(GrantRefused, match="grants = false"):
        await operator.approve_and_allow(payout["id"], payout["hash"], ALICE, EIGHT_HOURS)
    contract = await rig.create(capability="contracts.cancel", run_id="run-c")
    with pytest.raises(GrantRefused, match="at most 1 h"):
        await operator.approve_and_allow(contract["id"], contract["hash"], ALICE, EIGHT_HOURS)
    # Refused, nothing was decided: each is still pending for a person.
    for pending in (record, quorum, payout, contract):
        assert (await rig.state(pending["id"])).state == "pending"


async def test_metrics_count_the_grants_given_and_the_requests_they_approve(rig: Rig) -> None:
    core = rig.app[CORE] if rig.app is not None else None
    assert core is not None
    first = await rig.create()
    await core.operator.approve_and_allow(first["id"], first["hash"], ALICE, EIGHT_HOURS)
    for run in ("run-2", "run-3"):
        _, later = await rig.ask(run_id=run)
        assert later["approved_by_grant"]

    def count(kind: str) -> float | None:
        labels = {"tenant": "acme", "kind": kind}
        return core.metrics.registry.get_sample_value("signoff_grant_approvals_total", labels)

    assert (count("given"), count("used")) == (1, 2)
    # An approval by a grant is a decision like any other.
    approved = core.metrics.registry.get_sample_value(
        "signoff_decisions_total", {"outcome": "approved"}
    )
    assert approved == 3


async def test_a_card_offers_a_grant_only_where_its_route_gives_one(rig: Rig) -> None:
    async def offered(record: dict[str, Any]) -> bool:
        row = await rig.state(record["id"])
        return card_for(rig.directory, row, rig.clock.now()).grantable

    record = await rig.create()
    assert await offered(record)
    assert not await offered(await rig.create(capability="quorum.move", run_id="run-q"))
    assert not await offered(await rig.create(capability="payments.payout", run_id="run-p"))
    await rig.operator().decide("approve", record["id"], record["hash"], ALICE)
    assert not await offered(record), "a decided card offers nothing"


async def test_a_grant_approves_only_what_its_giver_may_decide_now(rig: Rig) -> None:
    grant_id = await rig.allow(await rig.create())
    # Alice asks on her own behalf: she may not approve her own request, nor may her grant.
    _, own = await rig.ask(run_id="run-2", requested_by="alice", tool=_call(1))
    assert own["state"] == "pending"
    # A delegate's grant lasts while the delegation does.
    delegations = Delegations(rig.store, rig.directory, rig.clock)
    away = await delegations.create("alice", "dave", created_by="cli", scope="contracts.*")
    contract = await rig.create(capability="contracts.cancel", run_id="run-c")
    _, given = await rig.operator().approve_and_allow(
        contract["id"], contract["hash"], Actor("dave", "web"), GrantScope(timedelta(minutes=30))
    )
    assert given.as_delegate_of == "alice"
    _, covered = await rig.ask(capability="contracts.cancel", run_id="run-c2")
    assert covered["approved_by_grant"] == given.id
    await delegations.revoke(away.id, by="cli")
    _, after = await rig.ask(capability="contracts.cancel", run_id="run-c3")
    assert after["state"] == "pending"
    assert grant_id != given.id


async def test_a_revoke_racing_a_covered_create_leaves_exactly_one_outcome(rig: Rig) -> None:
    outcomes = set()
    for i in range(6):
        first = await rig.create(run_id=f"race-{i}")
        grant_id = await rig.allow(first)

        async def revoke(grant_id: str = grant_id, after: float = 0.004 * i) -> Any:
            await asyncio.sleep(after)  # staggered, so either may reach the grant first
            return await standing.revoke(
                rig.store, rig.directory, rig.clock.now(), grant_id, "alice"
            )

        created, revoked = await asyncio.gather(
            rig.ask(run_id=f"race-{i}", tool=_call(100 + i)), revoke()
        )
        status, record = created
        assert status == 201, record
        # Approved by the grant exactly when the grant counts that use.
        if record["state"] == "approved":
            assert record["approved_by_grant"] == grant_id and revoked.uses == 1
        else:
            assert record["state"] == "pending" and revoked.uses == 0
        outcomes.add(record["state"])
    assert outcomes <= {"approved", "pending"}
