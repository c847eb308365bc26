"""Signed decision webhooks (the contract: docs/reference.md, "Decision webhooks").

Headers: `Signoff-Delivery` (stable across retries of one event), `Signoff-Timestamp` (unix
seconds of this attempt) and `Signoff-Signature: v1=<hex HMAC-SHA256(secret,
"{timestamp}.{delivery}.{raw body}")>`. The body bytes are the RFC 8785 form of the body
stored with the job, so every retry of a delivery carries the same bytes. Receivers verify
with `verify()` (also exported by bot.client) and dedupe on the delivery id.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from collections.abc import Mapping
from typing import Any

import aiohttp

from bot.canonical import canonical_json
from bot.clock import Clock
from bot.destinations import GuardedResolver, url_problem
from bot.errors import BadWebhookSignature, DeliveryFailed, RetryLater, Undeliverable
from bot.metrics import Metrics
from bot.routing import Directory
from store.records import OutboxJob

DELIVERY = "Signoff-Delivery"
TIMESTAMP = "Signoff-Timestamp"
SIGNATURE = "Signoff-Signature"
DEFAULT_TOLERANCE = 300
_ANSWER_BYTES = 2048


def body_bytes(body: Any) -> bytes:
    return canonical_json(body)


def signature(secret: str, timestamp: int, delivery: str, body: bytes) -> str:
    # surrogateescape: a received header with odd bytes must fail to verify, not crash.
    signed = f"{timestamp}.{delivery}.".encode("utf-8", "surrogateescape") + body
    return "v1=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def signed_headers(
    secret: str, delivery: str, body: bytes, now: float | None = None
) -> dict[str, str]:
    timestamp = int(time.time() if now is None else now)
    return {
        "Content-Type": "application/json",
        DELIVERY: delivery,
        TIMESTAMP: str(timestamp),
        SIGNATURE: signature(secret, timestamp, delivery, body),
    }


def _header(headers: Mapping[str, str], name: str) -> str:
    for key, value in headers.items():
        if key.lower() == name.lower():
            return value
    raise BadWebhookSignature(f"missing {name} header")


def verify(
    headers: Mapping[str, str],
    body: bytes,
    secret: str,
    tolerance: int = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> str:
    """Check a received webhook; returns its delivery id (dedupe on it).

    Raises BadWebhookSignature when a header is missing, the timestamp is further than
    `tolerance` seconds from now (a replay), or no `v1=` signature matches (a signature header
    may carry several, comma-separated, while a secret is being rotated).
    """
    delivery = _header(headers, DELIVERY)
    raw_timestamp = _header(headers, TIMESTAMP)
    try:
        timestamp = int(raw_timestamp)
    except ValueError:
        raise BadWebhookSignature(f"{TIMESTAMP} is not unix seconds: {raw_timestamp!r}") from None
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance:
        raise BadWebhookSignature(
            f"{TIMESTAMP} is {int(current - timestamp)} s from now; the window is {tolerance} s"
        )
    expected = signature(secret, timestamp, delivery, body)
    offered = [part.strip() for part in _header(headers, SIGNATURE).split(",")]
    wanted = expected.encode()
    if not any(
        hmac.compare_digest(wanted, candidate.encode("utf-8", "surrogateescape"))
        for candidate in offered
    ):
        raise BadWebhookSignature("signature does not match (wrong secret or altered body)")
    return delivery


class WebhookSender:
    """The outbox handler for `webhook` jobs: POST the stored body, signed with the tenant's
    secret. Anything but a 2xx is a failed attempt (retried with backoff by the runner).

    A request's own `callback_url` goes through a session whose resolver connects to public
    addresses only (bot.destinations), unless its tenant allows private callbacks; the
    tenant's configured `webhook_url` goes through `session` as configured."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        directory: Directory,
        clock: Clock,
        *,
        timeout: float = 10.0,
        metrics: Metrics | None = None,
        environ: Mapping[str, str] = os.environ,
    ) -> None:
        self.session = session
        self.directory = directory
        self.clock = clock
        self.timeout = timeout
        self.metrics = metrics
        self.environ = environ
        self._guarded: aiohttp.ClientSession | None = None

    def _secret(self, tenant_name: str) -> str:
        tenant = self.directory.tenants.get(tenant_name)
        variable = tenant.webhook_secret_env if tenant else None
        secret = self.environ.get(variable) if variable else None
        if not secret:
            where = f"${variable} is not set" if variable else "it has no webhook_secret_env"
            raise DeliveryFailed(
                f"cannot sign webhooks for tenant {tenant_name!r}: {where}; unsigned webhooks "
                "are never sent"
            )
        return secret

    async def __call__(self, job: OutboxJob) -> None:
        payload = job.payload
        tenant = str(payload["tenant"])
        try:
            await self._post(payload, tenant)
        except Exception:
            if self.metrics is not None:
                self.metrics.webhook_failures.labels(tenant).inc()
            raise

    def _session_for(self, url: str, tenant_name: str) -> aiohttp.ClientSession:
        """The tenant's own webhook_url is trusted config; anything else is a callback_url
        the agent chose."""
        tenant = self.directory.tenants.get(tenant_name)
        if tenant is not None and url == tenant.webhook_url:
            return self.session
        allowed = tenant is not None and tenant.allow_private_callbacks
        problem = url_problem(url, allow_private=allowed)
        if problem is not None:
            raise Undeliverable(f"callback_url {url} cannot be called back: {problem}")
        if allowed:
            return self.session
        if self._guarded is None:
            self._guarded = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(resolver=GuardedResolver())
            )
        return self._guarded

    async def close(self) -> None:
        """Close the session this sender opened for callbacks (`session` is the caller's)."""
        if self._guarded is not None:
            await self._guarded.close()
            self._guarded = None

    async def _post(self, payload: Mapping[str, Any], tenant: str) -> None:
        url = str(payload["url"])
        session = self._session_for(url, tenant)
        body = body_bytes(payload["body"])
        headers = signed_headers(
            self._secret(tenant), str(payload["delivery_id"]), body, self.clock.now().timestamp()
        )
        # A receiver that does not even accept the connection is given up on early.
        timeout = aiohttp.ClientTimeout(total=self.timeout, sock_connect=min(self.timeout, 3.0))
        async with session.post(
            url, data=body, headers=headers, timeout=timeout, allow_redirects=False
        ) as response:
            if 200 <= response.status < 300:
                return
            # A receiver's answer is read no further than what the error message shows: an
            # error page of any size costs the server a few KB, never its size.
            text = (await response.content.read(_ANSWER_BYTES)).decode("utf-8", "replace")[:200]
            message = f"{url} answered HTTP {response.status}: {text}"
            if response.status in (429, 503):
                raise RetryLater.after(message, response.headers.get("Retry-After"))
            raise DeliveryFailed(message)
