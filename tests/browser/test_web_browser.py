"""The web surface in real Chromium, against `signoff serve` run as a subprocess.

Each test starts a server with `[web]` on (tests/support/web_service.py, started by the
`start_web` fixture in tests/browser/conftest.py), files requests as the agent does, over
the HTTP API, and uses the pages as a person does: signed in by a link that
`signoff web login` printed, clicking links and buttons. What the pages did is then checked
where it counts, outside the browser: the API's record, the audit trail, the decision
webhook, the Slack and Telegram cards. It proves that:

- a sign-in link opens a session (an HttpOnly cookie) once, with JavaScript off too; fetching
  it (a link preview) uses nothing up; used again it is refused in words and opens nothing;
  signing out ends the session;
- Approve in the inbox's card approves as that person via `web`: the record says so, the
  audit trail names `web:alice`, the signed webhook reaches the agent, the request's Slack
  and Telegram cards are updated to the decision, and the page shows the decided card, also
  after a reload;
- of two tabs showing one request, the second Approve is refused ("Already approved by Alice
  Ng") and changes nothing; a page older than the request (superseded by the agent's newer
  request for the same step, or whose shown hash is not the request's) never decides;
  the decision works from the keyboard alone;
- someone not entitled sees no forms on another group's request, and a hand-made POST with a
  valid CSRF token is refused and recorded in the audit trail; a POST without a valid token is
  refused and changes nothing;
- the dashboard lists an overdue request first, shows a dead outbox job and retries it (the
  webhook is then delivered); it is refused in words to non-operators;
- at a phone's size the inbox and a card fit the screen and Approve works by touch
  (screenshots in tests/browser/artifacts/).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from playwright.sync_api import BrowserContext, Page, expect

from signoff_client import verify_webhook
from tests.support.samples import request_body
from tests.support.service import WEBHOOK_SECRET, Delivery, create, wait_until
from tests.support.web_service import (
    PHONE,
    SLACK_CHANNEL,
    TELEGRAM_GROUP,
    WebService,
    shoot,
)

Contexts = Callable[..., BrowserContext]
CARD_TIMEOUT = 10.0
DESKTOP = {"width": 1280, "height": 800}


# -- helpers -------------------------------------------------------------------------------------


def card_on(page: Page, approval_id: str) -> Any:
    return page.locator(f'article.card[data-approval-id="{approval_id}"]')


def open_approval(page: Page, service: WebService, approval_id: str) -> None:
    page.goto(f"{service.url}/web/approvals/{approval_id}")
    expect(card_on(page, approval_id)).to_be_visible()


def click_and_status(page: Page, button: Any) -> int:
    """Click a form's submit button; the HTTP status of the page the POST ended on."""
    with page.expect_response(lambda r: r.request.method == "POST") as posted:
        button.click()
    page.wait_for_load_state()
    status: int = posted.value.status
    if status == 303:  # post/redirect/get: the status is that of the page redirected to
        return 200
    return status


def csrf_of(page: Page) -> str:
    """The page's CSRF token (every signed-in page has one, in the sign-out form)."""
    value = page.locator('form.signout input[name="csrf"]').get_attribute("value")
    assert value, page.content()
    return value


def record(service: WebService, approval_id: str) -> dict[str, Any]:
    got = service.api().get(f"/v1/approvals/{approval_id}")
    assert got.status == 200, got
    body: dict[str, Any] = got.body
    return body


def webhooks_about(seen: list[Delivery], approval_id: str, state: str) -> list[Delivery]:
    return [
        d
        for d in seen
        if d.json()["approval"]["id"] == approval_id and d.json()["approval"]["state"] == state
    ]


# -- signing in ----------------------------------------------------------------------------------


