"""The web inbox end to end, in-process: the real application (bot.app.build_app with [web])
on a loopback port, a FakeClock, and aiohttp clients with their own cookie jars standing in
for browsers (one per person; a person's second tab shares their jar), on SQLite and
PostgreSQL (tests/support/web_inbox_rig.py).

Proves: a sign-in link opens a session once (used again or expired it is refused in words
with 410, already at its GET; one never issued is 403), and lands where a `?next=` naming one
of our pages says, else on the inbox; `/` sends a browser to the inbox; pages without a
session, or after the idle timeout, are the 401 sign-in page; the inbox lists only what the
person may decide (assigned, in their group, naming them, delegated to them now), soonest
deadline first, in pages. An approval's page, and deciding from it, is
test_web_approval_page.py.
"""

from __future__ import annotations

from urllib.parse import urlencode, urlsplit

import pytest

from bot import inbox
from bot.delegations import Delegations
from channels.web import inbox as web_inbox
from tests.support.web_inbox_rig import GLOBEX_KEY, Rig

# -- signing in ------------------------------------------------------------------------------------


async def test_a_sign_in_link_opens_a_session_once(rig: Rig) -> None:
    link = await rig.link("alice")
    browser = rig.browser()
    for _ in range(2):  # a link preview or a mail scanner fetching it uses nothing up
        shown = await browser.get(link)
        assert shown.status == 200 and shown.doc.find_all("form", id="sign-in")
    first = await browser.sign_in(link, follow=False)
    assert (first.status, first.url) == (303, "/web/inbox")
    inbox = await browser.get("/web/inbox")
    assert inbox.status == 200
    assert "Your inbox" in inbox.doc.find("h1").text
    assert "Alice Ng" in inbox.doc.find(classes="who").text

    # Used up: refused with 410 Gone, already at the GET (no Continue to press), and the
    # POST too; a link never issued is 403. Neither opens a session.
    late = rig.browser()
    again = await late.get(link)
    assert again.status == 410 and "already used" in again.alert
    assert again.doc.find_all("form", id="sign-in") == []
    posted = await late.post(urlsplit(link).path, {})
    assert posted.status == 410 and "already used" in posted.alert
    forged = await rig.browser().sign_in("/web/login/not-a-token")
    assert forged.status == 403 and "not valid" in forged.alert
    assert (await late.get("/web/inbox")).status == 401


async def test_an_expired_sign_in_link_is_410_at_the_get_and_the_post(rig: Rig) -> None:
    link = await rig.link("alice")
    shown = await rig.browser().get(link)  # still good: the Continue button
    [form] = shown.doc.find_all("form", id="sign-in")
    rig.clock.advance(minutes=16)  # link_ttl is 15m
    late = await rig.browser().post(form.attrs["action"], {})
    assert late.status == 410 and "expired" in late.alert
    again = await rig.browser().get(link)
    assert again.status == 410 and "expired" in again.alert


async def test_a_sign_in_link_lands_where_its_next_says_if_that_is_one_of_our_pages(
    rig: Rig,
) -> None:
    dashboard = await rig.browser().sign_in(await rig.link("olga") + "?next=/dashboard")
    assert dashboard.status == 200 and urlsplit(dashboard.url).path == "/dashboard", dashboard.url
    assert dashboard.doc.find("h1").text == "Dashboard"
    # Anywhere else (another site, a path outside the web surface): the inbox.
    for elsewhere in ("https://evil.example/", "//evil.example/x", "/v1/approvals", "/web/../x"):
        browser = rig.browser()
        query = urlencode({"next": elsewhere})
        shown = await browser.get(await rig.link("alice") + f"?{query}")
        [form] = shown.doc.find_all("form", id="sign-in")
        assert "?" not in form.attrs["action"], form.attrs["action"]
        # Posted with it anyway (a hand-made form): the POST judges it again.
        arrived = await browser.post(form.attrs["action"] + f"?{query}", {})
        assert (arrived.status, arrived.url) == (303, "/web/inbox"), elsewhere


async def test_the_root_url_sends_a_browser_to_the_inbox(rig: Rig) -> None:
    stranger = rig.browser()
    root = await stranger.get("/", follow=False)
    assert root.status == 303 and root.url == "/web/inbox", root.url
    arrived = await stranger.get("/")
    assert arrived.status == 401 and "Sign in with a link" in arrived.doc.find("h1").text
    signed = await rig.signed_in("alice")
    home = await signed.get("/")
    assert home.status == 200 and urlsplit(home.url).path == "/web/inbox"
    # The agent API's answer to an unknown path is its JSON 404, as before.
    async with rig.http.get(f"{rig.url}/v1/nothing-here") as response:
        assert response.status == 404
        assert (await response.json())["error"]["code"] == "not_found"


async def test_pages_without_a_session_are_the_401_sign_in_page(rig: Rig) -> None:
    record = await rig.create()
    stranger = rig.browser()
    for path in ("/web/inbox", f"/web/approvals/{record['id']}"):
        page = await stranger.get(path)
        assert page.status == 401
        assert "Sign in with a link" in page.doc.find("h1").text
        assert page.doc.find_all("form", classes="decide") == []
    posted = await stranger.post(
        f"/web/approvals/{record['id']}/approve", {"hash": record["hash"], "csrf": "x"}
    )
    assert posted.status == 401
    assert (await rig.state(record["id"])).state == "pending"


