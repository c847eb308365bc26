"""Webhook signatures as docs/reference.md specifies them, the backoff schedule, and the SDK's
rebuilding of server errors into signoff's own classes."""

from __future__ import annotations

import hashlib
import hmac
from datetime import timedelta

import pytest

from bot.client import verify_webhook
from bot.errors import (
    ApprovalExpired,
    BadWebhookSignature,
    InvalidRequest,
    NotAnApprover,
    NotPending,
    SignoffError,
    Unauthorized,
    error_from_code,
)
from bot.outbox.runner import OutboxSettings, backoff
from bot.outbox.webhooks import body_bytes, signed_headers

NOW = 1_780_000_000


def test_signature_is_hmac_sha256_over_timestamp_delivery_and_raw_body() -> None:
    body = body_bytes({"b": 1, "a": "é"})
    assert body == '{"a":"é","b":1}'.encode()  # RFC 8785: sorted keys, no spaces, UTF-8
    headers = signed_headers("s3cret", "abc.2", body, now=NOW)
    expected = hmac.new(b"s3cret", f"{NOW}.abc.2.".encode() + body, hashlib.sha256).hexdigest()
    assert headers["Signoff-Signature"] == f"v1={expected}"
    assert headers["Signoff-Timestamp"] == str(NOW)
    assert headers["Signoff-Delivery"] == "abc.2"


def test_verify_accepts_any_matching_signature_and_header_case() -> None:
    body = b'{"x":1}'
    headers = {k.lower(): v for k, v in signed_headers("new", "d.1", body, now=NOW).items()}
    old = signed_headers("old", "d.1", body, now=NOW)["Signoff-Signature"]
    headers["signoff-signature"] = f"{old}, {headers['signoff-signature']}"  # rotation
    assert verify_webhook(headers, body, "new", now=NOW + 299) == "d.1"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda h: h.pop("Signoff-Signature"), "missing Signoff-Signature"),
        (lambda h: h.update({"Signoff-Delivery": "d.2"}), "does not match"),
        (lambda h: h.update({"Signoff-Timestamp": "soon"}), "unix seconds"),
        (lambda h: h.update({"Signoff-Timestamp": str(NOW - 301)}), "window"),
    ],
)
def test_verify_refuses_tampering_and_replays(change: object, message: str) -> None:
    body = b'{"x":1}'
    headers = signed_headers("k", "d.1", body, now=NOW)
    change(headers)  # type: ignore[operator]
    with pytest.raises(BadWebhookSignature, match=message):
        verify_webhook(headers, body, "k", now=NOW)


def test_backoff_doubles_up_to_the_cap_with_jitter_between_half_and_all() -> None:
    settings = OutboxSettings(backoff_base=timedelta(seconds=2), backoff_max=timedelta(seconds=60))
    top = [backoff(n, settings, lambda: 1.0).total_seconds() for n in range(1, 8)]
    assert top == [2, 4, 8, 16, 32, 60, 60]
    bottom = [backoff(n, settings, lambda: 0.0).total_seconds() for n in range(1, 8)]
    assert bottom == [1, 2, 4, 8, 16, 30, 30]


@pytest.mark.parametrize(
    ("code", "details", "cls"),
    [
        ("not_pending", {"state": "executing"}, NotPending),
        ("expired", {"state": "expired"}, ApprovalExpired),
        ("invalid_request", {"fields": [{"field": "run_id", "message": "x"}]}, InvalidRequest),
        ("not_an_approver", {"assignee": "group finance"}, NotAnApprover),
        ("unauthorized", {}, Unauthorized),
    ],
)
def test_server_errors_come_back_as_the_same_classes(
    code: str, details: dict[str, object], cls: type[SignoffError]
) -> None:
    error = error_from_code(code, "because", details)
    assert type(error) is cls
    assert (error.code, error.message) == (code, "because")
    if isinstance(error, NotPending):
        assert error.state == details["state"]
    if isinstance(error, InvalidRequest):
        assert error.fields == details["fields"]


def test_an_unknown_code_stays_visible() -> None:
    error = error_from_code("rate_limited", "slow down", {})
    assert type(error) is SignoffError
    assert error.code == "rate_limited"


@pytest.mark.parametrize(
    ("header", "value"),
    [("Signoff-Signature", "v1=é"), ("Signoff-Delivery", "d.\udcff")],
    ids=["non-ASCII signature", "undecodable delivery id"],
)
def test_odd_header_text_is_a_bad_signature_not_a_crash(header: str, value: str) -> None:
    headers = signed_headers("k", "d.1", b"{}", now=NOW)
    headers[header] = value
    with pytest.raises(BadWebhookSignature):
        verify_webhook(headers, b"{}", "k", now=NOW)
