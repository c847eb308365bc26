"""Signing in to the web surface through a real OpenID provider (`[web.oidc]`), over HTTP, on
both databases: the provider is `oidc-provider` under Node (tests/support/oidc_provider.py),
started once for the module, its login and consent forms filled in as a person would; the
signoff server is the real application in this process (tests/support/chat_server.py) with a
FakeClock set to the real time (the provider's tokens carry real times).

Each refusal is a page in words, opens no session, and writes nothing (no write transaction
is opened). The same flow in Chromium: tests/browser/test_web_oidc.py.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit

import pytest
from yarl import URL

from bot.clock import FakeClock
from bot.config import parse_config
from bot.operator import Actor, Operator
from bot.standing import GrantScope
from channels.web.oidc_pages import CALLBACK, FLOW_COOKIE
from channels.web.session import COOKIE
from store.repository import Store
from tests.support.chat_server import API_KEY, PUBLIC_URL, ChatServer, serve
from tests.support.oidc_provider import EMAILS, SECRET_ENV, OidcProvider
from tests.support.samples import TEST_CONFIG
from tests.support.store_writes import count_writes
from tests.support.web_browser import Browser, Page, parse

WEB_SECRET = "o" * 40


@pytest.fixture(scope="module")
def provider() -> Iterator[OidcProvider]:
    with OidcProvider([PUBLIC_URL + CALLBACK]) as running:
        yield running


@dataclass
class Rig(ChatServer):
    provider: OidcProvider
    browsers: list[Browser] = field(default_factory=list)

    def browser(self) -> Browser:
        browser = Browser(self.url)
        self.browsers.append(browser)
        return browser

    async def close(self) -> None:
        for browser in self.browsers:
            await browser.http.close()

    async def to_callback(
        self, browser: Browser, login: str, start: str = "/web/oidc/login"
    ) -> str:
        """Leave signoff for the provider, sign in there as `login` (any password) and
        consent, as a person would; the URL the provider sends the browser back to (not yet
        opened)."""
        url = self.url + start
        for _ in range(20):
            async with browser.http.get(url, allow_redirects=False) as response:
                body = await response.text()
                location = response.headers.get("Location")
            if location is not None:
                url = urljoin(url, location)
                if url.startswith(PUBLIC_URL + CALLBACK):
                    return url
                continue
            assert response.status == 200, body
            url = await self._fill(browser, url, body, login)
        raise AssertionError("the provider never sent the browser back")

    async def _fill(self, browser: Browser, url: str, body: str, login: str) -> str:
        """Submit the provider's login or consent form; where it leads."""
        form = parse(body).find("form")
        fields = {i.attrs["name"]: i.attrs.get("value", "") for i in form.find_all("input")}
        if fields.get("prompt") == "login":
            fields |= {"login": login, "password": "any password"}
        action = urljoin(url, form.attrs["action"])
        async with browser.http.post(action, data=fields, allow_redirects=False) as response:
            assert response.status in (302, 303), await response.text()
            return urljoin(action, response.headers["Location"])

    async def back(self, browser: Browser, callback: str, **changed: str) -> Page:
        """Open the provider's answer at signoff, with query parameters `changed`."""
        parts = urlsplit(callback)
        query = dict(parse_qsl(parts.query)) | changed
        return await browser.get(f"{CALLBACK}?{urlencode(query)}", follow=False)

    async def sign_in(self, login: str, start: str = "/web/oidc/login") -> tuple[Browser, Page]:
        browser = self.browser()
        page = await self.back(browser, await self.to_callback(browser, login, start))
        return browser, page


def _config(provider: OidcProvider) -> dict[str, Any]:
    config = copy.deepcopy(TEST_CONFIG)
    config["server"] = {"public_url": PUBLIC_URL}
    config["web"] = {"oidc": provider.config()}
    config["tenants"][0]["api_key_env"] = "WEB_TEST_API_KEY"
    for key, address in EMAILS.items():
        config["principals"].setdefault(key, {"name": key.title()})["email"] = address
    # Olga is no operator in the directory: only the provider's group makes her one.
    config["principals"]["olga"]["name"] = "Olga Ops"
    return config