def test_a_sign_in_link_opens_one_session_once(
    start_web: Callable[..., WebService], contexts: Contexts
) -> None:
    service = start_web()
    link = service.login_link("alice")

    # A link preview or a mail scanner fetches the link (GET): that uses nothing up.
    preview = contexts().request.get(link)
    assert preview.status == 200 and "Continue" in preview.text()

    # With JavaScript off, the person presses Continue.
    page = contexts(java_script_enabled=False).new_page()
    page.goto(link)
    page.get_by_role("button", name="Continue").click()
    assert page.url == f"{service.url}/web/inbox"
    expect(page.locator("header .who")).to_have_text("Alice Ng")
    expect(page.locator("#inbox")).to_contain_text("Nothing is waiting for your decision")
    [cookie] = page.context.cookies()
    assert (cookie["httpOnly"], cookie["sameSite"]) == (True, "Lax"), cookie

    # The same link, again, in another browser: refused in words at once, 410 Gone (no
    # Continue to press), and no session.
    other = contexts().new_page()
    refused = other.goto(link)
    assert refused is not None and refused.status == 410
    expect(other.get_by_role("alert")).to_contain_text("already used")
    expect(other.get_by_role("button", name="Continue")).to_have_count(0)
    assert other.context.cookies() == []
    inbox = other.goto(f"{service.url}/web/inbox")
    assert inbox is not None and inbox.status == 401
    expect(other.locator("#inbox")).to_have_count(0)

    # Signing out ends the first session: its inbox now asks to sign in.
    page.get_by_role("button", name="Sign out").click()
    after = page.goto(f"{service.url}/web/inbox")
    assert after is not None and after.status == 401


# -- deciding ------------------------------------------------------------------------------------


def test_approve_in_the_inbox_tells_the_agent_and_updates_the_chat_cards(
    start_web: Callable[..., WebService], contexts: Contexts
) -> None:
    service = start_web(slack=True, telegram=True)
    assert service.slack is not None and service.telegram is not None
    approval = create(service.api(), "run-web-approve")
    approval_id = approval["id"]
    slack_card = service.slack.wait_for_sync(
        lambda c: (
            c.method == "chat.postMessage" and c.ok and approval_id in json.dumps(c.args["blocks"])
        ),
        timeout=CARD_TIMEOUT,
    )
    telegram_card = service.telegram.wait_for_sync(
        lambda c: c.method == "sendMessage" and c.ok, timeout=CARD_TIMEOUT
    )

    page = service.sign_in(contexts(), "alice")
    listed = page.locator(f'#inbox article.card[data-approval-id="{approval_id}"]')
    expect(listed).to_have_attribute("data-state", "pending")
    listed.get_by_role("link", name="Refund €120.00 to Zoë").click()
    assert page.url == f"{service.url}/web/approvals/{approval_id}"
    # The page decides against the full hash it shows.
    approve = page.locator("form.decide.approve")
    expect(approve.locator('input[name="hash"]')).to_have_value(approval["hash"])
    expect(card_on(page, approval_id)).to_contain_text(approval["hash"])
    expect(card_on(page, approval_id)).to_contain_text("from the agent, unverified")

    assert click_and_status(page, approve.get_by_role("button", name="Approve")) == 200
    expect(page.get_by_role("status")).to_have_text("Approved.")
    expect(card_on(page, approval_id)).to_have_attribute("data-state", "approved")
    expect(page.locator("form.decide")).to_have_count(0)

    decided = record(service, approval_id)
    assert (decided["state"], decided["decided_by"]) == ("approved", "alice"), decided
    assert ("approved", "web:alice") in service.events(approval_id)

    seen = service.hooks.wait_for(
        lambda seen: webhooks_about(seen, approval_id, "approved"), timeout=15
    )
    [delivery] = webhooks_about(seen, approval_id, "approved")
    assert verify_webhook(delivery.headers, delivery.body, WEBHOOK_SECRET) == delivery.delivery_id
    assert delivery.json()["approval"]["decided_by"] == "alice"

    assert slack_card.response is not None
    slack_update = service.slack.wait_for_sync(
        lambda c: (
            c.method == "chat.update"
            and c.ok
            and c.args.get("channel") == SLACK_CHANNEL
            and c.args.get("ts") == slack_card.response["ts"]  # type: ignore[index]
        ),
        timeout=CARD_TIMEOUT,
    )
    blocks = json.dumps(slack_update.args["blocks"], ensure_ascii=False)
    assert "*Approved* by Alice Ng (alice)" in blocks, blocks
    assert telegram_card.response is not None
    message_id = telegram_card.response["result"]["message_id"]
    service.telegram.wait_for_sync(
        lambda c: c.method == "editMessageText" and c.ok and c.args["message_id"] == message_id,
        timeout=CARD_TIMEOUT,
    )
    shown = service.telegram.message(TELEGRAM_GROUP, message_id)
    assert shown is not None and "Approved by Alice Ng" in shown["text"], shown

    page.reload()
    expect(card_on(page, approval_id)).to_have_attribute("data-state", "approved")
    expect(card_on(page, approval_id)).to_contain_text("Approved by Alice Ng")
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)


