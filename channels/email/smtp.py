"""Sending mail through the configured SMTP server (aiosmtplib), and what its answers mean
to the outbox.

One connection per message: a card or a reply is a few a minute at most, and a connection
held open would go stale behind the server's idle timeout. The server's refusals are sorted
as the outbox needs them: a permanent one (5xx: no such mailbox, relaying denied, bad
credentials) ends the job as dead with the server's words; a temporary one (4xx: mailbox
busy, greylisting), a refused connection or a timeout is tried again with backoff.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from email.message import EmailMessage

import aiosmtplib

from bot.durations import parse_duration
from bot.errors import ConfigError, DeliveryFailed, Undeliverable
from channels.email.config import EmailConfig


def smtp_credentials(
    table: EmailConfig, environ: Mapping[str, str] = os.environ
) -> tuple[str, str] | None:
    """The user name and password to AUTH with, or None without `username_env`; ConfigError
    at startup naming each variable that is unset."""
    if table.username_env is None:
        return None
    names = (table.username_env, table.password_env)
    missing = [name for name in names if not environ.get(name)]
    if missing:
        raise ConfigError(
            f"[email] username_env is set but ${', $'.join(missing)} not set; set the SMTP "
            "credentials, or remove username_env to send without AUTH"
        )
    return environ[names[0]], environ[names[1]]


def _client(table: EmailConfig, credentials: tuple[str, str] | None) -> aiosmtplib.SMTP:
    username, password = credentials if credentials is not None else (None, None)
    return aiosmtplib.SMTP(
        hostname=table.host,
        port=table.smtp_port,
        username=username,
        password=password,
        use_tls=table.security == "tls",
        # True: STARTTLS or nothing (a server that does not offer it is refused, never
        # written to in the clear); False: never.
        start_tls=table.security == "starttls",
        timeout=parse_duration(table.timeout).total_seconds(),
    )


async def send(
    table: EmailConfig, message: EmailMessage, credentials: tuple[str, str] | None
) -> None:
    """Send one message; Undeliverable on a permanent refusal, DeliveryFailed otherwise."""
    try:
        async with _client(table, credentials) as smtp:
            await smtp.send_message(message)
    except aiosmtplib.SMTPRecipientsRefused as exc:
        [first, *_] = exc.recipients
        raise _refused(first.code, first.message, f"refused {first.recipient}") from exc
    except aiosmtplib.SMTPResponseException as exc:
        raise _refused(exc.code, exc.message, "refused the message") from exc
    except (aiosmtplib.SMTPException, OSError) as exc:
        raise DeliveryFailed(f"SMTP server {_where(table)}: {exc}") from exc


def _refused(code: int, text: str, what: str) -> DeliveryFailed:
    words = f"the SMTP server {what}: {code} {text}".strip()
    if 500 <= code < 600:
        # Asking again gets the same answer until a person acts (fixes the address, the
        # credentials, the relay permission): dead at once, with the code as its reason.
        return Undeliverable(words, reason=f"smtp_{code}")
    return DeliveryFailed(words)


def _where(table: EmailConfig) -> str:
    return f"{table.host}:{table.smtp_port}"


async def probe(table: EmailConfig, environ: Mapping[str, str] = os.environ) -> str | None:
    """What sending would meet, step by step (connect and EHLO, STARTTLS, AUTH), without
    sending anything; None when every step passes, else the step that failed and why."""
    try:
        credentials = smtp_credentials(table, environ)
    except ConfigError as exc:
        return exc.message
    smtp = _client(table, None)
    step = f"connecting to {_where(table)} ({table.security})"
    try:
        await smtp.connect()  # EHLO, and STARTTLS when security = "starttls"
        if credentials is not None:
            step = f"AUTH as {credentials[0]} at {_where(table)}"
            await smtp.login(*credentials)
        await smtp.quit()
    except (aiosmtplib.SMTPException, OSError) as exc:
        smtp.close()
        return f"{step} failed: {exc}"
    return None