@pytest.fixture
async def rig(
    provider: OidcProvider, store: Store, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Rig]:
    for name, value in {**SECRET_ENV, "SIGNOFF_WEB_SECRET": WEB_SECRET}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("WEB_TEST_API_KEY", API_KEY)
    clock = FakeClock(datetime.now(UTC))  # the provider's tokens carry the real time
    cleanup: list[Any] = []
    config = parse_config(_config(provider))
    server = await serve(Rig, config, store, clock, API_KEY, cleanup, provider=provider)
    yield server
    await server.close()
    for close in reversed(cleanup):
        await close()


def _cookies(browser: Browser) -> set[str]:
    return {cookie.key for cookie in browser.http.cookie_jar}


async def _signed_out(browser: Browser) -> bool:
    return (await browser.get("/web/inbox")).status == 401


# -- signing in -------------------------------------------------------------------------------


async def test_sign_in_approve_and_sign_out(rig: Rig) -> None:
    created = await rig.create()
    browser, page = await rig.sign_in("alice")
    assert page.status == 303 and page.url == "/web/inbox", page.html
    assert FLOW_COOKIE not in _cookies(browser)  # spent
    inbox = await browser.get("/web/inbox")
    assert inbox.status == 200
    assert "Alice" in inbox.doc.find("span", classes="who").text
    card = await browser.get(f"/web/approvals/{created['id']}")
    decided = await browser.decide(card, "approve")
    assert decided.status == 303, decided.html
    state = await rig.state(created["id"])
    assert (state.state, state.decided_by) == ("approved", "alice")
    [approved] = [e for e in await rig.events(created["id"]) if e.type == "approved"]
    assert approved.actor == "web:alice"

    csrf = inbox.doc.find("form", classes="signout").field("csrf")
    out = await browser.post("/web/logout", {"csrf": csrf})
    assert out.status == 200
    end = out.doc.find("a", href=_end_session(rig))
    assert end.text == "Sign out there too"
    assert await _signed_out(browser)


def _end_session(rig: Rig) -> str:
    return f"{rig.provider.issuer}/session/end?client_id=signoff-test"


async def test_the_operator_claim_opens_the_dashboard(rig: Rig) -> None:
    olga, page = await rig.sign_in("olga", start="/web/oidc/login?next=/dashboard")
    assert page.status == 303 and page.url == "/dashboard"
    assert (await olga.get("/dashboard")).status == 200
    bob, _ = await rig.sign_in("bob")  # in the directory, not in the operators' group
    assert (await bob.get("/dashboard")).status == 403
    assert (await bob.get("/web/inbox")).status == 200


async def test_the_operator_claim_sees_and_revokes_every_grant(rig: Rig) -> None:
    """Standing grants follow the same rights: olga, an operator by the provider's group
    alone, sees alice's grant and ends it; bob, no operator, sees none."""
    created = await rig.create(tool={"name": "refund", "arguments": {"charge": "ch_9"}})
    scope = GrantScope(timedelta(hours=8), equal=("charge",))
    operator = Operator(rig.store, rig.directory, rig.clock)
    _, grant = await operator.approve_and_allow(
        created["id"], created["hash"], Actor("alice", "web"), scope
    )
    bob, _ = await rig.sign_in("bob")
    assert (await bob.get("/web/grants")).doc.find_all("li", classes="grant") == []
    olga, _ = await rig.sign_in("olga")
    page = await olga.get("/web/grants")
    [listed] = page.doc.find_all("li", classes="grant")
    assert listed.attrs["data-grant-id"] == grant.id
    csrf = page.doc.find("form", classes="signout").field("csrf")
    revoked = await olga.post(f"/web/grants/{grant.id}/revoke", {"csrf": csrf})
    assert revoked.status == 303, revoked.html
    events = [(e.type, e.actor) for e in await rig.events(created["id"])]
    assert ("grant_revoked", "web:olga") in events


async def test_the_sign_in_page_offers_the_provider(rig: Rig) -> None:
    page = await rig.browser().get("/dashboard")
    assert page.status == 401
    link = page.doc.find("a", href="/web/oidc/login?next=/dashboard")
    assert link.text == "Sign in with Test IdP"


# -- refusals: a page in words, no session, nothing written -----------------------------------


async def _refused(rig: Rig, monkeypatch: pytest.MonkeyPatch, login: str, **changed: str) -> Page:
    browser = rig.browser()
    callback = await rig.to_callback(browser, login)
    writes = count_writes(rig.store, monkeypatch)
    page = await rig.back(browser, callback, **changed)
    assert writes == [], "a refused sign-in wrote something"
    assert page.doc.find("h1").text == "Sign-in refused"
    assert COOKIE not in _cookies(browser)
    assert await _signed_out(browser)
    return page


