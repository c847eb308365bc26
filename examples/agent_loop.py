"""A durable agent loop with the signoff SDK: ask, end the turn, resume on the webhook.

Nothing here waits for the human in memory. Turn 1 files the request and returns. Hours
later the decision webhook arrives (at any replica of the agent); the handler verifies it,
claims the approved call, executes exactly the stored call with the idempotency key, and
records the outcome. Run it against a local `signoff serve`:

    SIGNOFF_URL=http://127.0.0.1:8700 SIGNOFF_API_KEY=... python examples/agent_loop.py
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from signoff_client import SignoffClient, verify_webhook

SIGNOFF_URL = os.environ.get("SIGNOFF_URL", "http://127.0.0.1:8700")
API_KEY = os.environ.get("SIGNOFF_API_KEY", "dev-key")
# The quick start's secret; yours comes from `signoff webhook-secret`.
WEBHOOK_SECRET = os.environ.get(
    "SIGNOFF_WEBHOOK_SECRET", "whsec_c2lnbm9mZi1kZXYtd2ViaG9vay1zZWNyZXQtMzJieXQ="
)


async def turn_one(run_id: str) -> str:
    """The agent wants to refund: ask, store the approval id with the run, end the turn."""
    async with SignoffClient(SIGNOFF_URL, API_KEY) as signoff:
        approval = await signoff.request(
            run_id=run_id,
            capability="payments.refund",
            tool={
                "name": "stripe.refunds.create",
                "arguments": {"charge": "ch_1", "amount": 12000},
            },
            presentation={
                "title": "Refund €120.00 to Zoë",
                "fields": [{"label": "Order", "value": "8812"}],
            },
            reason="refunds over €100 need a budget owner",
            step={"node": "refund"},
        )
    return approval.id


# Delivery ids already handled. Delivery is at least once: keep this in your database (a
# unique column) so a redelivery after your own restart is recognised too.
SEEN: set[str] = set()


async def on_webhook(headers: dict[str, str], raw_body: bytes) -> None:
    """The decision arrived. Verify, dedupe on the delivery id, then act on the state."""
    delivery = verify_webhook(headers, raw_body, WEBHOOK_SECRET)  # raises BadWebhookSignature
    if delivery in SEEN:
        return
    SEEN.add(delivery)
    event = json.loads(raw_body)
    approval = event["approval"]
    if approval["state"] != "approved":
        return  # rejected, expired, cancelled...: the call never ran; tell the user
    async with SignoffClient(SIGNOFF_URL, API_KEY) as signoff:
        claim = await signoff.claim(approval["id"])  # one caller wins; others get NotPending
        try:
            result = execute(claim.tool, idempotency_key=claim.idempotency_key)
        except Exception as exc:
            await signoff.complete(approval["id"], claim.claim_token, "failed", {"error": str(exc)})
            raise
        await signoff.complete(approval["id"], claim.claim_token, "succeeded", result)


def execute(tool: dict[str, Any], idempotency_key: str) -> dict[str, Any]:
    """Run exactly the stored call. Pass the key to the effect's API (Stripe's
    Idempotency-Key) so a retried execution cannot apply twice."""
    print(f"executing {tool['name']}({tool['arguments']}) with key {idempotency_key[:12]}…")
    return {"refund": "re_123"}


if __name__ == "__main__":
    print("filed approval", asyncio.run(turn_one("run-example-1")))
