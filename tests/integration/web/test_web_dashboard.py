"""The operator dashboard over real HTTP, on SQLite and PostgreSQL, with a FakeClock.

The real application (bot.app.build_app with a [web] table) on a loopback port; an operator
and a non-operator sign in with single-use links like anyone else. Proves: the operator sees
every pending request overdue first and marked "overdue", then by deadline, with assignee,
delegate and escalation level; anyone else gets a 403 in words (and a hand-made POST from
them changes nothing); a dead outbox job is listed with its error and Retry requeues it due
now, while a POST without the CSRF token is refused and changes nothing; an approval's
timeline lists its audit events in order with "chain intact", and says where it is broken
after an event is edited behind signoff's back; the two SVG charts carry one point per day
and one bar per bin with the seeded values; pending requests page forwards and back with no
row lost or repeated.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import aiohttp
import pytest

from bot.agent_actions import AgentActions
from bot.app import outbox_handlers
from bot.clock import FakeClock
from bot.delegations import Delegations
from bot.outbox.jobs import JobKind
from bot.outbox.runner import OutboxRunner, OutboxSettings
from bot.sweeper import Sweeper
from channels.web import dashboard as web_dashboard
from store.repository import Store
from tests.support.samples import tamper
from tests.support.web_rig import START, Node, Rig, running


@pytest.fixture
async def rig(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Rig]:
    async with running(store, clock, monkeypatch) as started:
        yield started


def _ids(table: Node) -> list[str]:
    return [
        row.attrs["data-approval-id"] for row in table.all("tr") if "data-approval-id" in row.attrs
    ]


# -- tests -----------------------------------------------------------------------------------


async def test_operator_sees_pending_overdue_first_and_highlighted(rig: Rig) -> None:
    late = await rig.create(run_id="r-late", approval_ttl="1h")
    later = await rig.create(run_id="r-later", approval_ttl="48h")
    soon = await rig.create(run_id="r-soon", approval_ttl="2h")
    # alice is away: bob decides for her; her contract request shows him as its delegate.
    await Delegations(rig.store, rig.directory, rig.clock).create(
        "alice", "bob", created_by="cli:alice", scope="contracts.*"
    )
    contract = await rig.create(
        run_id="r-contract",
        capability="contracts.cancel",
        approval_ttl="3h",
        presentation={"title": "Cancel <b>Initech</b> contract"},
    )
    rig.clock.advance(minutes=90)

    olga = await rig.browser("olga")
    page = await olga.get("/dashboard")
    assert page.status == 200, page.html
    table = page.dom.one("table", id="pending")
    assert _ids(table) == [late.id, soon.id, contract.id, later.id]
    rows = {
        row.attrs["data-approval-id"]: row
        for row in table.all("tr")
        if "data-approval-id" in row.attrs
    }
    assert "overdue" in rows[late.id].classes
    assert "overdue by 30 m" in rows[late.id].words
    assert not any("overdue" in rows[i].classes for i in (soon.id, contract.id, later.id))
    assert "30 m" in rows[soon.id].words and "1 h 30 m" in rows[soon.id].words  # left, age
    assert "Bob Stone (bob)" in rows[contract.id].words
    assert "Alice Ng (alice)" in rows[contract.id].words
    assert "group finance" in rows[late.id].words
    # Agent text is escaped, never markup.
    assert "Cancel <b>Initech</b> contract" in rows[contract.id].words
    assert "&lt;b&gt;Initech" in page.html
    assert "4 pending" in page.dom.one("p", class_="dash-summary").words
    assert page.dom.one("link", rel="stylesheet", href="/web/static/dashboard.css")

    # An escalation shows as its level once the sweeper moved the request along its route.
    rig.clock.set(START + timedelta(hours=24, minutes=1))
    await Sweeper(rig.store, rig.directory, rig.clock).sweep_all()
    page = await olga.get("/dashboard")
    assert page.status == 401  # a day idle: the session ended; a new link opens another
    olga = await rig.browser("olga")
    page = await olga.get("/dashboard")
    rows = {
        row.attrs["data-approval-id"]: row
        for row in page.dom.one("table", id="pending").all("tr")
        if "data-approval-id" in row.attrs
    }
    assert list(rows) == [later.id]  # the others expired
    assert rows[later.id].all("td")[-1].words == "1"
    assert "Carol Diaz (carol)" in rows[later.id].words


async def test_non_operators_are_refused_in_words(rig: Rig) -> None:
    approval = await rig.create()
    nobody = await rig.browser(None)
    page = await nobody.get("/dashboard")
    assert page.status == 401 and "Sign in with a link" in page.html

    alice = await rig.browser("alice")
    for path in ("/dashboard", f"/dashboard/approvals/{approval.id}"):
        page = await alice.get(path)
        assert page.status == 403, path
        alert = page.dom.one("section", role="alert")
        assert "The dashboard is for operators" in alert.words
        assert "Alice Ng (alice) is not one" in alert.words
        assert "operator = true" in alert.words
        assert 'id="pending"' not in page.html

    # A hand-made Retry with alice's own valid token is refused too and requeues nothing.
    await _dead_job(rig)
    token = await alice.csrf()  # her own session's token, from the sign-out form
    [job] = await _jobs(rig, "dead")
    page = await alice.post(f"/dashboard/outbox/{job.id}/retry", {"csrf": token})
    assert page.status == 403 and "is not one" in page.html
    assert [j.id for j in await _jobs(rig, "dead")] == [job.id]


async def _dead_job(rig: Rig) -> None:
    """A webhook that failed for real: the tenant's receiver refuses connections, and with one
    attempt allowed the runner buries the job."""
    approval = await rig.create(run_id="r-dead")
    await rig.decide(approval, "alice", "slack", "approve")
    async with aiohttp.ClientSession() as session:
        handlers = outbox_handlers(
            rig.store, rig.directory, rig.clock, {}, session, kinds=[JobKind.WEBHOOK]
        )
        runner = OutboxRunner(
            rig.store, handlers, rig.clock, OutboxSettings(max_attempts=1), rand=lambda: 1.0
        )
        assert await runner.run_once() == 1


async def _jobs(rig: Rig, state: str) -> list[Any]:
    async with rig.store.read() as tx:
        return await tx.outbox_jobs(state=state)


async def test_dead_job_listed_and_retried(rig: Rig) -> None:
    olga = await rig.browser("olga")
    page = await olga.get("/dashboard")
    assert "No dead outbox jobs" in page.html

    await _dead_job(rig)
    [job] = await _jobs(rig, "dead")
    page = await olga.get("/dashboard")
    row = page.dom.one("table", id="dead-jobs").one("tr", data_job_id=str(job.id))
    assert "webhook" in row.words
    assert "http://127.0.0.1:9/hooks" in row.words
    assert job.last_error and job.last_error[:40] in row.words
    form = row.one("form")
    assert form.attrs["action"] == f"/dashboard/outbox/{job.id}/retry"
    assert form.attrs["method"] == "post"
    assert form.one("button").words == "Retry"
    token = form.one("input", name="csrf").attrs["value"]

    # Without the token, or with a wrong one, nothing happens.
    for data in ({}, {"csrf": "forged"}):
        refused = await olga.post(f"/dashboard/outbox/{job.id}/retry", data)
        assert refused.status == 403
        assert (
            "security token is missing or wrong" in refused.dom.one("section", role="alert").words
        )
        assert [j.id for j in await _jobs(rig, "dead")] == [job.id]

    rig.clock.advance(minutes=5)
    done = await olga.post(f"/dashboard/outbox/{job.id}/retry", {"csrf": token})
    assert done.status == 200 and done.url.endswith(f"/dashboard?retried={job.id}")
    status = done.dom.one("p", role="status")
    assert f"Outbox job {job.id} (webhook) is queued again" in status.words
    assert 'id="dead-jobs"' not in done.html
    [queued] = [j for j in await _jobs(rig, "queued") if j.id == job.id]
    assert (queued.attempts, queued.run_after, queued.locked_by) == (0, rig.clock.now(), None)

    # Retrying a job that is not dead says so and changes nothing.
    again = await olga.post(f"/dashboard/outbox/{job.id}/retry", {"csrf": token})
    assert again.status == 409
    assert "is queued, not dead" in again.dom.one("section", role="alert").words
    for missing in ("999999", "99999999999"):  # the second is beyond the column's range
        page = await olga.post(f"/dashboard/outbox/{missing}/retry", {"csrf": token})
        assert page.status == 404 and "nothing was retried" in page.html


async def test_timeline_verifies_the_chain_and_shows_execution(rig: Rig) -> None:
    approval = await rig.create(run_id="r-timeline")
    rig.clock.advance(minutes=3)
    await rig.decide(approval, "alice", "web", "approve")
    actions = AgentActions(rig.store, rig.directory, rig.clock)
    claimed = await actions.claim("acme", approval.id)
    rig.clock.advance(seconds=20)
    await actions.complete(
        "acme", approval.id, claimed.claim_token, "succeeded", {"refund": "re_1"}
    )

    olga = await rig.browser("olga")
    page = await olga.get(f"/dashboard/approvals/{approval.id}")
    assert page.status == 200, page.html
    dom = page.dom
    rows = dom.one("table", id="timeline").all("tr")[1:]
    assert [(r.attrs["data-seq"], r.attrs["data-type"]) for r in rows] == [
        ("1", "requested"),
        ("2", "approved"),
        ("3", "claimed"),
        ("4", "executed"),
    ]
    assert "web:alice" in rows[1].words and "2026-01-05 09:03:00" in rows[1].words
    assert "agent:acme" in rows[2].words
    chain = dom.one("p", id="chain")
    assert chain.attrs["data-chain"] == "intact"
    assert chain.words.startswith("Chain intact: 4 events")
    facts = {dd.attrs["data-field"]: dd.words for dd in dom.all("dd") if "data-field" in dd.attrs}
    assert facts["state"] == "executed" and facts["execution"] == "finished"
    assert "2026-01-05 09:03:00 UTC" in facts["claimed_at"]
    assert "2026-01-05 09:13:00 UTC" in facts["lease_until"]
    assert "2026-01-05 09:03:20 UTC" in facts["executed_at"]
    assert '"refund": "re_1"' in facts["outcome"]

    # Someone edits the approval's decision event in the database: the page says so.
    await tamper(
        rig.store,
        "UPDATE approval_events SET actor = 'web:mallory' WHERE approval_id = :id AND seq = 2",
        id=approval.id,
    )
    dom = (await olga.get(f"/dashboard/approvals/{approval.id}")).dom
    chain = dom.one("p", id="chain")
    assert chain.attrs["data-chain"] == "broken" and chain.attrs["role"] == "alert"
    assert "Chain broken" in chain.words
    assert "event #2" in chain.words and "altered" in chain.words
    broken = dom.one("tr", class_="broken")
    assert broken.attrs["data-seq"] == "2" and "web:mallory" in broken.words

    missing = await olga.get("/dashboard/approvals/no-such-id")
    assert missing.status == 404 and "no approval with id no-such-id" in missing.html


async def test_charts_and_recent_decisions_from_seeded_days(rig: Rig) -> None:
    # Jan 5: three requests; r1 approved in Slack after 30 s.
    r1 = await rig.create(run_id="r1")
    r2 = await rig.create(run_id="r2")
    r6 = await rig.create(run_id="r6", approval_ttl="30h")
    rig.clock.advance(seconds=30)
    await rig.decide(r1, "alice", "slack", "approve")
    # Jan 6: r3; at 15:00 the sweeper expires r6 (pending) and r1's unclaimed grant (approved,
    # not a pending request leaving), escalates r2, and alice rejects r2 from the CLI (30 h).
    rig.clock.set(START + timedelta(days=1))
    r3 = await rig.create(run_id="r3")
    rig.clock.set(START + timedelta(days=1, hours=6))
    await Sweeper(rig.store, rig.directory, rig.clock).sweep_all()
    async with rig.store.read() as tx:
        assert (await tx.get_approval(r6.id)).state == "expired"  # type: ignore[union-attr]
        assert (await tx.get_approval(r1.id)).state == "expired"  # type: ignore[union-attr]
        r2 = await tx.get_approval(r2.id)  # type: ignore[assignment]
    await rig.decide(r2, "alice", "cli", "reject")
    # Jan 7: r4 and r5; r4 approved on the web after 10 minutes.
    rig.clock.set(START + timedelta(days=2))
    r4 = await rig.create(run_id="r4")
    r5 = await rig.create(run_id="r5")
    rig.clock.advance(minutes=10)
    await rig.decide(r4, "alice", "web", "approve")
    rig.clock.set(START + timedelta(days=3))  # Jan 8, 09:00

    olga = await rig.browser("olga")
    dom = (await olga.get("/dashboard")).dom
    assert set(_ids(dom.one("table", id="pending"))) == {r3.id, r5.id}

    svgs = dom.all("svg", class_="chart")
    assert len(svgs) == 2
    for svg in svgs:
        assert svg.attrs["role"] == "img"
        [title] = [c for c in svg.children if c.tag == "title"]
        [desc] = [c for c in svg.children if c.tag == "desc"]
        assert title.words and desc.words
        assert svg.attrs["aria-labelledby"] == f"{title.attrs['id']} {desc.attrs['id']}"
        labels = [t.words for t in svg.all("text", class_="axis-label")]
        assert len(labels) == 2 and all(labels)

    pending = dom.one("svg", id="chart-pending")
    points = pending.all("circle", class_="point")
    assert len(points) == 14
    assert points[0].attrs["data-label"] == "2025-12-26"
    assert points[-1].attrs["data-label"] == "2026-01-08"
    assert [int(p.attrs["data-value"]) for p in points] == [0] * 10 + [2, 1, 2, 2]
    assert len(pending.one("polyline").attrs["points"].split()) == 14

    decide = dom.one("svg", id="chart-decide")
    bars = decide.all("rect", class_="bar")
    labels = ["<1m", "1–5m", "5–15m", "15m–1h", "1–4h", "4–24h", "1–3d", ">3d"]
    assert [b.attrs["data-label"] for b in bars] == labels
    assert [int(b.attrs["data-value"]) for b in bars] == [1, 0, 1, 0, 0, 0, 1, 0]
    assert "3 decisions in the last 14 days" in decide.one("desc").words
    assert "median is in the 5–15m bin" in decide.one("desc").words

    recent = dom.one("table", id="recent")
    rows = [r for r in recent.all("tr") if "data-approval-id" in r.attrs]
    assert [r.attrs["data-approval-id"] for r in rows] == [r4.id, r2.id, r1.id]
    cells = [[c.words for c in r.all("td")] for r in rows]
    # Request, decision, decider, surface, time to decide, decided at.
    assert cells[0][1:5] == ["approved", "Alice Ng (alice)", "web", "10 m"]
    assert cells[1][1:5] == ["rejected", "Alice Ng (alice)", "cli", "1 d 6 h"]
    assert cells[2][1:5] == ["approved", "Alice Ng (alice)", "slack", "30 s"]
    assert cells[0][5] == "2026-01-07 09:10"
    assert "now expired" in cells[2][0]


async def test_pending_pages_forward_and_back(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(web_dashboard, "PAGE_SIZE", 4)
    made = []
    # Ties on the deadline (same clock, same TTL) are ordered by id, across page edges too.
    for i, ttl in enumerate(["5h", "1h", "5h", "5h", "2h", "5h", "3h", "5h", "5h", "4h"]):
        made.append(await rig.create(run_id=f"page-{i}", approval_ttl=ttl))
    expected = [a.id for a in sorted(made, key=lambda a: (a.expires_at, a.id))]

    olga = await rig.browser("olga")
    page = await olga.get("/dashboard")
    seen: list[list[str]] = []
    while True:
        dom = page.dom
        seen.append(_ids(dom.one("table", id="pending")))
        nxt = dom.all("a", rel="next")
        if not nxt:
            break
        page = await olga.get(nxt[0].attrs["href"])
    assert [len(p) for p in seen] == [4, 4, 2]
    assert [i for p in seen for i in p] == expected
    assert "10 pending" in page.dom.one("p", class_="dash-summary").words

    back: list[list[str]] = []
    while prev := page.dom.all("a", rel="prev"):
        page = await olga.get(prev[0].attrs["href"])
        back.append(_ids(page.dom.one("table", id="pending")))
    assert back == [seen[1], seen[0]]
    assert not page.dom.all("a", rel="prev")

    # A cursor that does not parse is the first page, not an error.
    assert (
        _ids((await olga.get("/dashboard?after=garbage")).dom.one("table", id="pending")) == seen[0]
    )
