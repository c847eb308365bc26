"""The email rig: one signoff server in the test's process (tests/support/chat_server.py)
sending through a real SMTP server on loopback (tests/support/smtp_sink.py), its
`public_url` the server's own address so the mailed links lead back to it.
"""

from __future__ import annotations

import copy
import re
import socket
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from bot.app import CORE, build_app
from bot.clock import FakeClock
from bot.config import parse_config
from bot.outbox.jobs import JobKind
from bot.outbox.runner import OutboxRunner, OutboxSettings
from store.repository import Store
from tests.support.chat_server import API_KEY, ChatServer, Cleanup
from tests.support.samples import TEST_CONFIG
from tests.support.smtp_sink import Received, SmtpSink

ADDRESSES = {
    "alice": "alice@example.com",
    "bob": "bob@example.com",
    "sam": "sam@example.com",
    "carol": "carol@example.com",
}
LINK = re.compile(r"https?://[^\s\"<>]+/email/links/[A-Za-z0-9_-]+")


@dataclass
class EmailRig(ChatServer):
    sink: SmtpSink

    def mails_to(self, principal: str) -> list[Received]:
        return self.sink.to(ADDRESSES[principal])

    def links(self, mail: Received) -> dict[str, str]:
        """The mail's decision links by action, read from its plain-text part."""
        found: dict[str, str] = {}
        for line in mail.part("plain").splitlines():
            match = LINK.search(line)
            if match and line.startswith(("Approve", "Reject")):
                found[line.split()[0].lower()] = match.group(0)
        return found


def email_config(sink: SmtpSink, notify: list[str], public_url: str) -> dict[str, Any]:
    """TEST_CONFIG with [email] at the sink, addresses for alice, bob, sam and carol, and
    payments.* and quorum.* cards to `notify`."""
    config = copy.deepcopy(TEST_CONFIG)
    config["tenants"][0]["api_key_env"] = "EMAIL_TEST_API_KEY"
    config["server"] = {"public_url": public_url}
    config["email"] = {
        "host": sink.host,
        "port": sink.port,
        "security": "none",
        "from_address": "signoff@signoff.test",
        "reply_to": "approvals@signoff.test",
        "timeout": "5s",
    }
    for key, address in ADDRESSES.items():
        config["principals"][key]["email"] = address
    config["routes"][0]["notify"] = notify
    config["routes"][2]["notify"] = notify
    return config


async def serve_email(
    sink: SmtpSink,
    store: Store,
    clock: FakeClock,
    cleanup: Cleanup,
    notify: list[str],
    extra: dict[str, Any] | None = None,
) -> EmailRig:
    """Start the application with email on a loopback port it knows before it starts."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    config = parse_config({**email_config(sink, notify, url), **(extra or {})})
    app = build_app(config, store, clock=clock, background=False)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.SockSite(runner, sock).start()

    http = aiohttp.ClientSession()
    cleanup.extend([runner.cleanup, http.close])
    core = app[CORE]
    handlers = core.handlers(kinds=[kind for kind in JobKind if kind != JobKind.WEBHOOK])
    outbox = OutboxRunner(store, handlers, clock, OutboxSettings(), rand=lambda: 1.0)
    return EmailRig(
        url,
        http,
        store,
        clock,
        core.directory,
        outbox,
        API_KEY,
        channels=core.channels,
        app=app,
        sink=sink,
    )
