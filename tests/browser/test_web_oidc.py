"""Signing in through a real OpenID provider (`[web.oidc]`) in real Chromium, against
`signoff serve` run as a subprocess: the provider is `oidc-provider` under Node
(tests/support/oidc_provider.py), started once for the module, with its own login and
consent pages. It proves that a person signs in there, approves a request as themselves, and
signs out (of signoff, then of the provider through the link signoff offers); that someone
the directory does not know, and an answer whose state was forged, are each refused in words,
with no session and nothing written. The refusals of doctored ID tokens (another issuer,
another key, expired) are tested over HTTP on both databases:
tests/integration/web/test_web_oidc.py.

The server's configured public URL names a fixed port (http://127.0.0.1:8700, the redirect
URI registered at the provider) while the test server took a free one: the browser context
sends what the provider redirects there on to the real port.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest
from playwright.sync_api import BrowserContext, Page, Route, expect

from tests.support.cli import sqlite_url
from tests.support.oidc_provider import EMAILS, SECRET_ENV, OidcProvider
from tests.support.service import Fleet, WebhookReceiver, create, write_config
from tests.support.web_service import WEB_SECRET, WebService, shoot, web_config

Contexts = Callable[..., BrowserContext]
PUBLIC = "http://127.0.0.1:8700"  # [server] public_url, as the service config leaves it
CALLBACK = PUBLIC + "/web/oidc/callback"


@pytest.fixture(scope="module")
def provider() -> Iterator[OidcProvider]:
    with OidcProvider([CALLBACK]) as running:
        yield running


@pytest.fixture
def service(provider: OidcProvider, tmp_path: Path, sqlite_template: Path) -> Iterator[WebService]:
    """`signoff serve` on a fresh SQLite database with [web.oidc] naming the provider, and
    the principals' addresses the provider's accounts carry."""
    with ExitStack() as stack:
        db_path = tmp_path / "signoff.db"
        db_path.write_bytes(sqlite_template.read_bytes())
        hooks = stack.enter_context(WebhookReceiver())
        config = web_config(sqlite_url(db_path), hooks.url)
        config["web"] = {"oidc": provider.config()}
        for key, address in EMAILS.items():
            config["principals"].setdefault(key, {"name": key.title()})["email"] = address
        env = {"SIGNOFF_WEB_SECRET": WEB_SECRET, **SECRET_ENV}
        config_path = write_config(tmp_path / "signoff.toml", config)
        fleet = stack.enter_context(Fleet(config_path, tmp_path, env))
        yield WebService(fleet.start(), config_path, db_path, tmp_path, hooks, env)


def _person(contexts: Contexts, service: WebService, *, forge_state: bool = False) -> Page:
    """A browser whose provider redirects to the public URL reach the test server."""
    context = contexts()

    def onward(route: Route) -> None:
        parts = urlsplit(route.request.url)
        query = dict(parse_qsl(parts.query))
        if forge_state:
            query["state"] = "forged-by-someone-else"
        location = f"{service.url}{parts.path}?{urlencode(query)}"
        route.fulfill(status=302, headers={"Location": location})

    context.route(f"{PUBLIC}/**", onward)
    return context.new_page()


def _at_the_provider(page: Page, provider: OidcProvider, login: str) -> None:
    """Sign in on the provider's login page (any password), then consent."""
    page.wait_for_url(f"{provider.issuer}/interaction/**")
    page.locator('input[name="login"]').fill(login)
    page.locator('input[name="password"]').fill("any password")
    page.get_by_role("button", name="Sign-in").click()
    page.get_by_role("button", name="Continue").click()  # consent: the scopes asked for


def _writes(service: WebService) -> list[int]:
    """How many rows the tables a sign-in might touch hold."""
    tables = ("approvals", "approval_events", "web_logins", "outbox")
    return [service.query(f"SELECT count(*) FROM {t}")[0][0] for t in tables]


def test_sign_in_approve_and_sign_out(
    service: WebService, provider: OidcProvider, contexts: Contexts
) -> None:
    approval = create(service.api(), "run-oidc-approve")
    page = _person(contexts, service)
    page.goto(f"{service.url}/web/inbox")
    shoot(page, "oidc-sign-in")
    page.get_by_role("link", name="Sign in with Test IdP").click()
    _at_the_provider(page, provider, "alice")
    page.wait_for_url(f"{service.url}/web/inbox")
    expect(page.locator("header .who")).to_have_text("Alice Ng")
    session = [c for c in page.context.cookies() if c["name"] == "signoff_session"]
    assert [(c["httpOnly"], c["sameSite"]) for c in session] == [(True, "Lax")]

    card = page.locator(f'#inbox article.card[data-approval-id="{approval["id"]}"]')
    card.get_by_role("link", name="Refund €120.00 to Zoë").click()
    page.locator("form.decide.approve").get_by_role("button", name="Approve").click()
    expect(page.get_by_role("status")).to_have_text("Approved.")
    assert ("approved", "web:alice") in service.events(approval["id"])
    decided = service.api().get(f"/v1/approvals/{approval['id']}").body
    assert (decided["state"], decided["decided_by"]) == ("approved", "alice")

    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Signed out")).to_be_visible()
    shoot(page, "oidc-signed-out")
    inbox = page.context.new_page()
    assert (response := inbox.goto(f"{service.url}/web/inbox")) and response.status == 401
    inbox.close()

    # Signing out at the provider too: its next sign-in asks for a login again.
    page.get_by_role("link", name="Sign out there too").click()
    page.wait_for_url(f"{provider.issuer}/session/end**")
    page.get_by_role("button", name="Yes, sign me out").click()
    page.goto(f"{service.url}/web/oidc/login")
    page.wait_for_url(f"{provider.issuer}/interaction/**")
    expect(page.locator('input[name="login"]')).to_be_visible()


def test_the_operator_group_opens_the_dashboard(
    service: WebService, provider: OidcProvider, contexts: Contexts
) -> None:
    page = _person(contexts, service)
    page.goto(f"{service.url}/dashboard")  # 401: the sign-in page, which comes back here
    page.get_by_role("link", name="Sign in with Test IdP").click()
    _at_the_provider(page, provider, "olga")
    page.wait_for_url(f"{service.url}/dashboard")
    expect(page.get_by_role("link", name="Dashboard")).to_be_visible()
    shoot(page, "oidc-dashboard")


@pytest.mark.parametrize(
    ("login", "forge_state", "says"),
    [
        ("mallory", False, "as mallory@elsewhere.example, but that is nobody this signoff knows"),
        ("alice", True, "does not belong to a sign-in started in this browser"),
    ],
    ids=["unknown-person", "forged-state"],
)
def test_refused_in_words_with_nothing_written(
    service: WebService,
    provider: OidcProvider,
    contexts: Contexts,
    login: str,
    forge_state: bool,
    says: str,
) -> None:
    before = _writes(service)
    page = _person(contexts, service, forge_state=forge_state)
    page.goto(f"{service.url}/web/oidc/login")
    _at_the_provider(page, provider, login)
    page.wait_for_url(f"{service.url}/web/oidc/callback**")
    expect(page.get_by_role("heading", name="Sign-in refused")).to_be_visible()
    expect(page.get_by_role("alert")).to_contain_text(says)
    shoot(page, f"oidc-refused-{login}{'-forged' if forge_state else ''}")
    assert [c for c in page.context.cookies() if c["name"] == "signoff_session"] == []
    inbox = page.goto(f"{service.url}/web/inbox")
    assert inbox is not None and inbox.status == 401
    assert _writes(service) == before
