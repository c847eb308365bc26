"""A quorum's votes on every surface, over real HTTP on SQLite and PostgreSQL, with a FakeClock.

The real application (bot.app.build_app with [web]) on a loopback port. A migration needs 2
of 3 (the `quorum.*` route): Alice approves on the web page, then Bob in Slack (through the
Operator as `slack:bob`, as a Slack click does). Proves that before the deciding vote and
after it, the API record, Bob's inbox row and the approval page name every counted vote with
who, when and on which surface; and that once it is decided, the decision webhook's record,
the card, the dashboard's recent decisions and its timeline page still name Alice, not only
Bob, who decided it; and that lists read the votes of all their rows without a query per row.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import event

from bot.clock import FakeClock
from bot.config import parse_config
from bot.durations import parse_duration
from bot.operator import Actor, Operator
from bot.outbox.jobs import JobKind
from bot.signin import SignInLinks
from store.repository import Store
from tests.support.chat_server import ChatServer, serve
from tests.support.samples import TEST_CONFIG
from tests.support.web_browser import Browser

API_KEY = "acme-votes-key"
SECRET = "quorum-votes-test-secret-0123456789abcdef"
START = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)

ALICE = "Approved by Alice Ng (alice) at 2026-12-01 09:10 UTC on the web"
BOB = "Approved by Bob Stone (bob) at 2026-12-01 09:30 UTC in Slack"


@dataclass
class Rig(ChatServer):
    links: SignInLinks

    async def signed_in(self, principal: str, cleanup: list[Any]) -> Browser:
        browser = Browser(self.url)
        cleanup.append(browser.http.close)
        page = await browser.sign_in(self.links.url(self.url, await self.links.make(principal)))
        assert page.status == 200, page.html
        return browser

    async def record(self, approval_id: str) -> dict[str, Any]:
        """The record as the agent API answers GET /v1/approvals/{id}."""
        async with self.http.get(
            f"{self.url}/v1/approvals/{approval_id}",
            headers={"Authorization": f"Bearer {self.api_key}"},
        ) as response:
            assert response.status == 200, await response.text()
            return await response.json()


@pytest.fixture
async def world(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Rig, list[Callable[[], Awaitable[None]]]]]:
    monkeypatch.setenv("SIGNOFF_WEB_SECRET", SECRET)
    monkeypatch.setenv("VOTES_TEST_API_KEY", API_KEY)
    raw = copy.deepcopy(TEST_CONFIG)
    raw["web"] = {}
    raw["tenants"][0]["api_key_env"] = "VOTES_TEST_API_KEY"
    raw["principals"]["olga"] = {"name": "Olga Ops", "operator": True}
    config = parse_config(raw)
    clock.set(START)
    cleanup: list[Callable[[], Awaitable[None]]] = []
    links = SignInLinks(store, config.directory(), clock, parse_duration("15m"))
    rig = await serve(Rig, config, store, clock, API_KEY, cleanup, links=links)
    yield rig, cleanup
    for close in reversed(cleanup):
        await close()


def _votes(record: dict[str, Any]) -> list[tuple[str, str, str | None, str]]:
    return [(v["principal"], v["decision"], v["via"], v["at"]) for v in record["votes"]]


async def test_every_vote_is_shown_before_and_after_the_outcome(
    world: tuple[Rig, list[Any]],
) -> None:
    rig, cleanup = world
    created = await rig.create(run_id="migrate", capability="quorum.migrate")
    approval_id = created["id"]
    assert created["votes"] == []

    # Alice approves on the web page: one vote of two.
    rig.clock.advance(minutes=10)
    alice = await rig.signed_in("alice", cleanup)
    done = await alice.decide(await alice.get(f"/web/approvals/{approval_id}"), "approve")
    assert done.status == 303
    pending = await rig.record(approval_id)
    assert pending["state"] == "pending"
    assert _votes(pending) == [("alice", "approve", "web", "2026-12-01T09:10:00.000000Z")]
    assert pending["votes"][0]["as_delegate_of"] is None

    bob = await rig.signed_in("bob", cleanup)
    row = (await bob.get("/web/inbox")).card(approval_id).text
    assert "needs 2 approvals, 1 so far" in row
    assert ALICE in row
    assert ALICE in (await bob.get(f"/web/approvals/{approval_id}")).card(approval_id).text

    # Bob approves in Slack: the vote that decides it.
    rig.clock.advance(minutes=20)
    operator = Operator(rig.store, rig.directory, rig.clock)
    await operator.approve_shown(approval_id, created["hash"], Actor("bob", "slack"))
    decided = await rig.record(approval_id)
    assert (decided["state"], decided["decided_by"]) == ("approved", "bob")
    assert _votes(decided) == [
        ("alice", "approve", "web", "2026-12-01T09:10:00.000000Z"),
        ("bob", "approve", "slack", "2026-12-01T09:30:00.000000Z"),
    ]

    # The decision webhook carries the same record, every vote in it.
    async with rig.store.read() as tx:
        hooks = [
            job.payload["body"]
            for job in await tx.outbox_jobs(approval_id=approval_id)
            if job.kind == JobKind.WEBHOOK
        ]
    assert [(h["event"], _votes(h["approval"])) for h in hooks] == [("approved", _votes(decided))]

    card = (await alice.get(f"/web/approvals/{approval_id}")).card(approval_id).text
    assert ALICE in card and BOB in card
    assert "Approved by Bob Stone (bob) at 2026-12-01 09:30 UTC" in card  # the outcome

    olga = await rig.signed_in("olga", cleanup)
    dashboard = (await olga.get("/dashboard")).doc
    [recent] = dashboard.find("table", id="recent").find_all("tr", data_approval_id=approval_id)
    assert "Bob Stone (bob)" in recent.text
    assert [li.text for li in recent.find_all("li")] == [ALICE, BOB]
    timeline = (await olga.get(f"/dashboard/approvals/{approval_id}")).doc
    assert [li.text for li in timeline.find("ul", classes="dash-votes").find_all("li")] == [
        ALICE,
        BOB,
    ]


async def test_a_list_reads_the_votes_of_every_row_in_one_statement(
    world: tuple[Rig, list[Any]],
) -> None:
    rig, _ = world
    operator = Operator(rig.store, rig.directory, rig.clock)
    made = [await rig.create(run_id=f"m{i}", capability="quorum.migrate") for i in range(4)]
    for record in made:
        await operator.approve_shown(record["id"], record["hash"], Actor("alice", "web"))
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    engine = rig.store.engine.sync_engine
    event.listen(engine, "before_cursor_execute", seen)
    try:
        async with rig.store.read() as tx:
            rows = await tx.list_approvals(tenant="acme")
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    assert {row.id: [v.principal for v in row.votes] for row in rows} == {
        r["id"]: ["alice"] for r in made
    }
    assert sum("votes" in s for s in statements) == 1, statements
