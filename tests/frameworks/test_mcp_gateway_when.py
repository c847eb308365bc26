"""An argument-aware policy through the real gateway (issue 30): the official `mcp` client
launches `signoff-mcp serve` on stdio in front of mcp_loose_upstream.py, and one tool's
calls go three ways by their arguments. A small refund runs at once, a large one is refused
without reaching the upstream or asking anyone, and one in between waits for a human and
runs once approved.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from signoff_client import SignoffClient
from signoff_client.mcp import Gateway, Upstream, parse_policy
from tests.frameworks.loose_gateway import LooseShop, approval, text
from tests.support.agent_deployment import Deployment

# One signoff serve per database for the module, emptied before each test.
pytestmark = pytest.mark.shared_deployment

POLICY = """\
[gateway]
server = "shop"
requested_by = "agent"
default = "allow"

[tools]
refund_order = [
  { when = "amount <= 50", action = "allow" },
  { when = "amount > 5000", action = "deny" },
  { action = "ask", capability = "mcp.shop.refund", title = "Refund an order" },
]
"""


@pytest.fixture
def shop(deployment: Deployment, tmp_path: Path) -> LooseShop:
    (tmp_path / "policy.toml").write_text(POLICY, "utf-8")
    return LooseShop(deployment, tmp_path)


async def test_one_tool_runs_is_refused_or_waits_by_its_arguments(
    shop: LooseShop, deployment: Deployment
) -> None:
    small = {"order": 1, "amount": 20}
    large = {"order": 2, "amount": 9000}
    middle = {"order": 3, "amount": 700}
    async with shop.agent() as agent, SignoffClient(deployment.url, deployment.api_key) as api:
        # Small: straight to the upstream, nothing asked.
        ran = await agent.call_tool("refund_order", small)
        assert not ran.is_error, ran
        assert text(ran) == 'refund_order ran with {"amount": 20, "order": 1}'

        # Large: refused, saying which rule refused it; the upstream never sees it.
        refused = await agent.call_tool("refund_order", large)
        assert refused.is_error
        assert "denied by this gateway's policy" in text(refused)
        assert "rule tools.refund_order[1]: amount > 5000" in text(refused)
        assert approval(refused) == {
            "state": "denied", "tool": "refund_order", "rule": "tools.refund_order[1]"
        }  # fmt: skip

        # In between: waits for a human under the rule's capability, and has not run.
        waiting = await agent.call_tool("refund_order", middle)
        asked = approval(waiting)
        assert waiting.is_error and asked["state"] == "pending"
        record = await api.get(asked["id"])
        assert record.capability == "mcp.shop.refund"
        assert record.tool == {"name": "refund_order", "arguments": middle}
        # Only the call in between asked anyone.
        assert [r.id for r in (await api.list())[0]] == [asked["id"]]
        assert [call["arguments"] for call in shop.ran()] == [small]

        # Approved: the same call again runs it, once.
        await deployment.approve_async(asked["id"], asked["hash"])
        done = await agent.call_tool("refund_order", middle)
        assert not done.is_error, done
        assert approval(done)["state"] == "executed"
        again = await agent.call_tool("refund_order", middle)
        assert "not run again" in text(again)

    assert [call["arguments"] for call in shop.ran()] == [small, middle]


async def test_the_log_says_which_rule_decided(
    shop: LooseShop, deployment: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    policy = parse_policy(POLICY, source="shop.toml")
    async with (
        SignoffClient(deployment.url, deployment.api_key) as signoff,
        Upstream(command=shop.upstream_command()).client() as upstream,
    ):
        gateway = Gateway(policy, signoff, upstream)
        with caplog.at_level(logging.INFO, logger="signoff_client.mcp"):
            assert not (await gateway.call_tool("refund_order", {"order": 1, "amount": 5})).is_error
            await gateway.call_tool("refund_order", {"order": 2, "amount": 5001})
            # A string is not a number: no `when` of the first two holds, so the call asks.
            asked = await gateway.call_tool("refund_order", {"order": 3, "amount": "5"})
            assert approval(asked)["state"] == "pending"
    said = [r.getMessage() for r in caplog.records if r.name == "signoff_client.mcp"]
    assert (
        "allow refund_order by policy: rule tools.refund_order[0]: amount <= 50 (shop.toml:8)"
        in said
    )
    assert (
        "denied refund_order by policy: rule tools.refund_order[1]: amount > 5000 (shop.toml:9)"
        in said
    )
    assert "ask refund_order by policy: rule tools.refund_order[2] (shop.toml:10)" in said
    assert [call["arguments"]["order"] for call in shop.ran()] == [1]