def test_a_second_tab_and_a_stale_page_decide_nothing(
    start_web: Callable[..., WebService], contexts: Contexts
) -> None:
    service = start_web()
    api = service.api()
    approval = create(api, "run-web-tabs")
    approval_id = approval["id"]
    alice, bob = service.people(contexts, "alice", "bob")
    alice_again = alice.context.new_page()  # a second tab of Alice's
    for page in (alice, alice_again, bob):
        open_approval(page, service, approval_id)

    # Alice decides from the keyboard alone: Tab until Approve has focus, then Enter.
    for _ in range(30):
        alice.keyboard.press("Tab")
        focused = alice.evaluate("document.activeElement.textContent.trim()")
        if focused == "Approve":
            break
    else:
        raise AssertionError("Approve cannot be reached with the Tab key")
    with alice.expect_navigation():
        alice.keyboard.press("Enter")
    expect(alice.get_by_role("status")).to_contain_text("Approved")
    approved = record(service, approval_id)
    service.hooks.wait_for(lambda seen: webhooks_about(seen, approval_id, "approved"), 15)

    # Alice's other tab and Bob's still show Approve; pressing it is refused, in words, and
    # changes nothing.
    for page in (alice_again, bob):
        status = click_and_status(page, page.get_by_role("button", name="Approve"))
        assert status == 409
        expect(page.get_by_role("alert")).to_contain_text("Already approved by Alice Ng")
        expect(card_on(page, approval_id)).to_have_attribute("data-state", "approved")
        expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    assert record(service, approval_id) == approved
    assert ("refused", "web:alice") in service.events(approval_id)
    assert ("refused", "web:bob") in service.events(approval_id)
    assert len(webhooks_about(service.hooks.snapshot(), approval_id, "approved")) == 1

    # The agent asks again for the same step with other arguments: the older request is
    # superseded, and a page still showing it decides nothing.
    step = {"node": "refund", "attempt": 1}
    older = api.post("/v1/approvals", request_body(run_id="run-web-step", step=step)).body
    open_approval(alice, service, older["id"])
    newer = api.post(
        "/v1/approvals",
        request_body(
            run_id="run-web-step",
            step=step,
            tool={"name": "stripe.refunds.create", "arguments": {"charge": "ch_1", "amount": 9000}},
        ),
    ).body
    assert record(service, older["id"])["superseded_by"] == newer["id"]
    status = click_and_status(alice, alice.get_by_role("button", name="Approve"))
    assert status == 409
    expect(alice.get_by_role("alert")).to_contain_text("no longer open: it is superseded")
    assert record(service, older["id"])["state"] == "superseded"
    assert record(service, newer["id"])["state"] == "pending"

    # A page whose shown hash is not the request's (here edited in the page) never decides.
    open_approval(alice, service, newer["id"])
    alice.locator('form.decide.approve input[name="hash"]').evaluate(
        "input => { input.value = 'ab'.repeat(32); }"
    )
    status = click_and_status(alice, alice.get_by_role("button", name="Approve"))
    assert status == 409
    expect(alice.get_by_role("alert")).to_contain_text("changed since it was shown")
    assert record(service, newer["id"])["state"] == "pending"
    # The page now shows the request as it is, with its current hash: that one decides.
    assert click_and_status(alice, alice.get_by_role("button", name="Approve")) == 200
    assert record(service, newer["id"])["state"] == "approved"


def test_someone_not_entitled_sees_no_forms_and_cannot_post_a_decision(
    start_web: Callable[..., WebService], contexts: Contexts
) -> None:
    service = start_web()
    approval = create(service.api(), "run-web-entitled")  # acme payments: group finance
    approval_id = approval["id"]

    dave, alice = service.people(contexts, "dave", "alice")
    # Dave approves globex's requests only: the acme request is not in his inbox, and its
    # page offers him no forms, saying why.
    expect(dave.locator(f'#inbox [data-approval-id="{approval_id}"]')).to_have_count(0)
    open_approval(dave, service, approval_id)
    expect(dave.locator("form.decide")).to_have_count(0)
    expect(dave.get_by_role("button", name="Approve")).to_have_count(0)
    expect(card_on(dave, approval_id)).to_contain_text("You are not an approver")

    # A hand-made POST with his own valid CSRF token and the right hash: refused, recorded.
    forged = dave.request.post(
        f"{service.url}/web/approvals/{approval_id}/approve",
        form={"csrf": csrf_of(dave), "hash": approval["hash"]},
        max_redirects=0,
    )
    assert forged.status == 403, forged.text()
    assert "You are not an approver for this request" in forged.text()
    assert ("refused", "web:dave") in service.events(approval_id)
    assert record(service, approval_id)["state"] == "pending"

    # Alice may decide it, but a POST without a valid CSRF token (as another site's form
    # would send) is refused whatever it carries, and changes nothing.
    for form in ({"hash": approval["hash"]}, {"hash": approval["hash"], "csrf": "0" * 64}):
        refused = alice.request.post(
            f"{service.url}/web/approvals/{approval_id}/approve", form=form, max_redirects=0
        )
        assert refused.status == 403, refused.text()
        assert "security token is missing or wrong" in refused.text()
    assert record(service, approval_id)["state"] == "pending"
    assert not any(actor == "web:alice" for _, actor in service.events(approval_id))


