"""Verifying signoff's decision webhooks, which follow the Standard Webhooks specification
(https://www.standardwebhooks.com): `webhook-id` (the delivery id, stable across retries:
dedupe on it), `webhook-timestamp` (unix seconds of this attempt) and `webhook-signature`
(`v1,<base64 HMAC-SHA256 of "id.timestamp.body">`, several separated by spaces while a secret
is being rotated), keyed by a `whsec_<base64>` secret. Any receiver can verify them with that
specification's library for its language; this is the Python one.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from collections.abc import Iterable, Mapping

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from signoff_client.errors import BadWebhookSignature

PREFIX = "whsec_"


def new_secret() -> str:
    """A fresh webhook secret: `whsec_` and 32 random bytes in base64."""
    return PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def secret_problem(secret: str) -> str | None:
    """Why `secret` is not a usable Standard Webhooks secret, or None when it is."""
    if not secret.startswith(PREFIX):
        return "it does not start with whsec_ (make one with `signoff webhook-secret`)"
    try:
        key = base64.b64decode(secret[len(PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        return "what follows whsec_ is not base64"
    if len(key) < 24:
        return f"its key is {len(key)} bytes; Standard Webhooks asks for 24 to 64"
    return None


def verify_webhook(headers: Mapping[str, str], body: bytes, secret: str | Iterable[str]) -> str:
    """Verify a decision webhook as received (its headers and the raw body bytes, before any
    JSON parsing); returns the delivery id (`webhook-id`) to dedupe on.

    `secret` may be several secrets while you rotate yours: the webhook verifies if it is
    signed by any of them. Raises BadWebhookSignature when a header is missing, the timestamp
    is more than five minutes from now (the specification's window against replays), or no
    signature matches."""
    candidates = [secret] if isinstance(secret, str) else list(secret)
    reasons = []
    for candidate in candidates:
        problem = secret_problem(candidate)
        if problem is not None:
            raise BadWebhookSignature(f"the webhook secret is unusable: {problem}")
        try:
            Webhook(candidate).verify(body, dict(headers), json_parse=False)
        except (WebhookVerificationError, ValueError, UnicodeDecodeError, binascii.Error) as exc:
            reasons.append(str(exc) or type(exc).__name__)
            continue
        return {k.lower(): v for k, v in headers.items()}["webhook-id"]
    raise BadWebhookSignature(f"webhook does not verify: {'; '.join(reasons) or 'no secret'}")
