"""What many tests build requests and records from: the test deployment's config
(`TEST_CONFIG`), a valid create body and its parsed request, a stored approval without a
database, a Standard Webhooks signature worked out by hand, and tampering with a database
behind signoff's back."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text

from bot.intake import ParsedRequest, validate_request
from store.records import Approval, Vote
from store.repository import Store

TEST_CONFIG: dict[str, Any] = {
    "tenants": [
        {"name": "acme", "webhook_url": "http://127.0.0.1:9/hooks"},
        {"name": "globex"},
    ],
    "principals": {
        "alice": {"name": "Alice Ng", "slack": "U0ALICE", "telegram": 111},
        "bob": {"name": "Bob Stone", "slack": "U0BOB", "telegram": 222},
        "carol": {"name": "Carol Diaz"},
        "dave": {"name": "Dave Roe"},
        "sam": {"name": "Sam Requester"},
    },
    "groups": {"finance": {"members": ["alice", "bob", "sam"]}},
    "routes": [
        {
            "tenant": "acme",
            "capability": "payments.*",
            "approvers": ["group:finance"],
            "escalation": [{"after": "24h", "to": "carol"}],
        },
        {
            "tenant": "acme",
            "capability": "contracts.*",
            "approvers": ["alice", "sam"],
            "allow_self_approval": True,
        },
        {
            "tenant": "acme",
            "capability": "quorum.*",
            "approvers": ["alice", "bob", "carol"],
            "required_approvals": 2,
        },
        {"tenant": "globex", "capability": "*", "approvers": ["dave"]},
    ],
}


async def tamper(store: Store, sql: str, **params: Any) -> None:
    """Change the database behind signoff's back with plain SQL, as an intruder or a careless
    operator with database access would."""
    async with store.engine.begin() as conn:
        await conn.execute(text(sql), params)


def standard_webhook_signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """A webhook signature as the Standard Webhooks specification words it, with no library:
    base64 of HMAC-SHA256, keyed by the base64-decoded part after `whsec_`, over
    "id.timestamp.body"."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def request_body(**overrides: Any) -> dict[str, Any]:
    """A valid create body (as JSON would give it); keyword arguments replace fields."""
    body: dict[str, Any] = {
        "run_id": "run-1",
        "capability": "payments.refund",
        "tool": {"name": "stripe.refunds.create", "arguments": {"charge": "ch_1", "amount": 12000}},
        "presentation": {
            "title": "Refund €120.00 to Zoë",
            "fields": [{"label": "Amount", "value": "€120.00"}],
        },
        "reason": "refunds over €100 need approval",
        "requested_by": "sam",
    }
    body.update(overrides)
    return {k: v for k, v in body.items() if v is not None}


def make_request(**overrides: Any) -> ParsedRequest:
    return validate_request(request_body(**overrides))


RECORD_NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
RECORD_HASH = "3f" * 32


def approval_record(**changes: Any) -> Approval:
    """A stored approval as the repository returns it, without a database: a pending
    payments.refund request by sam, assigned to group:finance, made at RECORD_NOW."""
    base = Approval(
        id="0b7d1c4e-8a59-4c35-9d0e-3f1a2b3c4d5e",
        tenant="acme",
        run_id="run-1",
        step={"cursor": 4},
        kind="tool_call",
        capability="payments.refund",
        tool_name="stripe.refunds.create",
        tool_args={"charge": "ch_1", "amount": 12000},
        presentation={
            "title": "Refund €120.00 to Zoë",
            "summary": "Customer asked twice.",
            "fields": [{"label": "Amount", "value": "€120.00"}],
        },
        reason="refunds over €100 need approval",
        hash=RECORD_HASH,
        requested_by="sam",
        assignee="group:finance",
        approvers=["group:finance"],
        required_approvals=1,
        allow_self_approval=False,
        state="pending",
        preconditions={"balance_at_least": 12000},
        resume={"thread": "t-1"},
        callback_url=None,
        created_at=RECORD_NOW,
        expires_at=RECORD_NOW + timedelta(hours=72),
        escalate_at=RECORD_NOW + timedelta(hours=24),
        escalation_level=0,
        assigned_note=None,
        grant_ttl_s=86400,
        decided_by=None,
        decided_at=None,
        decision_note=None,
        grant_expires_at=None,
        claim_token=None,
        claimed_at=None,
        lease_until=None,
        executed_at=None,
        outcome=None,
        origin_id=None,
        version=1,
        audit_seq=1,
        audit_head="0" * 64,
    )
    return dataclasses.replace(base, **changes)


def cast_vote(
    principal: str,
    minutes: int = 30,
    via: str | None = "web",
    decision: str = "approve",
    *,
    approval_id: str = "0b7d1c4e-8a59-4c35-9d0e-3f1a2b3c4d5e",
) -> Vote:
    """A vote towards a quorum as the store returns it with its approval: cast `minutes`
    after RECORD_NOW on the surface `via`."""
    at = RECORD_NOW + timedelta(minutes=minutes)
    return Vote(approval_id, principal, decision, None, None, at, via)