# -- the dashboard -------------------------------------------------------------------------------


def test_the_dashboard_lists_overdue_first_and_retries_a_dead_job(
    start_web: Callable[..., WebService], contexts: Contexts
) -> None:
    # One delivery attempt per job, and a sweeper that does not come round during the test:
    # a request past its deadline stays pending (overdue) until someone acts on it.
    service = start_web(outbox={"max_attempts": 1}, sweeper={"interval": 3600.0})
    api = service.api()
    later = create(api, "run-web-later")
    overdue = api.post("/v1/approvals", request_body(run_id="run-web-late", approval_ttl="1s"))
    assert overdue.status == 201, overdue
    decided = create(api, "run-web-decided")

    # The agent's webhook endpoint is down: the approval's webhook job dies at once.
    service.hooks.status = 503
    result = service.cli(
        "approvals", "approve", decided["id"], "--hash", decided["hash"], "--as", "alice"
    )
    assert result.returncode == 0, str(result)
    [(job_id,)] = wait_until(
        lambda: service.query("SELECT id FROM outbox WHERE state = 'dead'"), 15, "a dead job"
    )
    deadline = datetime.fromisoformat(overdue.body["expires_at"])
    wait_until(lambda: datetime.now(UTC) > deadline, 10, "the short request's deadline")

    page, bob = service.people(contexts, "carol", "bob")  # carol is an operator, bob not
    page.goto(f"{service.url}/dashboard")
    rows = page.locator("#pending tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_have_attribute("data-approval-id", overdue.body["id"])
    expect(rows.nth(0)).to_have_class("overdue")
    expect(rows.nth(0)).to_contain_text("overdue by")
    expect(rows.nth(1)).to_have_attribute("data-approval-id", later["id"])
    expect(rows.nth(1)).not_to_have_class("overdue")
    recent = page.locator(f'#recent tr[data-approval-id="{decided["id"]}"]')
    expect(recent).to_contain_text("Alice Ng")
    expect(page.locator("svg.chart")).to_have_count(2)
    dead = page.locator(f'#dead-jobs tr[data-job-id="{job_id}"]')
    expect(dead).to_contain_text("webhook")
    shoot(page, "dashboard")

    # The endpoint is back: Retry requeues the job, and the webhook is delivered.
    service.hooks.status = 200
    assert click_and_status(page, dead.get_by_role("button", name="Retry")) == 200
    expect(page.get_by_role("status")).to_contain_text(f"Outbox job {job_id}")
    seen = service.hooks.wait_for(
        lambda seen: [d for d in webhooks_about(seen, decided["id"], "approved")][1:], 15
    )
    first, second = webhooks_about(seen, decided["id"], "approved")
    assert first.delivery_id == second.delivery_id  # the same delivery, retried
    wait_until(
        lambda: service.query("SELECT state FROM outbox WHERE id = ?", job_id) in ([("done",)], []),
        10,
        "the retried job done",
    )
    page.reload()
    expect(page.locator(f'#dead-jobs tr[data-job-id="{job_id}"]')).to_have_count(0)

    # The timeline of one approval, its chain verified as it is shown.
    page.goto(f"{service.url}/dashboard/approvals/{decided['id']}")
    expect(page.locator("main")).to_contain_text("Chain intact")

    # Not for everyone: an approver who is not an operator is told why.
    refused = bob.goto(f"{service.url}/dashboard")
    assert refused is not None and refused.status == 403
    expect(bob.get_by_role("alert")).to_contain_text("The dashboard is for operators")


# -- a phone -------------------------------------------------------------------------------------


def _fits(page: Page, element: Any) -> None:
    """`element` is visible and lies within the phone's width, and the page does not scroll
    sideways."""
    expect(element).to_be_visible()
    box = element.bounding_box()
    assert box is not None
    assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], box
    assert box["width"] >= 44 and box["height"] >= 32, box  # a thumb can hit it
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the page scrolls sideways by {overflow} px"


