"""A `signoff serve` with the web surface on, as the browser tests start it (tests/browser/),
with the constants they share and the screenshots they take (tests/browser/artifacts/)."""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from playwright.sync_api import BrowserContext, Page

from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram
from tests.support.cli import Cli, Result
from tests.support.service import (
    Api,
    ServerProcess,
    WebhookReceiver,
    service_config,
    service_env,
)

CHROMIUM = Path(os.environ.get("SIGNOFF_TEST_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = Path(__file__).resolve().parents[1] / "browser" / "artifacts"
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


def shoot(page: Page, name: str, *, full_page: bool = True) -> Path:
    """Save a screenshot of `page` as tests/browser/artifacts/NAME.png; its path."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{_safe_name(name)}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name)


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
