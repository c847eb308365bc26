"""Browser tests: real Chromium against real `signoff serve` processes.

Chromium is Debian's `chromium` package (/usr/bin/chromium, or $SIGNOFF_TEST_CHROMIUM),
driven by Playwright for Python through `executable_path`: nothing downloads a browser.
Without it the tests skip, saying so, except under CI=true, where they fail (`.ci/run`
installs it). One browser serves the whole package (tests/browser/); each test gets fresh
browser contexts (cookie jars) of its own.

A test starts `signoff serve` as a subprocess (tests/acceptance/service.py: Fleet,
ServerProcess) on a SQLite copy of the migrated template, with `[web]` on, the webhook
receiver of tests/acceptance/service.py, and, when it asks, the fake Slack and Telegram APIs
of tests/fakes/ behind `[slack]` and `[telegram]`. People sign in as a person would: a link
printed by `signoff web login --as NAME`, run as a subprocess, opened in the browser.

Screenshots go to tests/browser/artifacts/ (ignored by git; CI may keep them): those the
tests take on purpose, and one of every open page of a test that failed.
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright

from tests.acceptance.conftest import Cli, Result, sqlite_url
from tests.acceptance.service import (
    Api,
    Fleet,
    ServerProcess,
    WebhookReceiver,
    service_config,
    service_env,
    write_config,
)
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram

CHROMIUM = Path(os.environ.get("SIGNOFF_TEST_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
WEB_SECRET = "browser-tests-session-signing-key-0123456789abcdef"
SLACK_TOKEN = "xoxb-test"  # FakeSlack's default
SLACK_SECRET = "slack-signing-secret-browser"
SLACK_CHANNEL = "C0FINANCE"
TELEGRAM_TOKEN = "123456:TEST-token"
TELEGRAM_SECRET = "browser-telegram-webhook-secret"
TELEGRAM_GROUP = -1001234567890
PHONE = {"width": 390, "height": 844}
# Playwright waits up to this long for an element (ms): a page of this server renders in
# milliseconds, so a longer wait only delays the report of a real failure.
WAIT_MS = 10_000
_LINK = re.compile(r"https?://\S+/web/login/\S+")


# -- the browser ---------------------------------------------------------------------------------


@pytest.fixture(scope="package")
def browser(sqlite_template: Path) -> Iterator[Browser]:
    """Chromium, headless, once for the package (launching it takes about a second).

    While it is open, Playwright's sync API holds its event loop as the main thread's running
    loop, so nothing may call asyncio.run() there meanwhile: the session's SQLite template
    (built with asyncio.run) is made first, and the package's tests run no asyncio code in
    the main thread (the fakes and the webhook receiver run their loops in threads)."""
    if not CHROMIUM.is_file():
        message = f"Chromium not found at {CHROMIUM}: apt-get install chromium"
        if os.environ.get("CI") == "true":
            pytest.fail(message + " (CI=true: browser tests must not skip)")
        pytest.skip(message)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        yield chromium
        chromium.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.stash[_FAILED] = report.failed
    return report


_FAILED = pytest.StashKey[bool]()


@pytest.fixture
def contexts(
    browser: Browser, request: pytest.FixtureRequest
) -> Iterator[Callable[..., BrowserContext]]:
    """A factory of fresh browser contexts (a separate cookie jar each: one person each),
    closed after the test; when the test failed, every open page is screenshotted first."""
    opened: list[BrowserContext] = []
    for stale in ARTIFACTS.glob(f"failed-{_safe_name(request.node.name)}-*.png"):
        stale.unlink()  # from an earlier run of this test

    def new(**options: Any) -> BrowserContext:
        context = browser.new_context(**options)
        context.set_default_timeout(WAIT_MS)
        opened.append(context)
        return context

    yield new
    failed = request.node.stash.get(_FAILED, False)
    for n, context in enumerate(opened):
        if failed:
            for m, page in enumerate(context.pages):
                shoot(page, f"failed-{_safe_name(request.node.name)}-{n}-{m}")
        context.close()


def shoot(page: Page, name: str, *, full_page: bool = True) -> Path:
    """Save a screenshot of `page` as tests/browser/artifacts/NAME.png; its path."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{_safe_name(name)}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name)


# -- the server ----------------------------------------------------------------------------------


def web_config(
    database_url: str,
    webhook_url: str,
    *,
    slack_api: str | None = None,
    telegram_api: str | None = None,
    **sections: Any,
) -> dict[str, Any]:
    """The acceptance tests' service config with `[web]` on and carol an operator; the
    payments route (group finance: alice, bob, sam) shows its cards in the inbox and, when
    their fakes are given, in Slack's C0FINANCE and a Telegram group."""
    config = service_config(database_url, webhook_url, web={}, **sections)
    config["principals"]["carol"]["operator"] = True
    notify = ["web"]
    if slack_api is not None:
        config["slack"] = {"api_base_url": slack_api}
        notify.append(f"slack:{SLACK_CHANNEL}")
    if telegram_api is not None:
        config["telegram"] = {"api_base_url": telegram_api}
        notify.append(f"telegram:{TELEGRAM_GROUP}")
    config["routes"][0]["notify"] = notify
    return config