async def test_a_session_idle_past_session_idle_is_over(rig: Rig) -> None:
    browser = await rig.signed_in("alice")
    rig.clock.advance(hours=7)
    assert (await browser.get("/web/inbox")).status == 200  # a page keeps it alive
    rig.clock.advance(hours=7)
    assert (await browser.get("/web/inbox")).status == 200
    # The script's refresh does not count as activity.
    assert (await browser.get("/web/inbox?partial=1")).status == 200
    rig.clock.advance(hours=8, minutes=1)
    page = await browser.get("/web/inbox")
    assert page.status == 401 and "Sign in with a link" in page.html


# -- the inbox -------------------------------------------------------------------------------------


async def test_the_inbox_lists_what_the_person_may_decide_soonest_deadline_first(
    rig: Rig,
) -> None:
    # payments.*: group finance (alice, bob, sam); contracts.*: alice, sam; quorum.*: alice,
    # bob, carol; globex: dave.
    later = await rig.create(run_id="r-later", approval_ttl="48h")
    soon = await rig.create(run_id="r-soon", approval_ttl="1h", capability="contracts.renew")
    middle = await rig.create(run_id="r-middle", approval_ttl="5h", capability="quorum.move")
    globex = await rig.create_for(
        GLOBEX_KEY,
        run_id="r-globex",
        capability="anything.at.all",
        approval_ttl="3h",
        tool={"name": "t", "arguments": {}},
        presentation={"title": "Globex thing"},
    )
    decided = await rig.create(run_id="r-decided")
    alice = await rig.signed_in("alice")
    page = await alice.get(decided_page := f"/web/approvals/{decided['id']}")
    assert (await alice.decide(page, "approve")).status == 303, decided_page

    inbox = await alice.get("/web/inbox")
    ids = [card.attrs["data-approval-id"] for card in inbox.cards]
    assert ids == [soon["id"], middle["id"], later["id"]]
    first = inbox.card(soon["id"])
    assert first.attrs["data-state"] == "pending"
    assert first.find("a").attrs["href"] == f"/web/approvals/{soon['id']}"
    assert first.find("a").text == "Refund €120.00 to Zoë"
    assert "1 h left" in first.find(classes="time-left").text

    dave = await rig.signed_in("dave")
    assert [c.attrs["data-approval-id"] for c in (await dave.get("/web/inbox")).cards] == [
        globex["id"]
    ]
    erin = await rig.signed_in("erin")
    empty = await erin.get("/web/inbox")
    assert empty.cards == [] and "Nothing is waiting for your decision" in empty.html

    # Bob stands in for dave from now on: dave's request is in his inbox, marked so.
    await Delegations(rig.store, rig.directory, rig.clock).create(
        "dave", "bob", created_by="cli", starts_at=rig.clock.now(), ends_at=None, scope="*"
    )
    bob = await rig.signed_in("bob")
    bobs = await bob.get("/web/inbox")
    assert [c.attrs["data-approval-id"] for c in bobs.cards] == [
        globex["id"],
        middle["id"],
        later["id"],
    ]
    assert "you decide for Dave Roe" in bobs.card(globex["id"]).text

    # Past its deadline a request is no longer offered, even before the sweeper expires it.
    rig.clock.advance(hours=2)
    ids = [card.attrs["data-approval-id"] for card in (await alice.get("/web/inbox")).cards]
    assert ids == [middle["id"], later["id"]]


async def test_the_inbox_is_paged(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    # Small pages and batches, so a handful of requests crosses every boundary: a full page,
    # the scan limit on candidates the exact rule turns down, the last page.
    monkeypatch.setattr(web_inbox, "PAGE", 2)
    monkeypatch.setattr(inbox, "_BATCH", 2)
    monkeypatch.setattr(inbox, "_SCAN", 4)
    mine = []
    for n in range(5):
        mine.append(await rig.create(run_id=f"mine-{n}", approval_ttl=f"{10 + n}h"))
    # Alice stands in for dave, but only for contracts: dave's requests are candidates the
    # database hands over, and the eligibility rule turns each of them down.
    await Delegations(rig.store, rig.directory, rig.clock).create(
        "dave",
        "alice",
        created_by="cli",
        starts_at=rig.clock.now(),
        ends_at=None,
        scope="contracts.*",
    )
    for n in range(5):  # dave's, with deadlines between alice's 11th and 12th hour
        await rig.create_for(
            GLOBEX_KEY,
            run_id=f"dave-{n}",
            capability="x",
            approval_ttl=f"{11 * 60 + 5 + n}m",
            tool={"name": "t", "arguments": {}},
            presentation={"title": f"Dave's {n}"},
        )
    alice = await rig.signed_in("alice")
    pages: list[list[str]] = []
    page = await alice.get("/web/inbox")
    for _ in range(10):
        pages.append([card.attrs["data-approval-id"] for card in page.cards])
        more = page.doc.find_all("a", classes="button")
        if not more:
            break
        page = await alice.get(more[0].attrs["href"])
    ids = [record["id"] for record in mine]
    # The first page stops at the scan limit inside dave's, the second resumes there.
    assert pages == [ids[:2], ids[2:3], ids[3:]]


async def test_the_inbox_refresh_returns_the_list_alone(rig: Rig) -> None:
    record = await rig.create()
    alice = await rig.signed_in("alice")
    inbox = await alice.get("/web/inbox")
    section = inbox.doc.find("section", id="inbox")
    script = inbox.doc.find("script")
    assert script.attrs["src"] == "/web/static/inbox.js"
    assert (await alice.get(script.attrs["src"])).status == 200
    partial = await alice.get(section.attrs["data-refresh"])
    assert partial.status == 200
    assert "<html" not in partial.html
    assert partial.card(record["id"]).attrs["data-state"] == "pending"
