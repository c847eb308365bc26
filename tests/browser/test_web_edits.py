"""Approve as edited, and answering a question, in real Chromium against `signoff serve`.

An approver opens a request's page, edits an argument in the editor (a number stays a
number), reviews every change and the edited hash, and approves the revision; the agent's
record then holds the edited call. A question's options are buttons: one press answers it.
Approve and allow the same covers the next smaller refund, and no larger one; the grants
page lists it and Revoke ends it. Screenshots in
tests/browser/artifacts/ (web-edit-*.png, web-question-*.png, web-grant-*.png, web-grants-*.png).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from playwright.sync_api import BrowserContext, expect

from tests.support.samples import request_body
from tests.support.web_service import WebService, shoot, web_config

Contexts = Callable[..., BrowserContext]


def _record(service: WebService, approval_id: str) -> dict[str, Any]:
    got = service.api().get(f"/v1/approvals/{approval_id}")
    assert got.status == 200, got
    body: dict[str, Any] = got.body
    return body


def test_an_approver_edits_an_argument_reviews_the_change_and_approves_it(
    start_web: Callable[..., WebService], contexts: Contexts
) -> None:
    routes = web_config("sqlite+aiosqlite:///unused.db", "http://127.0.0.1:9")["routes"]
    routes[0]["edits"] = ["amount"]
    service = start_web(routes=routes)
    created = service.api().post("/v1/approvals", request_body(run_id="run-web-edit"))
    assert created.status == 201, created
    approval_id, shown = created.body["id"], created.body["hash"]
    page = service.sign_in(contexts(), "alice")

    page.goto(f"{service.url}/web/approvals/{approval_id}")
    page.get_by_role("link", name="Edit, then approve…").click()
    amount = page.get_by_role("textbox", name="amount")
    expect(amount).to_have_value("12000")
    # The charge is the route's to keep: shown, with no field to change it.
    expect(page.get_by_role("textbox", name="charge")).to_have_count(0)
    amount.fill("9000")
    shoot(page, "web-edit-editor")
    page.get_by_role("button", name="Review the edit").click()

    changes = page.locator("section.changes")
    expect(changes).to_contain_text("amount changed")
    expect(changes.locator("pre.before")).to_have_text("12000")
    expect(changes.locator("pre.after")).to_have_text("9000")
    edited_hash = page.locator("code.full-hash").inner_text()
    assert edited_hash != shown
    shoot(page, "web-edit-review")
    with page.expect_navigation():
        page.get_by_role("button", name="Approve as edited").click()
    expect(page.get_by_role("status")).to_have_text("Approved as edited.")
    expect(page.locator("section.changes")).to_contain_text("12000 → 9000")
    shoot(page, "web-edit-approved")

    record = _record(service, approval_id)
    assert record["state"] == "approved" and record["decided_by"] == "alice"
    assert record["tool"]["arguments"] == {"charge": "ch_1", "amount": 9000}
    assert record["hash"] == edited_hash and record["original_hash"] == shown


def test_a_question_is_answered_with_one_press_of_its_option(
    start_web: Callable[..., WebService], contexts: Contexts
) -> None:
    service = start_web()
    body = request_body(
        run_id="run-web-question",
        kind="question",
        capability="payments.question",
        question={"options": ["Refund in full", "Store credit"]},
        presentation={"title": "How should we settle order 8812?"},
    )
    del body["tool"]
    created = service.api().post("/v1/approvals", body)
    assert created.status == 201, created
    approval_id = created.body["id"]
    page = service.sign_in(contexts(), "bob")

    page.goto(f"{service.url}/web/approvals/{approval_id}")
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    shoot(page, "web-question-pending")
    with page.expect_navigation():
        page.get_by_role("button", name="Store credit").click()
    expect(page.get_by_role("status")).to_have_text("Answered.")
    expect(page.locator("article.card")).to_contain_text("Answer: Store credit")
    shoot(page, "web-question-answered")
    record = _record(service, approval_id)
    assert record["state"] == "answered" and record["answer"] == {"option": "Store credit"}


def test_approve_and_allow_the_same_covers_the_next_smaller_refund(
    start_web: Callable[..., WebService], contexts: Contexts
) -> None:
    service = start_web()
    api = service.api()
    created = api.post("/v1/approvals", request_body(run_id="run-web-grant"))
    assert created.status == 201, created
    page = service.sign_in(contexts(), "alice")
    page.goto(f"{service.url}/web/approvals/{created.body['id']}")
    form = page.locator("form.decide.allow")
    expect(form).to_be_hidden()  # folded until asked for
    page.get_by_text("Allow the same for a while…").click()
    form.get_by_label("How long").select_option("1h")
    form.get_by_label("amount").select_option("at_most")
    shoot(page, "web-grant-form")
    with page.expect_navigation():
        form.get_by_role("button", name="Allow the same").click()
    expect(page.get_by_role("status")).to_have_text("Approved.")

    smaller = {"name": "stripe.refunds.create", "arguments": {"charge": "ch_1", "amount": 500}}
    covered = api.post("/v1/approvals", request_body(run_id="run-web-grant-2", tool=smaller))
    assert covered.status == 201, covered
    assert covered.body["state"] == "approved" and covered.body["approved_by_grant"]
    larger = {"name": "stripe.refunds.create", "arguments": {"charge": "ch_1", "amount": 99999}}
    outside = api.post("/v1/approvals", request_body(run_id="run-web-grant-3", tool=larger))
    assert outside.body["state"] == "pending"
    page.goto(f"{service.url}/web/approvals/{covered.body['id']}")
    expect(page.locator("article.card")).to_contain_text(
        "Approved by a standing grant of Alice Ng (alice)"
    )
    shoot(page, "web-grant-used")

    # The grants page lists it with its bounds; another approver sees none of it; Revoke
    # ends it at once: the next covered refund waits for a person.
    bob = service.sign_in(contexts(), "bob")
    bob.goto(f"{service.url}/web/grants")
    expect(bob.locator("li.grant")).to_have_count(0)
    expect(bob.locator("p.empty")).to_have_text("No live standing grants given by you.")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Grants").click()
    grant = page.locator("li.grant")
    expect(grant).to_have_count(1)
    expect(grant).to_contain_text("and amount <= 12000, given by alice")
    expect(grant).to_contain_text("used 1")
    shoot(page, "web-grants-list")
    with page.expect_navigation():
        grant.get_by_role("button", name="Revoke").click()
    expect(page.get_by_role("status")).to_contain_text("is revoked")
    expect(page.locator("li.grant")).to_have_count(0)
    shoot(page, "web-grants-revoked")
    after = api.post("/v1/approvals", request_body(run_id="run-web-grant-4", tool=smaller))
    assert after.body["state"] == "pending" and after.body["approved_by_grant"] is None
    # A Revoke posted without the page's CSRF token changes nothing.
    again = api.post("/v1/approvals", request_body(run_id="run-web-grant-5"))
    page.goto(f"{service.url}/web/approvals/{again.body['id']}")
    form = page.locator("form.decide.allow")
    page.get_by_text("Allow the same for a while…").click()
    form.get_by_label("How long").select_option("1h")
    with page.expect_navigation():
        form.get_by_role("button", name="Allow the same").click()
    page.goto(f"{service.url}/web/grants")
    grant_id = page.locator("li.grant").get_attribute("data-grant-id")
    forged = page.request.post(
        f"{service.url}/web/grants/{grant_id}/revoke",
        form={"csrf": "not-the-token"},
        headers={"Origin": service.url},
    )
    assert forged.status == 403
    page.reload()
    expect(page.locator("li.grant")).to_have_count(1)
