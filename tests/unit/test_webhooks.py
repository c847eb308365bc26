"""Decision webhooks as the Standard Webhooks specification defines them (docs/reference.md,
"Decision webhooks"): the headers, the signature recomputed here from the specification's text,
verification by the specification's own library and by signoff_client, secret rotation, and
refusals; then the outbox's backoff schedule."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from bot.outbox.runner import OutboxSettings, backoff
from bot.outbox.webhooks import body_bytes, secret_problem, signed_headers
from signoff_client import BadWebhookSignature, new_secret, verify_webhook
from signoff_client.webhooks import secret_problem as client_secret_problem
from tests.support.samples import standard_webhook_signature

OLD = "whsec_MfKQ9r8GKYqrTYlQX7VZ1h0QkCBqRy1n0eBd9CWr0ds="
NEW = "whsec_" + base64.b64encode(bytes(range(32))).decode()


def now() -> datetime:
    return datetime.now(UTC)


def test_headers_and_signature_follow_the_specification() -> None:
    body = body_bytes({"b": 1, "a": "é"})
    assert body == '{"a":"é","b":1}'.encode()  # RFC 8785: sorted keys, no spaces, UTF-8
    at = datetime(2026, 6, 1, 12, 0, 5, 900_000, tzinfo=UTC)
    headers = signed_headers([OLD], "abc.2", body, at)
    assert headers["webhook-id"] == "abc.2"
    assert headers["webhook-timestamp"] == str(int(at.timestamp()))  # whole seconds
    assert headers["webhook-signature"] == standard_webhook_signature(
        OLD, "abc.2", int(at.timestamp()), body
    )


def test_the_specifications_library_and_the_client_verify_a_signed_webhook() -> None:
    body = body_bytes({"event": "approved", "approval": {"id": "a-1"}})
    headers = signed_headers([NEW], "a-1.3", body, now())
    assert Webhook(NEW).verify(body, headers) == {"event": "approved", "approval": {"id": "a-1"}}
    assert verify_webhook(headers, body, NEW) == "a-1.3"
    upper = {k.upper(): v for k, v in headers.items()}  # header names are case-insensitive
    assert verify_webhook(upper, body, NEW) == "a-1.3"


def test_while_rotating_both_secrets_sign_and_either_verifies() -> None:
    body = b'{"x":1}'
    headers = signed_headers([OLD, NEW], "d.1", body, now())
    assert len(headers["webhook-signature"].split(" ")) == 2
    for secret in (OLD, NEW):
        Webhook(secret).verify(body, headers)  # a receiver on either secret accepts it
        assert verify_webhook(headers, body, secret) == "d.1"
    assert verify_webhook(headers, body, [new_secret(), NEW]) == "d.1"
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(body, headers)
    with pytest.raises(BadWebhookSignature, match="does not verify"):
        verify_webhook(headers, body, new_secret())


@pytest.mark.parametrize(
    ("change", "signed_at"),
    [
        (lambda h, b: (h.pop("webhook-signature"), b), 0),
        (lambda h, b: (h.update({"webhook-id": "d.2"}), b), 0),
        (lambda h, b: (None, b + b" "), 0),
        (lambda h, b: (h.update({"webhook-timestamp": "soon"}), b), 0),
        (lambda h, b: (None, b), -301),  # a replay from beyond the five-minute window
        (lambda h, b: (None, b), +301),
        (lambda h, b: (h.update({"webhook-signature": "v1,é"}), b), 0),
    ],
    ids=["no signature", "other id", "altered body", "bad timestamp", "old", "future", "odd"],
)
def test_tampering_and_replays_are_refused(change: object, signed_at: int) -> None:
    body = b'{"x":1}'
    headers = signed_headers([NEW], "d.1", body, now() + timedelta(seconds=signed_at))
    _, body = change(headers, body)  # type: ignore[operator]
    with pytest.raises(BadWebhookSignature):
        verify_webhook(headers, body, NEW)


@pytest.mark.parametrize(
    ("secret", "problem"),
    [
        ("dev-secret", "does not start with whsec_"),
        ("whsec_not base64!", "not base64"),
        ("whsec_" + base64.b64encode(b"short").decode(), "5 bytes"),
    ],
)
def test_a_secret_no_receiver_could_rebuild_is_refused(secret: str, problem: str) -> None:
    assert problem in (secret_problem(secret) or "")
    assert secret_problem(secret) == client_secret_problem(secret)
    with pytest.raises(BadWebhookSignature, match=problem):
        verify_webhook({}, b"{}", secret)


def test_a_new_secret_is_usable_and_fresh() -> None:
    assert secret_problem(new_secret()) is None
    assert new_secret() != new_secret()


def test_backoff_doubles_up_to_the_cap_with_jitter_between_half_and_all() -> None:
    settings = OutboxSettings(backoff_base=timedelta(seconds=2), backoff_max=timedelta(seconds=60))
    top = [backoff(n, settings, lambda: 1.0).total_seconds() for n in range(1, 8)]
    assert top == [2, 4, 8, 16, 32, 60, 60]
    bottom = [backoff(n, settings, lambda: 0.0).total_seconds() for n in range(1, 8)]
    assert bottom == [1, 2, 4, 8, 16, 30, 30]
