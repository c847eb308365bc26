"""The standing grants page over real HTTP, on SQLite and PostgreSQL, with a FakeClock.

The dashboard's rig (the real application on a loopback port, people signed in with
single-use links). Proves: a person sees the live grants they gave and nobody else's, an
operator sees every one; Revoke ends a grant at once (the next covered request waits for a
person) and its approval's trail says who ended it from the web; the dashboard's summary
counts the live ones; a revoke by someone who
neither gave it nor operates, of a grant that does not exist, of one already revoked, or
posted without the page's CSRF token changes nothing and says why.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from bot import audit
from bot.clock import FakeClock
from bot.intake import create_request
from bot.operator import Actor, Operator
from bot.standing import GrantScope
from store.records import Approval, StandingGrant
from store.repository import Store
from tests.support.samples import make_request
from tests.support.web_rig import Browser, Rig, parse, running


@pytest.fixture
async def rig(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Rig]:
    async with running(store, clock, monkeypatch) as started:
        yield started


def _refund(charge: str) -> dict[str, Any]:
    return {"name": "stripe.refunds.create", "arguments": {"charge": charge, "amount": 100}}


async def _grant(
    rig: Rig, who: str, run_id: str, charge: str = "ch_1"
) -> tuple[Approval, StandingGrant]:
    """`who` approves a refund of `charge`, allowing the same for that charge for 8 h."""
    approval = await rig.create(run_id=run_id, tool=_refund(charge))
    operator = Operator(rig.store, rig.directory, rig.clock)
    scope = GrantScope(timedelta(hours=8), equal=("charge",))
    _, grant = await operator.approve_and_allow(
        approval.id, approval.hash, Actor(who, "web"), scope
    )
    return approval, grant


def _listed(html: str) -> list[str]:
    return [li.attrs["data-grant-id"] for li in parse(html).all("li", class_="grant")]


async def _revoke(browser: Browser, grant_id: str, csrf: str | None = None) -> int:
    token = await browser.csrf() if csrf is None else csrf
    page = await browser.post(f"/web/grants/{grant_id}/revoke", {"csrf": token})
    return page.status


async def test_each_person_sees_the_grants_they_gave_and_an_operator_sees_all(rig: Rig) -> None:
    _, alices = await _grant(rig, "alice", "run-a")
    rig.clock.advance(minutes=1)  # newest first
    _, bobs = await _grant(rig, "bob", "run-b", charge="ch_2")
    seen = {}
    for person in ("alice", "bob", "olga"):
        browser = await rig.browser(person)
        seen[person] = _listed((await browser.get("/web/grants")).html)
    assert seen == {"alice": [alices.id], "bob": [bobs.id], "olga": [bobs.id, alices.id]}
    # The dashboard's summary counts them and leads to the page.
    summary = (await (await rig.browser("olga")).get("/dashboard")).dom.one(
        "p", class_="dash-summary"
    )
    link = summary.one("a", class_="dash-grants")
    assert (link.attrs["href"], link.words) == ("/web/grants", "2 live standing grants")


async def test_revoke_ends_the_grant_at_once_and_the_trail_says_who(rig: Rig) -> None:
    given_with, grant = await _grant(rig, "alice", "run-a")
    covered = await create_request(
        rig.store, rig.directory, rig.clock, "acme", make_request(run_id="run-c")
    )
    assert covered.approval.grant_id == grant.id

    olga = await rig.browser("olga")
    token = await olga.csrf()
    page = await olga.post(f"/web/grants/{grant.id}/revoke", {"csrf": token})
    assert page.status == 200 and page.url.endswith(f"/web/grants?revoked={grant.id}")
    assert "is revoked" in page.html and _listed(page.html) == []

    later = await create_request(
        rig.store, rig.directory, rig.clock, "acme", make_request(run_id="run-d")
    )
    assert later.approval.state == "pending" and later.approval.grant_id is None
    async with rig.store.read() as tx:
        events = await tx.events_for(given_with.id)
    assert (events[-1].type, events[-1].actor) == ("grant_revoked", "web:olga")
    assert (await audit.verify(rig.store)).ok


async def test_a_revoke_that_may_not_happen_changes_nothing_and_says_why(rig: Rig) -> None:
    _, grant = await _grant(rig, "alice", "run-a")
    bob = await rig.browser("bob")
    page = await bob.post(f"/web/grants/{grant.id}/revoke", {"csrf": await bob.csrf()})
    assert page.status == 403 and "only alice, who gave it, or an operator" in page.html
    assert await _revoke(bob, "no-such-grant") == 404

    alice = await rig.browser("alice")
    assert await _revoke(alice, grant.id, csrf="not-the-token") == 403
    async with rig.store.read() as tx:
        assert (await tx.get_standing_grant(grant.id)).revoked_at is None
    assert await _revoke(alice, grant.id) == 200
    assert await _revoke(alice, grant.id) == 409  # revoked already: nothing more to end
