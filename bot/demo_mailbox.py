"""`signoff demo`'s mailbox: an SMTP server on loopback (aiosmtpd, in the demo's own event
loop) that keeps every message signoff's email surface sends, and two pages on the demo
agent's port to read them: `/mailbox` lists them, `/mailbox/N` shows one as its recipient
would see it (its HTML part, whose decision links work like any mail client's).

Nothing leaves the machine: the demo config points `[email]` at this server.
"""

from __future__ import annotations

import asyncio
import email
import email.policy
import html
import socket
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Any

from aiohttp import web
from aiosmtpd.smtp import SMTP, Envelope, Session

MAILBOX_PATH = "/mailbox"
_KEPT = 200  # the newest messages, for a demo that runs for days


@dataclass
class Mailbox:
    messages: list[tuple[list[str], EmailMessage]] = field(default_factory=list)
    server: asyncio.AbstractServer | None = None

    # -- SMTP (aiosmtpd's handler hook) ------------------------------------------------------

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        raw = envelope.original_content or envelope.content
        if not isinstance(raw, bytes):
            return "554 5.6.0 no message"
        message = email.message_from_bytes(raw, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        self.messages.append((list(envelope.rcpt_tos), message))
        del self.messages[:-_KEPT]
        return "250 Message accepted for delivery"

    async def start(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(
            lambda: SMTP(self, hostname="mailbox.demo"), sock=sock
        )

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    # -- the pages ---------------------------------------------------------------------------

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get(MAILBOX_PATH, self.index)
        app.router.add_get(MAILBOX_PATH + "/{n:[0-9]+}", self.message)

    async def index(self, request: web.Request) -> web.Response:
        rows = "".join(
            f'<li><a href="{MAILBOX_PATH}/{n}">{_text(m["Subject"])}</a> '
            f"<small>to {_text(', '.join(to))}, {_text(m['Date'])}</small></li>"
            for n, (to, m) in reversed(list(enumerate(self.messages)))
        )
        body = f"<ul>{rows}</ul>" if rows else "<p>No mail yet.</p>"
        return _page("signoff demo mailbox", f"<h1>Demo mailbox</h1>{body}")

    async def message(self, request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        if n >= len(self.messages):
            raise web.HTTPNotFound(text="no such message")
        to, message = self.messages[n]
        part = message.get_body(preferencelist=("html", "plain"))
        content = str(part.get_content()) if part is not None else ""
        if part is None or part.get_content_subtype() != "html":
            content = f"<pre>{_text(content)}</pre>"
        head = (
            f'<p><a href="{MAILBOX_PATH}">All mail</a> · to {_text(", ".join(to))} · '
            f"{_text(message['Subject'])}</p><hr>"
        )
        # The HTML part is signoff's own rendering of the card (agent text escaped there).
        return web.Response(text=head + content, content_type="text/html")


def _text(value: Any) -> str:
    return html.escape(str(value or ""))


def _page(title: str, body: str) -> web.Response:
    text = f"<!doctype html><meta charset=utf-8><title>{title}</title>{body}"
    return web.Response(text=text, content_type="text/html")