async def test_a_forged_state_is_refused(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    page = await _refused(rig, monkeypatch, "alice", state="forged-by-someone-else")
    assert page.status == 403
    assert "does not belong to a sign-in started in this browser" in page.alert


async def test_an_answer_for_another_browser_is_refused(rig: Rig) -> None:
    """An attacker's own callback URL opened in the victim's browser (login CSRF)."""
    attacker = rig.browser()
    callback = await rig.to_callback(attacker, "mallory")
    victim = rig.browser()
    page = await rig.back(victim, callback)
    assert page.status == 403
    assert "does not belong to a sign-in started in this browser" in page.alert
    assert await _signed_out(victim)


@pytest.mark.parametrize(
    ("mode", "says"),
    [
        ("issuer", "was issued by 'http://127.0.0.1:9/another-issuer', not by"),
        ("key", "signature is not one of Test IdP's keys"),
        ("expired", "The ID token from Test IdP has expired"),
        ("nonce", "was not made for this sign-in"),
    ],
)
async def test_a_doctored_id_token_is_refused(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, mode: str, says: str
) -> None:
    rig.provider.tamper(mode)
    try:
        page = await _refused(rig, monkeypatch, "alice")
    finally:
        rig.provider.tamper(None)
    assert page.status == 403
    assert says in page.alert


async def test_a_token_expired_by_our_clock_is_refused(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The provider's real token (5 minutes), read 8 minutes later: still within the ten
    minutes a sign-in may take, past the token's life and the minute of leeway."""
    browser = rig.browser()
    callback = await rig.to_callback(browser, "alice")
    rig.clock.advance(minutes=8)
    writes = count_writes(rig.store, monkeypatch)
    page = await rig.back(browser, callback)
    assert writes == []
    assert page.status == 403 and "has expired" in page.alert
    assert await _signed_out(browser)


async def test_an_unknown_person_is_refused(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    page = await _refused(rig, monkeypatch, "mallory")
    assert page.status == 403
    assert (
        "You signed in at Test IdP as mallory@elsewhere.example, but that is nobody this "
        "signoff knows" in page.alert
    )


async def test_an_unverified_address_is_refused(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    page = await _refused(rig, monkeypatch, "unverified")
    assert "the address alice@example.com is not verified" in page.alert


async def test_the_providers_own_refusal_is_shown(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = await _refused(
        rig, monkeypatch, "alice", error="access_denied", error_description="End-User aborted"
    )
    assert "Test IdP did not sign you in (End-User aborted)" in page.alert


async def test_a_code_used_twice_is_refused(rig: Rig) -> None:
    """The flow cookie is spent by the first answer; with a copy kept, the provider itself
    refuses the code a second time."""
    browser = rig.browser()
    callback = await rig.to_callback(browser, "alice")
    flow = next(c.value for c in browser.http.cookie_jar if c.key == FLOW_COOKIE)
    assert (await rig.back(browser, callback)).status == 303
    again = await rig.back(browser, callback)
    assert again.status == 403 and "does not belong" in again.alert
    replay = rig.browser()
    replay.http.cookie_jar.update_cookies({FLOW_COOKIE: flow}, URL(rig.url + CALLBACK))
    page = await rig.back(replay, callback)
    assert page.status == 403 and "Test IdP did not accept this sign-in" in page.alert
    assert await _signed_out(replay)


async def test_a_provider_that_cannot_be_read_is_a_502_page(
    provider: OidcProvider, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {**SECRET_ENV, "SIGNOFF_WEB_SECRET": WEB_SECRET}.items():
        monkeypatch.setenv(name, value)
    config = _config(provider)
    config["web"]["oidc"]["issuer"] = provider.issuer + "/"  # discovery names it without
    cleanup: list[Any] = []
    clock = FakeClock(datetime.now(UTC))
    server = await serve(
        Rig, parse_config(config), store, clock, API_KEY, cleanup, provider=provider
    )
    try:
        page = await server.browser().get("/web/oidc/login")
        assert page.status == 502
        assert "it names the issuer" in page.alert
    finally:
        await server.close()
        for close in reversed(cleanup):
            await close()
