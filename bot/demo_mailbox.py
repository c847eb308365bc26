"""`signoff demo`'s mailbox: an SMTP server on loopback (aiosmtpd, in the demo's own event
loop) that keeps every message signoff's email surface sends, and two pages on the demo
agent's port to read them: `/mailbox` lists them, `/mailbox/N` shows one as its recipient
would see it (its HTML part, whose decision links work like any mail client's).

Nothing leaves the machine: the demo config points `[email]` at this server. The list wears
the web surface's stylesheet (linked from the demo's server), so it looks like the inbox it
sits beside; a message is shown as its mail, with only a bar above it to go back.
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
    # The web pages' stylesheet (its URL on the demo's server), which the list links.
    stylesheet: str | None = None
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
        # One card per mail, newest first, in the inbox's own classes (signoff.css).
        rows = "".join(
            f'<article class="card summary-card"><h2><a href="{MAILBOX_PATH}/{n}">'
            f'{_text(m["Subject"])}</a></h2><p class="meta"><span>to {_text(", ".join(to))}'
            f"</span><span>{_text(m['Date'])}</span></p></article>"
            for n, (to, m) in reversed(list(enumerate(self.messages)))
        )
        count = len(self.messages)
        body = (
            f'<div class="inbox mailbox">{rows}</div>'
            if rows
            else '<p class="empty">No mail yet.</p>'
        )
        main = (
            "<h1>Demo mailbox</h1>"
            f'<p class="lede">{count} {"mail" if count == 1 else "mails"} the demo\'s email '
            "surface sent, newest first. Nothing leaves this machine; each card's links "
            "work as in any mail client.</p>" + body
        )
        return self._page("Demo mailbox", main)

    async def message(self, request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        if n >= len(self.messages):
            raise web.HTTPNotFound(text="no such message")
        to, message = self.messages[n]
        part = message.get_body(preferencelist=("html", "plain"))
        content = str(part.get_content()) if part is not None else ""
        if part is None or part.get_content_subtype() != "html":
            content = f"<pre>{_text(content)}</pre>"
        # Inline style only: the mail below keeps its own look, as a mail client shows it.
        head = (
            '<p style="font-family:system-ui,sans-serif;margin:0 0 12px;padding:10px 16px;'
            'background:#f4f6f9;border-bottom:1px solid #d9dde5">'
            f'<a href="{MAILBOX_PATH}">All mail</a> · to {_text(", ".join(to))} · '
            f"{_text(message['Subject'])}</p>"
        )
        # The HTML part is signoff's own rendering of the card (agent text escaped there).
        return web.Response(text=head + content, content_type="text/html")

    def _page(self, title: str, main: str) -> web.Response:
        sheet = self.stylesheet
        link = f'<link rel="stylesheet" href="{_text(sheet)}">' if sheet else ""
        text = (
            '<!doctype html><html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<title>{title} · signoff demo</title><link rel="icon" href="data:,">{link}'
            '</head><body><header class="top"><span class="brand">signoff demo</span>'
            f'</header><main id="main">{main}</main></body></html>'
        )
        return web.Response(text=text, content_type="text/html")


def _text(value: Any) -> str:
    return html.escape(str(value or ""))