def _above_the_fold(page: Page, *elements: Any) -> None:
    """Each of `elements` lies wholly within the first screen, before any scrolling."""
    page.evaluate("window.scrollTo(0, 0)")
    height = page.viewport_size["height"]  # type: ignore[index]
    for element in elements:
        box = element.bounding_box()
        assert box is not None and box["y"] + box["height"] <= height, (box, height)


def test_on_a_phone_the_inbox_and_a_card_are_usable(
    start_web: Callable[..., WebService], contexts: Contexts
) -> None:
    service = start_web()
    approval = create(service.api(), "run-web-phone")
    approval_id = approval["id"]
    phone = contexts(viewport=PHONE, device_scale_factor=2, is_mobile=True, has_touch=True)
    page = service.sign_in(phone, "bob")

    listed = page.locator(f'#inbox article.card[data-approval-id="{approval_id}"]')
    _fits(page, listed)
    _fits(page, listed.get_by_role("link"))
    shoot(page, "phone-inbox")

    listed.get_by_role("link").tap()
    expect(card_on(page, approval_id)).to_be_visible()
    approve = page.get_by_role("button", name="Approve")
    _fits(page, approve)
    reject = page.get_by_role("button", name="Reject", exact=True)
    _fits(page, reject)
    # Approve and Reject come first, on the first screen, on one row; every other way to
    # decide is folded (closed) below them, and no short argument is labelled with its size.
    _above_the_fold(page, approve, reject)
    assert approve.bounding_box()["y"] == reject.bounding_box()["y"]  # type: ignore[index]
    folded = page.locator("section.decision details")
    assert folded.count() >= 3
    assert all(d.get_attribute("open") is None for d in folded.all())
    expect(page.get_by_role("textbox", name="Your reason for rejecting")).to_be_hidden()
    expect(page.locator("form.decide.allow")).to_be_hidden()
    expect(page.locator(".arguments .size")).to_have_count(0)
    shoot(page, "phone-card")
    page.get_by_text("Give a reason and reject…").tap()
    _fits(page, page.get_by_role("textbox", name="Your reason for rejecting", exact=True))
    _fits(page, page.get_by_role("button", name="Reject with this reason"))
    shoot(page, "phone-card-reject-reason")

    approve.scroll_into_view_if_needed()
    with page.expect_navigation():
        approve.tap()
    expect(page.get_by_role("status")).to_have_text("Approved.")
    assert record(service, approval_id)["decided_by"] == "bob"
    shoot(page, "phone-card-approved")
    _ends_with_its_outcome(page, approval_id)


def test_on_a_desktop_approve_and_reject_come_first_and_the_rest_is_folded(
    start_web: Callable[..., WebService], contexts: Contexts
) -> None:
    """At 1280x800 the card and its two buttons fit the first screen; the grant form, the
    answer, the hand-over and the reason for rejecting open one at a time, each from its own
    disclosure, and work once opened."""
    service = start_web()
    approval_id = create(service.api(), "run-web-desktop")["id"]
    page = service.sign_in(contexts(viewport=DESKTOP), "alice")
    page.goto(f"{service.url}/web/approvals/{approval_id}")
    approve = page.get_by_role("button", name="Approve", exact=True)
    reject = page.get_by_role("button", name="Reject", exact=True)
    _above_the_fold(page, approve, reject)
    summaries = page.locator("section.decision details > summary")
    expect(summaries).to_have_text(
        ["Give a reason and reject…", "Allow the same for a while…",
         "Answer instead of running…", "Hand to someone else…"]
    )  # fmt: skip
    for details in page.locator("section.decision details").all():
        assert details.get_attribute("open") is None
        expect(details.locator("form")).to_be_hidden()
    expect(page.locator(".arguments .size")).to_have_count(0)  # no "5 chars" on "ch_1"
    shoot(page, "desktop-card", full_page=False)

    page.get_by_text("Hand to someone else…").click()
    expect(page.get_by_label("Hand this request to")).to_be_visible()
    shoot(page, "desktop-card-delegate-open", full_page=False)
    page.get_by_text("Give a reason and reject…").click()
    page.get_by_label("Your reason for rejecting").fill("not this quarter")
    with page.expect_navigation():
        page.get_by_role("button", name="Reject with this reason").click()
    expect(page.get_by_role("status")).to_contain_text("Rejected")
    assert record(service, approval_id)["decision_note"] == "not this quarter"


