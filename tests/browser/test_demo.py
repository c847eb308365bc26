"""`signoff demo` as a newcomer runs it: a subprocess that prints sign-in links, opened in
Chromium.

It proves that the demo starts the real server on a SQLite database of its own (in a
temporary directory: nothing lands in the working directory), files its requests through the
HTTP API, prints an approver's and an operator's link, and that the approver's link opens an
inbox listing the demo's five pending requests (a refund, a contract cancellation handed to
Bob by Carol's delegation, a production migration needing 2 of 3, the
`interrupted_side_effect` signoff raised itself when the agent's claim lapsed, whose page
links the request it re-asks, and a question with options); that a decision made there
reaches the demo's scripted agent, which runs the call and says so; that the mailbox lists
the cards sent by mail in the web pages' stylesheet; that the server's address, printed
first, leads to the inbox and the operator's link opens her dashboard; and that Ctrl-C
(SIGINT) stops it cleanly, exit 0, its temporary directory gone.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import tomllib
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, expect

from bot.config import parse_config
from bot.demo import demo_config_text, shipped_config_text
from tests.support.cli import base_env
from tests.support.service import wait_until
from tests.support.web_service import shoot

START_TIMEOUT = 60.0
DEMO_TITLES = (
    "Refund €120.00 to Zoë Martin",
    "Cancel the Globex Logistics contract (CTR-2024-0193)",
    "Run migration 0042 on orders-prod",
    "Outcome unknown: Pay invoice INV-4471: €3,480.00 to Northwind Traders",
    "Replace or refund order 8815?",
)


class Demo:
    """`signoff demo --listen 127.0.0.1:0` as a subprocess; its stdout collected by a thread."""

    def __init__(self, cwd: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "demo", "--listen", "127.0.0.1:0"],
            cwd=cwd,
            env=base_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )
        self.lines: list[str] = []
        self._ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if "Ctrl-C stops the demo" in line:
                self._ready.set()
        self._ready.set()

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_ready(self) -> str:
        if not self._ready.wait(START_TIMEOUT) or self.proc.poll() is not None:
            self.proc.kill()
            _, err = self.proc.communicate()
            raise AssertionError(f"signoff demo did not start:\n{self.output}\n{err}")
        return self.output

    def link(self, role: str) -> str:
        match = re.search(rf"^  {role} .*?(http://\S+/web/login/\S+)", self.output, re.M)
        assert match, self.output
        return match.group(1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Demo]:
    running = Demo(tmp_path)
    try:
        yield running
    finally:
        running.stop()


def test_the_demo_prints_links_that_open_a_working_inbox(
    demo: Demo, tmp_path: Path, contexts: Callable[..., BrowserContext]
) -> None:
    printed = demo.wait_ready()
    database = Path(re.search(r"^  database  (\S+)", printed, re.M).group(1))  # type: ignore[union-attr]
    assert database.is_file(), printed
    assert "interrupted_side_effect, pending" in printed, printed

    page = contexts().new_page()
    page.goto(demo.link("approver"))  # its page presses Continue, then the inbox
    page.wait_for_url("**/web/inbox")
    expect(page.locator("header .who")).to_have_text("Bob Stone")
    pending = page.locator('#inbox article.card[data-state="pending"]')
    expect(pending).to_have_count(len(DEMO_TITLES))
    shown = sorted(pending.locator("h2").all_inner_texts())
    assert shown == sorted(DEMO_TITLES), shown
    shoot(page, "demo-inbox")

    # A decision in the browser reaches the scripted agent, which runs the call it approved.
    page.get_by_role("link", name=DEMO_TITLES[0]).click()
    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_role("status")).to_contain_text("Approved")
    wait_until(
        lambda: "agent: 'Refund €120.00 to Zoë Martin' approved by bob: claimed it" in demo.output,
        15,
        "the demo agent running the approved refund",
    )

    # The demo's mailbox holds the cards finance got by mail; one opens with its decision
    # links, which lead to the server's confirmation page.
    mailbox = re.search(r"^  mailbox   (http://\S+)", printed, re.M).group(1)  # type: ignore[union-attr]
    mail = contexts().new_page()
    mail.goto(mailbox)
    # Styled as the web pages are: their stylesheet, from the demo's server, is applied.
    sheet = mail.locator('link[rel="stylesheet"]')
    expect(sheet).to_have_attribute("href", re.compile(r"/web/static/signoff\.css$"))
    listed = mail.locator(".mailbox > article.card").first
    expect(listed).to_have_css("border-radius", "8px")
    expect(mail.locator("header.top")).to_have_css("background-color", "rgb(255, 255, 255)")
    shoot(mail, "demo-mailbox")
    first_card = re.compile(r"^\[signoff\] Approval needed: Refund €120.00 to Zoë Martin")
    refund_mail = mail.get_by_role("link", name=first_card).first  # not a reply in its thread
    expect(refund_mail).to_be_visible()
    refund_mail.click()
    expect(mail.get_by_role("link", name=re.compile("Approve"))).to_have_count(1)
    shoot(mail, "demo-mailbox-card")

    # The support agent's question: one press answers it, and the agent reads the answer.
    page.get_by_role("link", name="Back to your inbox").click()
    page.get_by_role("link", name=DEMO_TITLES[4]).click()
    page.get_by_role("button", name="Send a replacement").click()
    expect(page.get_by_role("status")).to_have_text("Answered.")
    wait_until(
        lambda: (
            "agent: 'Replace or refund order 8815?' answered by bob: 'Send a replacement'"
            in demo.output
        ),
        15,
        "the demo agent reading the answer",
    )

    # The re-asked payout names the request it re-asks: a link to that request's page.
    page.get_by_role("link", name="Back to your inbox").click()
    page.get_by_role("link", name=DEMO_TITLES[3]).click()
    original = page.locator("dl.facts a.origin")
    expect(original).to_have_count(1)
    original_id = original.inner_text()
    original.click()
    page.wait_for_url(f"**/web/approvals/{original_id}")
    expect(page.locator(f'article.card[data-approval-id="{original_id}"]')).to_have_attribute(
        "data-state", "outcome_unknown"
    )

    # The server's address, printed first, sends a browser to the inbox.
    server = re.search(r"^  server    (http://\S+)", printed, re.M).group(1)  # type: ignore[union-attr]
    page.goto(server)
    page.wait_for_url("**/web/inbox")

    # The operator's link opens her dashboard: what is still pending, across both tenants.
    operator = contexts().new_page()
    operator.goto(demo.link("operator"))
    operator.wait_for_url("**/dashboard")
    expect(operator.locator("header .who")).to_have_text("Alice Ng")
    rows = operator.locator("#pending tbody tr")
    expect(rows).to_have_count(len(DEMO_TITLES) - 2)  # the refund and the question are decided
    expect(operator.locator("#pending")).to_contain_text("ops")
    expect(operator.locator("#pending")).to_contain_text("support")
    expect(operator.locator("#recent")).to_contain_text("Bob Stone")

    # The migration needs 2 of 3 and Alice has approved it (from the CLI, as the demo files
    # it): Bob's inbox says so before he votes, and after his vote decides it the card and
    # the dashboard still name Alice, not only Bob.
    migration = DEMO_TITLES[2]
    by_alice = re.compile(r"Approved by\s*Alice Ng \(alice\) at [0-9: -]+ UTC from the CLI")
    by_bob = re.compile(r"Approved by\s*Bob Stone \(bob\) at [0-9: -]+ UTC on the web")
    page.goto(server)
    page.wait_for_url("**/web/inbox")
    row = page.locator("#inbox article.card").filter(has_text=migration)
    expect(row).to_contain_text("needs 2 approvals, 1 so far")
    expect(row).to_contain_text(by_alice)
    shoot(page, "demo-migration-inbox-one-vote")
    page.get_by_role("link", name=migration).click()
    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_role("status")).to_contain_text("Approved")
    card = page.locator("article.full-card")
    expect(card).to_contain_text(by_alice)
    expect(card).to_contain_text(by_bob)
    shoot(page, "demo-migration-decided")
    operator.reload()
    recent = operator.locator("#recent tbody tr").filter(has_text=migration)
    expect(recent.locator(".dash-votes li")).to_have_count(2)
    expect(recent.locator(".dash-votes li").first).to_contain_text(by_alice)
    expect(recent.locator(".dash-votes li").last).to_contain_text(by_bob)
    shoot(operator, "demo-migration-dashboard")

    # Ctrl-C: a clean stop, and the demo's temporary directory is gone.
    demo.proc.send_signal(signal.SIGINT)
    assert demo.proc.wait(15) == 0, demo.output
    assert demo.output.rstrip().endswith("signoff demo stopped"), demo.output
    assert not database.parent.exists()
    assert list(tmp_path.iterdir()) == []  # nothing was written where it ran


def test_the_shipped_demo_config_is_what_the_demo_promises(tmp_path: Path) -> None:
    """Three principals (one an operator), a group, a route with escalation and one needing
    2 of 3, every card shown in the web inbox; the copy the demo writes names this run's
    addresses and database. (No browser needed.)"""
    shipped = parse_config(tomllib.loads(shipped_config_text()), "bot/demo.toml")
    assert sorted(shipped.principals) == ["alice", "bob", "carol"]
    assert [key for key, p in shipped.principals.items() if p.operator] == ["alice"]
    assert shipped.groups["finance"].members == ["alice", "bob"]
    assert any(route.escalation for route in shipped.routes)
    assert any(
        (route.required_approvals, len(route.approvers)) == (2, 3) for route in shipped.routes
    )
    assert all(route.notify[0] == "web" for route in shipped.routes)
    assert shipped.surface_table("email") is not None  # finance's cards go by mail too
    assert shipped.web is not None

    text = demo_config_text(
        listen="127.0.0.1:9123",
        public_url="http://127.0.0.1:9123",
        database_path=tmp_path / "demo.db",
        agent_url="http://127.0.0.1:9124/webhooks/signoff",
    )
    config = parse_config(tomllib.loads(text), "copy")
    assert (config.server.listen, config.server.public_url) == (
        "127.0.0.1:9123",
        "http://127.0.0.1:9123",
    )
    assert config.database.url == f"sqlite+aiosqlite:///{tmp_path / 'demo.db'}"
    # The scripted agent's tenants call it back; the sandbox tenant, the user's, has no webhook.
    webhooks = {t.name: t.webhook_url for t in config.tenants}
    assert webhooks == {
        "support": "http://127.0.0.1:9124/webhooks/signoff",
        "ops": "http://127.0.0.1:9124/webhooks/signoff",
        "sandbox": None,
    }
    # Everything else is the shipped config, unchanged.
    assert config.principals == shipped.principals
    assert config.routes == shipped.routes


def test_the_demo_leaves_its_sandbox_tenant_to_you(demo: Demo, tmp_path: Path) -> None:
    """What a newcomer does next, from the lines the demo prints: the question is labelled as
    the API names its kind; the printed `signoff` command works without an activated
    virtualenv; and a request filed with the printed key is approved and then claimed by the
    newcomer's own agent, never by the demo's."""
    printed = demo.wait_ready()
    assert re.search(r"Replace or refund order 8815\?\n\s+question, pending", printed), printed

    # The "more links" line, run as printed, with no virtualenv on PATH.
    line = re.search(r"^  SIGNOFF_CONFIG=(\S+) (\S+) web login --as carol$", printed, re.M)
    assert line, printed
    config, signoff = line.groups()
    env = base_env(SIGNOFF_CONFIG=config, PATH="/usr/bin:/bin")
    env.pop("PYTHONPATH", None)
    login = subprocess.run(
        [signoff, "web", "login", "--as", "carol"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert login.returncode == 0, login.stderr
    assert re.search(r"http://\S+/web/login/\S+", login.stdout), login.stdout

    # The printed key is the sandbox tenant's: file, approve (as Bob, from the CLI), claim.
    curl = re.search(r"Bearer (\S+)' (http://\S+)/v1/approvals$", printed, re.M)
    assert curl, printed
    key, server = curl.groups()

    def api(method: str, path: str, body: object = None) -> dict:
        request = urllib.request.Request(
            server + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=15) as response:
            return json.loads(response.read())

    title = "Refund €12.00 to a newcomer's customer"
    filed = api(
        "POST",
        "/v1/approvals",
        {
            "run_id": "newcomer-1",
            "capability": "payments.refund",
            "tool": {"name": "stripe.refunds.create", "arguments": {"amount": 1200}},
            "presentation": {"title": title},
            "requested_by": "my-agent",
        },
    )
    assert filed["tenant"] == "sandbox"
    approve = subprocess.run(
        [signoff, "approvals", "approve", filed["id"], "--hash", filed["hash"], "--as", "bob"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert approve.returncode == 0, approve.stderr
    claim = api("POST", f"/v1/approvals/{filed['id']}/claim", {})
    assert claim["tool"]["arguments"] == {"amount": 1200}
    assert title not in demo.output  # the demo's agent never heard of it