@dataclass
class WebService:
    """One running `signoff serve` with the web surface, and what a test does with it."""

    server: ServerProcess
    config_path: Path
    db_path: Path
    workdir: Path
    hooks: WebhookReceiver
    extra_env: dict[str, str]
    slack: FakeSlack | None = None
    telegram: FakeTelegram | None = None
    _cli: Cli = field(init=False)

    def __post_init__(self) -> None:
        self._cli = Cli(self.workdir, {**service_env(self.config_path), **self.extra_env})

    @property
    def url(self) -> str:
        return self.server.url

    def api(self, tenant: str = "acme") -> Api:
        return self.server.api(tenant)

    def cli(self, *args: str) -> Result:
        """`signoff ARGS` against this deployment's config and database."""
        return self._cli.run(*args)

    def login_links(self, *principals: str) -> list[str]:
        """Links printed by `signoff web login --as NAME`, one process per name, run at once;
        pointed at this server (the config's public_url names a fixed port, the test server
        took a free one)."""
        results = self._cli.run_all([["web", "login", "--as", name] for name in principals])
        links = []
        for result in results:
            assert result.returncode == 0, str(result)
            [link] = _LINK.findall(result.stdout)
            links.append(self.url + urlsplit(link).path)
        return links

    def login_link(self, principal: str) -> str:
        [link] = self.login_links(principal)
        return link

    def sign_in(self, context: BrowserContext, principal: str, link: str | None = None) -> Page:
        """Open a new page in `context`, signed in as `principal` by a fresh link (or `link`);
        it shows the inbox."""
        page = context.new_page()
        # The link's page presses Continue itself (a POST uses the link up), then the inbox.
        page.goto(link or self.login_link(principal))
        page.wait_for_url(f"{self.url}/web/inbox")
        return page

    def people(self, contexts: Callable[..., BrowserContext], *principals: str) -> list[Page]:
        """Each principal signed in, in a browser context (a cookie jar) of their own."""
        links = self.login_links(*principals)
        return [
            self.sign_in(contexts(), name, link)
            for name, link in zip(principals, links, strict=True)
        ]

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with closing(sqlite3.connect(self.db_path)) as conn:
            return conn.execute(sql, params).fetchall()

    def events(self, approval_id: str) -> list[tuple[str, str | None]]:
        """The approval's audit events, oldest first: (type, actor)."""
        return [
            (str(kind), actor)
            for kind, actor in self.query(
                "SELECT type, actor FROM approval_events WHERE approval_id = ? ORDER BY seq",
                approval_id,
            )
        ]


@pytest.fixture
def start_web(tmp_path: Path, sqlite_template: Path) -> Iterator[Callable[..., WebService]]:
    """`start_web(slack=False, telegram=False, **sections)`: a `signoff serve` subprocess on
    a fresh SQLite database with the web surface on; `sections` override config tables
    (e.g. outbox={"max_attempts": 1}). Everything stops when the test ends."""
    with ExitStack() as stack:

        def start(*, slack: bool = False, telegram: bool = False, **sections: Any) -> WebService:
            db_path = tmp_path / "signoff.db"
            db_path.write_bytes(sqlite_template.read_bytes())
            hooks = stack.enter_context(WebhookReceiver())
            env = {"SIGNOFF_WEB_SECRET": WEB_SECRET}
            fake_slack = fake_telegram = None
            if slack:
                fake_slack = stack.enter_context(FakeSlack.in_thread(SLACK_TOKEN))
                env |= {"SLACK_BOT_TOKEN": SLACK_TOKEN, "SLACK_SIGNING_SECRET": SLACK_SECRET}
            if telegram:
                fake_telegram = stack.enter_context(FakeTelegram.in_thread(TELEGRAM_TOKEN))
                env |= {
                    "TELEGRAM_BOT_TOKEN": TELEGRAM_TOKEN,
                    "TELEGRAM_WEBHOOK_SECRET": TELEGRAM_SECRET,
                }
            config = web_config(
                sqlite_url(db_path),
                hooks.url,
                slack_api=fake_slack.base_url if fake_slack else None,
                telegram_api=fake_telegram.base_url if fake_telegram else None,
                **sections,
            )
            config_path = write_config(tmp_path / "signoff.toml", config)
            fleet = stack.enter_context(Fleet(config_path, tmp_path, env))
            return WebService(
                fleet.start(),
                config_path,
                db_path,
                tmp_path,
                hooks,
                env,
                fake_slack,
                fake_telegram,
            )

        yield start
