"""Screenshots of the web surface for the README, made from `signoff demo`.

Runs `signoff demo` (this checkout's code) on a free port, opens its sign-in links in
Debian's Chromium through Playwright (no browser download), and saves:

- docs/img/inbox.png: Bob's inbox, the demo's five pending requests (four tool calls, each
  with its arguments folded and a box for the bulk decision under the list, and a question);
- docs/img/approval.png: the refund's page on a desktop (1280x800, the first screen):
  Approve and Reject under the card, every other way to decide folded below them;
- docs/img/approval-phone.png: the same page on a phone-sized screen (390x844);
- docs/img/mailbox.png: the demo's mailbox, the cards finance got by mail;
- docs/img/dashboard.png: Alice's operator dashboard, after Bob approved the migration in
  the browser (so a web decision is among the recent ones).

Usage: .venv/bin/python scripts/screenshots.py [--out docs/img] [--chromium /usr/bin/chromium]
Needs the test extras (`pip install -e '.[test]'`, for Playwright) and `apt-get install
chromium`.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from playwright.sync_api import Browser, Page, expect, sync_playwright

REPO = Path(__file__).resolve().parents[1]
DESKTOP = {"width": 1200, "height": 900}
PAGE = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
# What the demo's story leaves pending for Bob (bot/demo.py), soonest deadline first or not.
PENDING = 5
REFUND = "Refund €120.00 to Zoë Martin"
START_TIMEOUT = 60.0


class Demo:
    """`signoff demo --listen 127.0.0.1:0` in a temporary working directory."""

    def __init__(self) -> None:
        self.cwd = tempfile.TemporaryDirectory(prefix="signoff-screenshots-")
        env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "demo", "--listen", "127.0.0.1:0"],
            cwd=self.cwd.name,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )
        self.output = ""
        self._ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output += line
            if "Ctrl-C stops the demo" in line:
                self._ready.set()
        self._ready.set()

    def link(self, role: str) -> str:
        if not self._ready.wait(START_TIMEOUT) or self.proc.poll() is not None:
            raise SystemExit(f"signoff demo did not start:\n{self.output}")
        match = re.search(rf"^  {role} .*?(http://\S+/web/login/\S+)", self.output, re.M)
        if match is None:
            raise SystemExit(f"no {role} link in the demo's output:\n{self.output}")
        return match.group(1)

    def mailbox(self) -> str:
        self.link("approver")  # started
        match = re.search(r"^  mailbox   (http://\S+)", self.output, re.M)
        if match is None:
            raise SystemExit(f"no mailbox in the demo's output:\n{self.output}")
        return match.group(1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.cwd.cleanup()


def _signed_in(browser: Browser, link: str, shows: str = "#inbox", **options: object) -> Page:
    page = browser.new_context(**options).new_page()  # type: ignore[arg-type]
    page.goto(link)
    expect(page.locator(shows)).to_be_visible()
    return page


def take(demo: Demo, browser: Browser, out: Path) -> list[Path]:
    saved: list[Path] = []

    def save(page: Page, name: str, *, full_page: bool = True) -> None:
        path = out / name
        page.screenshot(path=str(path), full_page=full_page, animations="disabled")
        saved.append(path)

    bob = _signed_in(browser, demo.link("approver"), viewport=DESKTOP)
    expect(bob.locator("#inbox article.card")).to_have_count(PENDING)
    expect(bob.get_by_role("button", name="Approve selected")).to_be_visible()
    save(bob, "inbox.png")

    page = bob.context.new_page()
    page.set_viewport_size(PAGE)
    page.goto(bob.url)
    page.get_by_role("link", name=REFUND).click()
    expect(page.get_by_role("button", name="Approve", exact=True)).to_be_visible()
    save(page, "approval.png", full_page=False)

    phone = bob.context.new_page()
    phone.set_viewport_size(PHONE)
    phone.goto(page.url)
    expect(phone.get_by_role("button", name="Approve", exact=True)).to_be_visible()
    save(phone, "approval-phone.png")

    mailbox = bob.context.new_page()
    mailbox.set_viewport_size(PAGE)
    mailbox.goto(demo.mailbox())
    expect(mailbox.get_by_role("link", name=re.compile(REFUND)).first).to_be_visible()
    save(mailbox, "mailbox.png", full_page=False)

    # Bob's vote completes the migration's 2 of 3: the dashboard then shows a web decision.
    bob.get_by_role("link", name="Run migration 0042 on orders-prod").click()
    bob.get_by_role("button", name="Approve").click()
    expect(bob.get_by_role("status")).to_be_visible()

    # Her link lands on the dashboard (`?next=/dashboard`).
    alice = _signed_in(browser, demo.link("operator"), "table#pending", viewport=DESKTOP)
    save(alice, "dashboard.png")
    return saved


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "img")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    demo = Demo()
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=args.chromium, headless=True)
            try:
                saved = take(demo, browser, args.out)
            finally:
                browser.close()
    finally:
        demo.stop()
    for path in saved:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
