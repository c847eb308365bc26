"""The email surface's links clicked in Chromium against a real `signoff serve`, which mails
through a real SMTP server on loopback (tests/support/smtp_sink.py): a link opens a page that
asks to confirm, only the button's POST decides, a second use is refused in words, and a
browser signed in to the web as someone else cannot use another person's link."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import BrowserContext, expect

from tests.support.cli import sqlite_url
from tests.support.samples import request_body
from tests.support.service import Fleet, WebhookReceiver, write_config
from tests.support.smtp_sink import Received, SmtpSink, smtp_sink_in_thread, wait_for_mail
from tests.support.web_service import WEB_SECRET, WebService, shoot, web_config

Contexts = Callable[..., BrowserContext]
_LINK = re.compile(r"https?://\S+/email/links/[A-Za-z0-9_-]+")


@pytest.fixture
def mailing(tmp_path: Path, sqlite_template: Path) -> Iterator[tuple[WebService, SmtpSink]]:
    """`signoff serve` with [web] and [email] on; finance's cards go to each member's mail."""
    with ExitStack() as stack:
        sink = stack.enter_context(smtp_sink_in_thread())
        db_path = tmp_path / "signoff.db"
        db_path.write_bytes(sqlite_template.read_bytes())
        hooks = stack.enter_context(WebhookReceiver())
        env = {"SIGNOFF_WEB_SECRET": WEB_SECRET}
        config = web_config(sqlite_url(db_path), hooks.url)
        config["email"] = {
            "host": sink.host,
            "port": sink.port,
            "security": "none",
            "from_address": "signoff@signoff.test",
        }
        for name in ("alice", "bob", "sam"):
            config["principals"][name]["email"] = f"{name}@example.com"
        config["routes"][0]["notify"] = ["web", "email:dm"]
        config_path = write_config(tmp_path / "signoff.toml", config)
        fleet = stack.enter_context(Fleet(config_path, tmp_path, env))
        yield WebService(fleet.start(), config_path, db_path, tmp_path, hooks, env), sink


def links(service: WebService, mail: Received) -> dict[str, str]:
    """The mail's links by action, pointed at this server (the config's public_url names a
    fixed port; the test server took a free one)."""
    body = mail.message.get_body(preferencelist=("plain",))
    assert body is not None
    found = {}
    for line in str(body.get_content()).splitlines():
        match = _LINK.search(line)
        if match:
            found[line.split()[0].lower()] = service.url + urlsplit(match.group(0)).path
    return found


def _create(service: WebService, run_id: str) -> dict[str, Any]:
    created = service.api().post("/v1/approvals", request_body(run_id=run_id))
    assert created.status == 201, created
    body: dict[str, Any] = created.body
    return body


def test_two_clicks_decide_once_and_a_second_use_is_refused(
    mailing: tuple[WebService, SmtpSink], contexts: Contexts
) -> None:
    service, sink = mailing
    approval = _create(service, "run-mail-approve")
    [mail] = wait_for_mail(sink, "alice@example.com")
    approve = links(service, mail)["approve"]
    page = contexts().new_page()
    page.goto(approve)
    expect(page.get_by_role("heading", name="Approve this request?")).to_be_visible()
    expect(page.get_by_text(f"sha256:{approval['hash'][:12]}").first).to_be_visible()
    assert service.api().get(f"/v1/approvals/{approval['id']}").body["state"] == "pending"
    shoot(page, "email-link-confirm")
    with page.expect_response(lambda r: r.request.method == "POST") as posted:
        page.get_by_role("button", name="Approve").click()
    assert posted.value.status == 200
    expect(page.get_by_role("status")).to_contain_text("Approved")
    assert service.api().get(f"/v1/approvals/{approval['id']}").body["state"] == "approved"
    assert ("approved", "email:alice") in service.events(approval["id"])

    # The same link again, in another browser: refused, and it says why.
    again = contexts().new_page()
    response = again.goto(approve)
    assert response is not None and response.status == 410
    expect(again.get_by_role("alert")).to_contain_text("already used")
    expect(again.get_by_role("button", name="Approve")).to_have_count(0)
    # The outcome follows in alice's thread.
    [card, reply] = wait_for_mail(sink, "alice@example.com", 2)
    assert reply.message["In-Reply-To"] == card.message["Message-ID"]


def test_reject_by_mail_with_a_reason_and_someone_elses_link_is_refused(
    mailing: tuple[WebService, SmtpSink], contexts: Contexts
) -> None:
    service, sink = mailing
    approval = _create(service, "run-mail-reject")
    [alice_mail] = wait_for_mail(sink, "alice@example.com")
    [bob_mail] = wait_for_mail(sink, "bob@example.com")

    # bob, signed in to the web as himself, opens the link mailed to alice.
    bob = service.sign_in(contexts(), "bob")
    response = bob.goto(links(service, alice_mail)["approve"])
    assert response is not None and response.status == 403
    expect(bob.get_by_role("alert")).to_contain_text(
        "mailed to Alice Ng, but this browser is signed in as Bob"
    )
    expect(bob.get_by_role("button", name="Approve")).to_have_count(0)

    # His own reject link asks for a reason, and the reason reaches the request.
    bob.goto(links(service, bob_mail)["reject"])
    bob.get_by_label("Your reason for rejecting").fill("over the quarterly budget")
    bob.get_by_role("button", name="Reject").click()
    expect(bob.get_by_role("status")).to_contain_text("Rejected")
    got = service.api().get(f"/v1/approvals/{approval['id']}").body
    assert (got["state"], got["decided_by"], got["decision_note"]) == (
        "rejected",
        "bob",
        "over the quarterly budget",
    )
    # alice's link now says it is decided, in words, and offers nothing.
    page = contexts().new_page()
    response = page.goto(links(service, alice_mail)["approve"])
    assert response is not None and response.status == 409
    expect(page.get_by_role("alert")).to_contain_text("Already rejected by Bob Stone")
