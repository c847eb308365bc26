"""The integrations' deployment fixture itself: an agent files, a human approves with the CLI,
the webhook arrives signed to Standard Webhooks and verifies with the specification's library."""

from __future__ import annotations

import json

from standardwebhooks.webhooks import Webhook

from signoff_client import SignoffClient, verify_webhook
from tests.support.agent_deployment import Deployment


async def test_an_agent_request_is_approved_and_announced(deployment: Deployment) -> None:
    async with SignoffClient(deployment.url, deployment.api_key) as client:
        record = await client.request(
            run_id="smoke-1",
            capability="tools.echo",
            tool={"name": "echo", "arguments": {"text": "hi"}},
            presentation={"title": "Echo hi"},
            requested_by="agent",
        )
        await deployment.approve_async(record.id, record.hash)
        assert (await client.get(record.id)).state == "approved"
    [delivery] = deployment.hooks.wait_for(
        lambda seen: any(d.json()["approval"]["id"] == record.id for d in seen), 10
    )
    assert verify_webhook(delivery.headers, delivery.body, deployment.webhook_secret) == (
        delivery.delivery_id
    )
    parsed = Webhook(deployment.webhook_secret).verify(delivery.body, delivery.headers)
    assert parsed == json.loads(delivery.body)