def _ends_with_its_outcome(page: Page, approval_id: str) -> None:
    """A decided card ends where its outcome does: between the last line of the decision
    area and the card's bottom edge there is only the card's padding (a reserved min-height
    once left ~100 px of blank space there)."""
    gap = page.evaluate(
        """(id) => {
            const card = document.querySelector(`article.card[data-approval-id="${id}"]`);
            const area = card.querySelector("section.decision");
            const last = area.lastElementChild.getBoundingClientRect();
            return card.getBoundingClientRect().bottom - last.bottom;
        }""",
        approval_id,
    )
    assert gap <= 24, f"{gap:.0f} px of empty space under the decided card's outcome"


def test_a_decided_card_ends_with_its_outcome(
    start_web: Callable[..., WebService], contexts: Contexts
) -> None:
    service = start_web()
    approval = create(service.api(), "run-web-decided-card")
    page = service.sign_in(contexts(viewport={"width": 1200, "height": 900}), "alice")
    open_approval(page, service, approval["id"])
    assert click_and_status(page, page.get_by_role("button", name="Approve")) == 200
    expect(page.get_by_role("status")).to_have_text("Approved.")
    shoot(page, "decided-card")
    _ends_with_its_outcome(page, approval["id"])


def test_on_a_phone_the_dashboard_tables_scroll_and_say_so(
    start_web: Callable[..., WebService], contexts: Contexts
) -> None:
    """At 390 x 844 the dashboard's tables are wider than the screen: each scrolls inside its
    own box, not the page, and shows it (a phone's overlay scrollbar is hidden until touched):
    a line above it says so and the edge with more is shaded; scrolled, its last column
    shows."""
    service = start_web()
    api = service.api()
    create(api, "run-web-phone-dash")
    decided = create(api, "run-web-phone-dash-decided")
    result = service.cli(
        "approvals", "approve", decided["id"], "--hash", decided["hash"], "--as", "alice"
    )
    assert result.returncode == 0, str(result)
    phone = contexts(viewport=PHONE, device_scale_factor=2, is_mobile=True, has_touch=True)
    page = service.sign_in(phone, "carol")  # carol is an operator
    page.goto(f"{service.url}/dashboard")
    for table in ("#pending", "#recent"):
        box = page.locator(".dash-scroll").filter(has=page.locator(table))
        expect(box).to_be_visible()
        hint = page.locator(f".dash-scroll-hint:has(+ .dash-scroll {table})")
        expect(hint).to_be_visible()
        expect(hint).to_contain_text("Scroll the table sideways")
        sizes = box.evaluate(
            """(el) => ({scroll: el.scrollWidth, client: el.clientWidth,
                         top: el.getBoundingClientRect().top,
                         right: el.getBoundingClientRect().right,
                         shadows: getComputedStyle(el).backgroundImage.split("radial").length - 1,
                         attach: getComputedStyle(el).backgroundAttachment})"""
        )
        assert sizes["scroll"] > sizes["client"], (table, sizes)  # it does scroll
        assert sizes["right"] <= PHONE["width"], (table, sizes)  # inside the screen
        said = hint.bounding_box()
        assert said is not None and 0 <= sizes["top"] - (said["y"] + said["height"]) <= 16, said
        # The edge that has more is shaded: shadows fixed to the box, covered by the
        # content's own background at the end it has reached.
        assert sizes["shadows"] == 2, (table, sizes)
        assert sizes["attach"].startswith("local, local, scroll, scroll"), (table, sizes)
        last = page.locator(f"{table} thead th").last
        assert last.bounding_box()["x"] >= PHONE["width"], table  # type: ignore[index]
        box.evaluate("(el) => { el.scrollLeft = el.scrollWidth; }")
        shown = last.bounding_box()
        assert shown is not None and shown["x"] + shown["width"] <= PHONE["width"] + 1, shown
        box.evaluate("(el) => { el.scrollLeft = 0; }")
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the page scrolls sideways by {overflow} px"
    shoot(page, "phone-dashboard", full_page=False)
    shoot(page, "phone-dashboard-full")
