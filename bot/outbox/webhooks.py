"""Signed decision webhooks (the contract: docs/reference.md, "Decision webhooks").

They follow the Standard Webhooks specification, signed with its own library
(`standardwebhooks`), so a receiver in any language verifies them with that specification's
library: `webhook-id` (the delivery id, stable across retries of one event), `webhook-timestamp`
(unix seconds of this attempt) and `webhook-signature` (`v1,<base64 HMAC-SHA256 of
"id.timestamp.body">`, one per secret while a tenant rotates its secret, separated by spaces).
The body bytes are the RFC 8785 form of the body stored with the job, so every retry of a
delivery carries the same bytes. Agents verify with `signoff_client.verify_webhook`.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import aiohttp
from standardwebhooks.webhooks import Webhook

from bot.canonical import canonical_json
from bot.clock import Clock
from bot.destinations import GuardedResolver, url_problem
from bot.errors import DeliveryFailed, RetryLater, Undeliverable
from bot.metrics import Metrics
from bot.routing import Directory
from store.records import OutboxJob

ID = "webhook-id"
TIMESTAMP = "webhook-timestamp"
SIGNATURE = "webhook-signature"
SECRET_PREFIX = "whsec_"
_ANSWER_BYTES = 2048


def body_bytes(body: Any) -> bytes:
    return canonical_json(body)


def secret_problem(secret: str) -> str | None:
    """Why `secret` cannot sign Standard Webhooks, or None. A receiver's library decodes the
    base64 after `whsec_`, so anything else would sign with a key no receiver can rebuild."""
    if not secret.startswith(SECRET_PREFIX):
        return "it does not start with whsec_ (make one with `signoff webhook-secret`)"
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        return "what follows whsec_ is not base64"
    if len(key) < 24:
        return f"its key is {len(key)} bytes; Standard Webhooks asks for 24 to 64"
    return None


def signed_headers(
    secrets: Sequence[str], delivery: str, body: bytes, now: datetime
) -> dict[str, str]:
    """The Standard Webhooks headers for one attempt, signed with every secret given."""
    text = body.decode("utf-8")  # canonical JSON is UTF-8 by construction
    signatures = [Webhook(secret).sign(delivery, now, text) for secret in secrets]
    return {
        "Content-Type": "application/json",
        ID: delivery,
        TIMESTAMP: str(int(now.timestamp())),
        SIGNATURE: " ".join(signatures),
    }


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

    def _secrets(self, tenant_name: str) -> list[str]:
        """The tenant's signing secrets (two while rotating); a job that cannot be signed
        fails rather than going out unsigned."""
        tenant = self.directory.tenants.get(tenant_name)
        variables = tenant.webhook_secret_env if tenant else ()
        if not variables:
            raise DeliveryFailed(
                f"cannot sign webhooks for tenant {tenant_name!r}: it has no webhook_secret_env; "
                "unsigned webhooks are never sent"
            )
        secrets = []
        for variable in variables:
            secret = self.environ.get(variable)
            problem = "it is not set" if not secret else secret_problem(secret)
            if problem is not None:
                raise DeliveryFailed(
                    f"cannot sign webhooks for tenant {tenant_name!r}: ${variable}: {problem}; "
                    "unsigned webhooks are never sent"
                )
            secrets.append(secret)
        return secrets

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
            self._secrets(tenant), str(payload["delivery_id"]), body, self.clock.now()
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
