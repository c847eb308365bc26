"""An agent loop with the signoff SDK: ask, wait for the decision, run what was approved.

The agent needs no public URL: `wait` holds a request open on signoff, which answers as soon as
a person's decision is committed. A person may take days, so an agent that should not wait that
long stores the approval id with the run, ends its turn, and later waits (in any process) with
the same id; an agent with a public URL may act on the signed decision webhook instead
(`on_webhook` below). Either way it claims the approved call (one caller wins), executes
exactly the stored call with the idempotency key, and records the outcome. Run it against a
local `signoff serve`, then decide with the command it prints:

    SIGNOFF_URL=http://127.0.0.1:8700 SIGNOFF_API_KEY=... python examples/agent_loop.py [RUN_ID]
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from signoff_client import Claim, SignoffClient, verify_webhook

SIGNOFF_URL = os.environ.get("SIGNOFF_URL", "http://127.0.0.1:8700")
API_KEY = os.environ.get("SIGNOFF_API_KEY", "dev-key")
# The quick start's secret; yours comes from `signoff webhook-secret`.
WEBHOOK_SECRET = os.environ.get(
    "SIGNOFF_WEBHOOK_SECRET", "whsec_c2lnbm9mZi1kZXYtd2ViaG9vay1zZWNyZXQtMzJieXQ="
)


async def refund(run_id: str) -> str:
    """The agent wants to refund: ask, wait for the decision, run it if approved."""
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
        decide = f"signoff approvals approve {approval.id} --hash {approval.hash}"
        print(f"asked; decide with: {decide}", flush=True)
        # Held on the server, renewed every 60 s: back as soon as a person decides.
        decided = await signoff.wait(approval.id, max_wait=3600)
        if decided.state != "approved":
            return decided.state  # rejected, expired, answered, or still pending: it never ran
        claim = await signoff.claim(approval.id)  # one caller wins; others get NotPending
        await run_claimed(signoff, claim)
        return "executed"


async def run_claimed(signoff: SignoffClient, claim: Claim) -> None:
    """Execute exactly the claimed call and record its outcome."""
    approval_id, token = claim.approval.id, claim.claim_token
    try:
        result = execute(claim.tool, idempotency_key=claim.idempotency_key)
    except Exception as exc:
        await signoff.complete(approval_id, token, "failed", {"error": str(exc)})
        raise
    await signoff.complete(approval_id, token, "succeeded", result)


# Delivery ids already handled. Delivery is at least once: keep this in your database (a
# unique column) so a redelivery after your own restart is recognised too.
SEEN: set[str] = set()


async def on_webhook(headers: dict[str, str], raw_body: bytes) -> None:
    """With a public URL: the decision webhook arrived (at any replica of the agent). Verify,
    dedupe on the delivery id, then act on the state."""
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
        await run_claimed(signoff, claim)


def execute(tool: dict[str, Any], idempotency_key: str) -> dict[str, Any]:
    """Run exactly the stored call. Pass the key to the effect's API (Stripe's
    Idempotency-Key) so a retried execution cannot apply twice."""
    print(f"executing {tool['name']}({tool['arguments']}) with key {idempotency_key[:12]}…")
    return {"refund": "re_123"}


if __name__ == "__main__":
    print("outcome:", asyncio.run(refund(sys.argv[1] if len(sys.argv) > 1 else "run-example-1")))
