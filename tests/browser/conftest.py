"""Browser tests: real Chromium against real `signoff serve` processes.

Chromium is Debian's `chromium` package (/usr/bin/chromium, or $SIGNOFF_TEST_CHROMIUM),
driven by Playwright for Python through `executable_path`: nothing downloads a browser.
Without it the tests skip, saying so, except under CI=true, where they fail (`.ci/run`
installs it). One browser serves the whole package (tests/browser/); each test gets fresh
browser contexts (cookie jars) of its own.

A test starts `signoff serve` as a subprocess (tests/support/service.py: Fleet,
ServerProcess) on a SQLite copy of the migrated template, with `[web]` on, the webhook
receiver of tests/support/service.py, and, when it asks, the fake Slack and Telegram APIs
of tests/fakes/ behind `[slack]` and `[telegram]`. People sign in as a person would: a link
printed by `signoff web login --as NAME`, run as a subprocess, opened in the browser.

Screenshots go to tests/browser/artifacts/ (ignored by git; CI may keep them): those the
tests take on purpose, and one of every open page of a test that failed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, sync_playwright

from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram
from tests.support.cli import sqlite_url
from tests.support.service import (
    Fleet,
    WebhookReceiver,
    write_config,
)
from tests.support.web_service import (
    ARTIFACTS,
    CHROMIUM,
    SLACK_SECRET,
    SLACK_TOKEN,
    TELEGRAM_SECRET,
    TELEGRAM_TOKEN,
    WAIT_MS,
    WEB_SECRET,
    WebService,
    _safe_name,
    shoot,
    web_config,
)

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


# -- the server ----------------------------------------------------------------------------------


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
