"""An approval's page in the web inbox, and deciding from it, end to end in-process as
test_web_inbox.py drives the web: the real application with [web] on a loopback port, a
FakeClock, and aiohttp clients with their own cookie jars standing in for browsers, on SQLite
and PostgreSQL (tests/support/web_inbox_rig.py).

Proves: the approval's page shows the card and offers the forms only to those the Operator
would let decide, saying why to anyone else; approving, rejecting with a reason and handing
over from the page decide through the Operator as `web:<principal>` and queue the webhook;
every refusal (already decided in another tab, changed since shown, not entitled, expired, a
form without the CSRF token) is shown in words with its status, audited where a chat surface
would audit it, and changes nothing; the agent's reason and the reject field are named apart;
a re-asked call links the request it re-asks; the `web` notify target is served.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from urllib.parse import urlencode

import pytest

from bot.agent_actions import AgentActions
from bot.audit import verify
from bot.sweeper import Sweeper
from tests.support.web_inbox_rig import Rig

WRONG_HASH = "ab" * 32


async def _trail(rig: Rig, approval_id: str) -> list[tuple[str, str]]:
    return [(e.type, e.actor) for e in await rig.events(approval_id)]


async def test_the_page_shows_the_card_the_chat_surfaces_show(rig: Rig) -> None:
    record = await rig.create(
        tool={"name": "stripe.refunds.create", "arguments": {"charge": "ch_1", "memo": "x" * 300}},
        presentation={
            "title": "Refund <b>€120</b>",
            "summary": "Customer asked twice.",
            "fields": [{"label": "Amount", "value": "€120.00"}],
        },
    )
    alice = await rig.signed_in("alice")
    page = await alice.get(f"/web/approvals/{record['id']}")
    assert page.status == 200
    card = page.card(record["id"])
    assert card.attrs["data-state"] == "pending"
    assert card.find("h1").text == "Refund <b>€120</b>"  # the agent's text, never markup
    assert "<b>€120</b>" not in page.html
    text = card.text
    for expected in (
        "Customer asked twice.",
        "payments.refund",
        "stripe.refunds.create",
        "Amount €120.00",
        "memo 300 chars",  # the full value, with its size (a long one's only)
        "x" * 300,
        "Reason (from the agent, unverified) refunds over €100 need approval",
        "Requested by Sam Requester (sam)",
        "Assigned to group finance",
        "in 3 d",
        f"sha256:{record['hash'][:12]}",
        record["hash"],
    ):
        assert expected in text, (expected, text)
    # Approve and Reject first (one press each); the rest below, each folded in a <details>
    # that the page ships closed.
    assert page.forms() == [
        "approve", "reject", "reject-with-reason", "allow", "answer", "delegate"
    ]  # fmt: skip
    folded = page.doc.find("div", classes="more-actions").find_all("details")
    assert [d.find("summary").text for d in folded] == [
        "Give a reason and reject…", "Allow the same for a while…",
        "Answer instead of running…", "Hand to someone else…",
    ]  # fmt: skip
    assert all("open" not in d.attrs for d in folded)
    for action in ("reject-with-reason", "allow", "answer", "delegate"):
        assert any(d.find_all("form", classes=f"decide {action}") for d in folded), action
    assert not page.doc.find("form", classes="decide reject").find_all("textarea")
    reject = page.doc.find("form", classes="decide reject-with-reason")
    label = reject.find("label")
    assert label.text == "Your reason for rejecting"
    assert reject.find("textarea", id=label.attrs["for"])
    # The agent's reason and the reject form's field are named apart: no heading or label
    # on the page is called "Reason" alone.
    names = [n.text for n in page.doc.find_all("h2") + page.doc.find_all("label")]
    assert "Reason (from the agent, unverified)" in names
    assert "Reason" not in names and len(set(names)) == len(names), names
    delegate = page.doc.find("form", classes="decide delegate")
    options = [o.attrs["value"] for o in delegate.find("select", name="to").find_all("option")]
    assert "carol" in options and "alice" not in options
    assert delegate.find("button").text == "Delegate"
    assert page.doc.find("form", classes="decide approve").find("button").text == "Approve"
    # A short value is shown whole at a glance: no size beside it ("4 chars" on ch_1).
    charge = next(
        d for d in card.find("section", classes="arguments").find_all("div")
        if d.find("dt").find("code").text == "charge"
    )  # fmt: skip
    assert charge.find("dt").text == "charge" and not charge.find_all("span", classes="size")

    unknown = await alice.get("/web/approvals/00000000-0000-0000-0000-000000000000")
    assert unknown.status == 404 and "no request" in unknown.alert


async def test_a_re_asked_calls_page_links_the_original_request(rig: Rig) -> None:
    """An interrupted_side_effect names the request it re-asks: on the web its id is a link
    to that request's page (from the row's origin_id; the stored presentation is text)."""
    record = await rig.create()
    alice = await rig.signed_in("alice")
    await alice.decide(await alice.get(f"/web/approvals/{record['id']}"), "approve")
    await AgentActions(rig.store, rig.directory, rig.clock).claim(
        "acme", record["id"], timedelta(minutes=5)
    )
    rig.clock.advance(minutes=6)
    assert (await Sweeper(rig.store, rig.directory, rig.clock).sweep()).lapsed == 1
    follow_up = (await rig.state(record["id"])).follow_up_id
    page = await alice.get(f"/web/approvals/{follow_up}")
    assert page.status == 200
    facts = {
        div.find("dt").text: div.find("dd")
        for div in page.doc.find("dl", classes="facts").find_all("div")
    }
    [link] = facts["Original approval"].find_all("a")
    assert link.attrs["href"] == f"/web/approvals/{record['id']}"
    assert link.text == record["id"]
    original = await alice.get(link.attrs["href"])
    assert original.status == 200
    assert original.card(record["id"]).attrs["data-state"] == "outcome_unknown"
    # The stored presentation still holds the id as text, as every other surface shows it.
    async with rig.store.read() as tx:
        row = await tx.get_approval(follow_up)
    assert row is not None
    assert row.presentation["fields"][0] == {"label": "Original approval", "value": record["id"]}


async def test_approve_from_the_page(rig: Rig) -> None:
    record = await rig.create()
    alice = await rig.signed_in("alice")
    page = await alice.get(f"/web/approvals/{record['id']}")
    form = page.doc.find("form", classes="decide approve")
    assert form.field("hash") == record["hash"]
    done = await alice.decide(page, "approve")
    assert done.status == 303

    row = await rig.state(record["id"])
    assert (row.state, row.decided_by) == ("approved", "alice")
    events = await rig.events(record["id"])
    assert (events[-1].type, events[-1].actor) == ("approved", "web:alice")
    assert done.url == f"/web/approvals/{record['id']}?done={events[-1].seq}"
    assert events[-1].data["shown_hash"] == record["hash"]
    assert "webhook" in await rig.outbox_kinds(record["id"])

    after = await alice.get(done.url)
    assert after.doc.find(role="status").text == "Approved."  # as Slack and Telegram say it
    card = after.card(record["id"])
    assert card.attrs["data-state"] == "approved"
    assert "Approved by Alice Ng (alice) at" in card.find("ul", classes="outcome").text
    assert after.forms() == []
    assert (await verify(rig.store)).ok


async def test_a_second_tab_is_refused_and_changes_nothing(rig: Rig) -> None:
    record = await rig.create()
    alice = await rig.signed_in("alice")
    bob = await rig.signed_in("bob")
    tab1 = await alice.get(f"/web/approvals/{record['id']}")
    tab2 = await alice.get(f"/web/approvals/{record['id']}")
    bobs = await bob.get(f"/web/approvals/{record['id']}")
    assert (await alice.decide(tab1, "approve")).status == 303
    before = await rig.state(record["id"])

    for browser, page in ((alice, tab2), (bob, bobs)):
        refused = await browser.decide(page, "approve")
        assert refused.status == 409
        assert "already approved by alice ng" in refused.alert.lower(), refused.alert
        assert refused.card(record["id"]).attrs["data-state"] == "approved"
        assert refused.forms() == []
    refused = await bob.decide(bobs, "reject", note="too late")
    assert refused.status == 409 and "Already approved by Alice Ng" in refused.alert

    after = await rig.state(record["id"])
    assert (after.state, after.decided_by, after.version) == (
        "approved",
        "alice",
        before.version,
    )
    assert (await _trail(rig, record["id"]))[-3:] == [
        ("refused", "web:alice"),
        ("refused", "web:bob"),
        ("refused", "web:bob"),
    ]
    assert (await verify(rig.store)).ok


async def test_a_page_older_than_the_request_never_decides(rig: Rig) -> None:
    record = await rig.create()
    alice = await rig.signed_in("alice")
    page = await alice.get(f"/web/approvals/{record['id']}")
    for action, extra in (("approve", {}), ("reject", {}), ("delegate", {"to": "carol"})):
        refused = await alice.decide(page, action, hash_=WRONG_HASH, **extra)
        assert refused.status == 409, action
        assert "changed since it was shown" in refused.alert
        # The page shows the request as it is now, to review again.
        assert refused.doc.find("form", classes="decide approve").field("hash") == record["hash"]
    row = await rig.state(record["id"])
    assert (row.state, row.assignee, row.version) == ("pending", "group:finance", 1)
    trail = await _trail(rig, record["id"])
    assert trail[-3:] == [("refused", "web:alice")] * 3


async def test_someone_not_entitled_sees_no_forms_and_a_hand_made_post_is_refused_and_audited(
    rig: Rig,
) -> None:
    record = await rig.create()
    dave = await rig.signed_in("dave")
    page = await dave.get(f"/web/approvals/{record['id']}")
    assert page.status == 200
    assert page.forms() == []
    assert (
        "You are not an approver for this request; it is assigned to group finance."
        in page.doc.find(classes="why-not").text
    )
    # What a browser would send if the form were there: dave's own valid CSRF token.
    csrf = page.doc.find("form", classes="signout").field("csrf")
    for action in ("approve", "reject", "delegate"):
        refused = await dave.post(
            f"/web/approvals/{record['id']}/{action}",
            {"csrf": csrf, "hash": record["hash"], "to": "dave"},
        )
        assert refused.status == 403, action
        assert "You are not an approver for this request" in refused.alert
    row = await rig.state(record["id"])
    assert (row.state, row.assignee, row.version) == ("pending", "group:finance", 1)
    events = await rig.events(record["id"])
    assert [(e.type, e.actor, e.data["action"]) for e in events[-3:]] == [
        ("refused", "web:dave", "approve"),
        ("refused", "web:dave", "reject"),
        ("refused", "web:dave", "delegate"),
    ]
    assert events[-1].data["code"] == "not_an_approver"
    assert (await verify(rig.store)).ok


async def test_the_requester_may_reject_but_not_approve_their_own_request(rig: Rig) -> None:
    record = await rig.create()  # requested by sam, a member of finance
    sam = await rig.signed_in("sam")
    page = await sam.get(f"/web/approvals/{record['id']}")
    assert page.forms() == ["reject", "reject-with-reason", "answer", "delegate"]
    assert "sam requested this and may not approve it" in page.doc.find(classes="why-not").text


async def test_a_form_without_the_right_csrf_token_is_refused_and_changes_nothing(
    rig: Rig,
) -> None:
    record = await rig.create()
    alice = await rig.signed_in("alice")
    bob = await rig.signed_in("bob")
    page = await alice.get(f"/web/approvals/{record['id']}")
    alices_token = page.doc.find("form", classes="decide approve").field("csrf")
    trail = await _trail(rig, record["id"])
    path = f"/web/approvals/{record['id']}/approve"
    for browser, data in (
        (alice, {"hash": record["hash"]}),
        (alice, {"hash": record["hash"], "csrf": "0" * 64}),
        (bob, {"hash": record["hash"], "csrf": alices_token}),  # another session's token
    ):
        refused = await browser.post(path, data)
        assert refused.status == 403
        assert "security token is missing or wrong" in refused.alert
    assert (await rig.state(record["id"])).state == "pending"
    assert await _trail(rig, record["id"]) == trail


async def test_reject_with_a_reason(rig: Rig) -> None:
    record = await rig.create()
    bob = await rig.signed_in("bob")
    page = await bob.get(f"/web/approvals/{record['id']}")
    done = await bob.decide(page, "reject", note="  over budget this quarter \n")
    assert done.status == 303
    row = await rig.state(record["id"])
    assert (row.state, row.decided_by, row.decision_note) == (
        "rejected",
        "bob",
        "over budget this quarter",
    )
    assert (await _trail(rig, record["id"]))[-1] == ("rejected", "web:bob")
    assert "webhook" in await rig.outbox_kinds(record["id"])
    shown = await bob.get(done.url)
    assert shown.doc.find(role="status").text == "Rejected."
    decision = shown.doc.find(classes="decision").text
    assert "Rejected by Bob Stone (bob)" in decision and "Note: over budget" in decision


async def test_delegate_hands_the_request_to_another_person(rig: Rig) -> None:
    record = await rig.create()
    alice = await rig.signed_in("alice")
    page = await alice.get(f"/web/approvals/{record['id']}")
    refused = await alice.decide(page, "delegate", to="")
    assert refused.status == 422 and "Choose whom" in refused.alert
    done = await alice.decide(page, "delegate", to="carol", note="she owns refunds")
    assert done.status == 303
    row = await rig.state(record["id"])
    assert (row.state, row.assignee, row.assigned_note) == (
        "pending",
        "carol",
        "handed over by Alice Ng",
    )
    events = await rig.events(record["id"])
    assert (events[-1].type, events[-1].actor) == ("delegated", "web:alice")
    assert events[-1].data["to"] == "carol" and events[-1].data["note"] == "she owns refunds"
    shown = await alice.get(done.url)
    assert shown.doc.find(role="status").text == "Handed to Carol Diaz."
    assert (
        "Assigned to Carol Diaz (carol) (handed over by Alice Ng)" in shown.card(record["id"]).text
    )
    carol = await rig.signed_in("carol")
    assert [c.attrs["data-approval-id"] for c in (await carol.get("/web/inbox")).cards] == [
        record["id"]
    ]
    carols = await carol.get(f"/web/approvals/{record['id']}")
    assert (await carol.decide(carols, "approve")).status == 303
    assert (await rig.state(record["id"])).decided_by == "carol"


async def test_the_page_says_what_a_decision_did_only_to_whoever_took_it_there(
    rig: Rig,
) -> None:
    record = await rig.create()
    page = f"/web/approvals/{record['id']}"
    alice = await rig.signed_in("alice")
    done = await alice.decide(await alice.get(page), "approve")
    assert (await alice.get(done.url)).doc.find(role="status").text == "Approved."
    # The address names alice's decision: bob opening it reads the request, and no sentence
    # about a decision he did not take.
    theirs = await rig.signed_in("bob")
    shown = await theirs.get(done.url)
    assert shown.status == 200 and shown.card(record["id"]).attrs["data-state"] == "approved"
    assert shown.doc.find_all(role="status") == []
    requested = (await rig.events(record["id"]))[0]
    assert requested.type == "requested"
    # Nothing in the URL but a decision of the visitor's own makes the page say anything.
    for done_query in (
        str(requested.seq),  # an event that is no decision
        "999",
        "approved",  # the old keys
        "<b>Approved by the CFO</b>",
        "\u00b2",  # a digit to str.isdigit, not to int()
        "9" * 5000,
    ):
        other = await alice.get(f"{page}?{urlencode({'done': done_query})}")
        assert other.status == 200, done_query
        assert other.doc.find_all(role="status") == [], done_query
        assert "CFO" not in other.html


async def test_a_quorum_vote_says_it_is_recorded_and_shows_progress(rig: Rig) -> None:
    record = await rig.create(capability="quorum.move")
    alice = await rig.signed_in("alice")
    done = await alice.decide(await alice.get(f"/web/approvals/{record['id']}"), "approve")
    shown = await alice.get(done.url)
    assert shown.doc.find(role="status").text == (
        "Your approval is recorded: 1 of 2; the request waits for the rest."
    )
    assert "Approvals 1 of 2 (Alice Ng)" in shown.card(record["id"]).text
    assert shown.forms() == ["delegate"]  # one vote per person
    assert "Your vote is recorded" in shown.doc.find(classes="why-not").text
    again = await alice.post(
        f"/web/approvals/{record['id']}/approve",
        {"csrf": shown.doc.find("form", classes="signout").field("csrf"), "hash": record["hash"]},
    )
    assert again.status == 409 and "already voted" in again.alert
    bob = await rig.signed_in("bob")
    bobs = await bob.decide(await bob.get(f"/web/approvals/{record['id']}"), "approve")
    assert (await bob.get(bobs.url)).doc.find(role="status").text == "Approved."
    assert (await rig.state(record["id"])).state == "approved"


async def test_after_the_deadline_the_page_offers_nothing_and_a_post_is_refused(
    rig: Rig,
) -> None:
    record = await rig.create(approval_ttl="1h")
    alice = await rig.signed_in("alice")
    page = await alice.get(f"/web/approvals/{record['id']}")
    rig.clock.advance(hours=1, seconds=1)
    late = await alice.get(f"/web/approvals/{record['id']}")
    assert late.forms() == [] and "time ran out" in late.doc.find(classes="why-not").text
    refused = await alice.decide(page, "approve")
    assert refused.status == 410
    assert "This request expired at 2026-01-05 10:00 UTC." in refused.alert, refused.alert
    row = await rig.state(record["id"])
    assert (row.state, row.decided_by) == ("expired", None)
    assert (await _trail(rig, record["id"]))[-1] == ("refused", "web:alice")


async def test_the_web_notify_target_is_served_without_a_warning(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="signoff.cards")
    record = await rig.create()  # payments.*: notify = ["web"]
    await rig.drain()
    async with rig.store.read() as tx:
        [message] = await tx.card_messages_for(record["id"])
        jobs = await tx.outbox_jobs(approval_id=record["id"])
    assert (message.channel, message.address, message.message_id) == (
        "web",
        "inbox",
        record["id"],
    )
    alice = await rig.signed_in("alice")
    await alice.decide(await alice.get(f"/web/approvals/{record['id']}"), "approve")
    await rig.drain()  # the card update for the web "message" is a harmless no-op
    async with rig.store.read() as tx:
        jobs = await tx.outbox_jobs(approval_id=record["id"])
        [message] = await tx.card_messages_for(record["id"])
    cards = [job for job in jobs if job.kind in ("post_card", "update_card")]
    assert {job.state for job in cards} == {"done"} and len(cards) == 2
    assert message.rendered_state == "approved"
    assert "no web channel" not in caplog.text
