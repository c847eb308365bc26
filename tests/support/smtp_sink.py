"""A real SMTP server on a loopback port for the email tests: aiosmtpd's protocol in the
test's own event loop (no thread), keeping every message it accepts, parsed with the
standard library's `email` package, and answering with a refusal when a test asks for one
(a 5xx or 4xx at RCPT or at DATA), as a real mail server words them.
"""

from __future__ import annotations

import asyncio
import email
import email.policy
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Any, Literal

from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

Stage = Literal["rcpt", "data"]


@dataclass
class Received:
    """One accepted message: the envelope and the parsed message."""

    mail_from: str
    rcpt_to: list[str]
    message: EmailMessage

    def part(self, subtype: str) -> str:
        """The text of the message's text/`subtype` part (plain or html)."""
        body = self.message.get_body(preferencelist=(subtype,))
        assert body is not None and body.get_content_subtype() == subtype, self.message
        return str(body.get_content())


@dataclass
class SmtpSink:
    host: str
    port: int
    received: list[Received] = field(default_factory=list)
    # Refusals to give, in order, each once: (stage, reply line).
    refusals: list[tuple[Stage, str, str | None]] = field(default_factory=list)
    credentials: tuple[str, str] | None = None
    sessions: int = 0

    def refuse_next(self, reply: str, stage: Stage = "rcpt", to: str | None = None) -> None:
        """Answer the next command of `stage` with `reply`: of any message, or (`to`) the
        next one addressed to that recipient (the outbox sends several cards at once, in no
        fixed order)."""
        self.refusals.append((stage, reply, to))

    def to(self, address: str) -> list[Received]:
        return [r for r in self.received if address in r.rcpt_to]

    def _refusal(self, stage: Stage, addresses: list[str]) -> str | None:
        if self.refusals and self.refusals[0][0] == stage:
            to = self.refusals[0][2]
            if to is None or to in addresses:
                return self.refusals.pop(0)[1]
        return None

    # -- aiosmtpd's handler hooks ------------------------------------------------------------

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: Any
    ) -> str:
        refusal = self._refusal("rcpt", [address])
        if refusal is not None:
            return refusal
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        refusal = self._refusal("data", list(envelope.rcpt_tos))
        if refusal is not None:
            return refusal
        raw = envelope.original_content or envelope.content
        assert isinstance(raw, bytes)
        message = email.message_from_bytes(raw, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        self.received.append(Received(str(envelope.mail_from), list(envelope.rcpt_tos), message))
        return "250 Message accepted for delivery"

    def authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        ok = isinstance(data, LoginPassword) and self.credentials == (
            data.login.decode(),
            data.password.decode(),
        )
        # handled=False: aiosmtpd answers the refusal (535) itself.
        return AuthResult(success=ok, handled=False)


@asynccontextmanager
async def smtp_sink(credentials: tuple[str, str] | None = None) -> AsyncIterator[SmtpSink]:
    """An SMTP server on 127.0.0.1 (a free port) for the duration of the block; with
    `credentials`, it offers AUTH (without TLS: loopback only) and accepts only those."""
    sink = SmtpSink("127.0.0.1", 0, credentials=credentials)

    def protocol() -> SMTP:
        sink.sessions += 1
        return SMTP(
            sink,
            hostname="mx.test",
            authenticator=sink.authenticate if credentials else None,
            auth_require_tls=False,
        )

    server = await asyncio.get_running_loop().create_server(protocol, "127.0.0.1", 0)
    sink.port = server.sockets[0].getsockname()[1]
    try:
        yield sink
    finally:
        server.close()
        await server.wait_closed()


@contextmanager
def smtp_sink_in_thread() -> Iterator[SmtpSink]:
    """The sink on an event loop of its own, in a daemon thread (for the browser tests,
    which drive a `signoff serve` subprocess from plain synchronous code)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="smtp-sink", daemon=True)
    thread.start()
    running = smtp_sink()
    try:
        sink = asyncio.run_coroutine_threadsafe(running.__aenter__(), loop).result(timeout=10)
        yield sink
    finally:
        try:
            closing = running.__aexit__(None, None, None)
            asyncio.run_coroutine_threadsafe(closing, loop).result(timeout=10)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
            if not thread.is_alive():
                loop.close()


def wait_for_mail(
    sink: SmtpSink, address: str, count: int = 1, timeout: float = 10
) -> list[Received]:
    """The mails to `address` once there are `count` of them (the server's outbox sends
    them a moment after the change); AssertionError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while len(sink.to(address)) < count:
        assert time.monotonic() < deadline, f"{len(sink.to(address))} mail(s) to {address}"
        time.sleep(0.02)
    return sink.to(address)
