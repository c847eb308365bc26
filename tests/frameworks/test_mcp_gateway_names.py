"""The gateway forwards only a tool the upstream listed, by its exact listed name, and judges
its policy on that name (issue 25, item 1). In front of an upstream that matches names loosely,
a case variant, padding, a zero-width character or `-` for `_` would otherwise reach a tool
the policy denies or gates under a name the policy does not know."""

from __future__ import annotations

from pathlib import Path

import pytest

from signoff_client import SignoffClient
from tests.frameworks.loose_gateway import LooseShop, approval, text
from tests.support.agent_deployment import Deployment

# One signoff serve per database for the module, emptied before each test.
pytestmark = pytest.mark.shared_deployment

# Each of these ran delete_customer, drop_table or refund_order upstream without approval.
NEAR_NAMES = [
    "Delete_Customer",
    "DELETE_CUSTOMER",
    " delete_customer",
    "delete_customer ",
    "delete_customer\u200b",
    "delete\u200d_customer",
    "delete-customer",
    "Drop_table",
    "drop-table",
    "Refund_Order",
    "refund_order\t",
    "refund-order",
    "List_Orders",  # allowed by default, but still not a listed name
]


@pytest.fixture
def shop(deployment: Deployment, tmp_path: Path) -> LooseShop:
    return LooseShop(deployment, tmp_path)


async def test_names_the_upstream_did_not_list_never_reach_it(
    shop: LooseShop, deployment: Deployment
) -> None:
    async with shop.agent() as agent, SignoffClient(deployment.url, deployment.api_key) as api:
        listed = {tool.name for tool in (await agent.list_tools()).tools}
        assert listed == {"list_orders", "delete_customer", "drop_table", "refund_order"}

        for name in NEAR_NAMES:
            refused = await agent.call_tool(name, {"customer": "c-1", "order": 500, "amount": 1})
            assert refused.is_error, (name, refused)
            says = text(refused)
            assert "not run" in says.lower() and "lists no tool named" in says, (name, says)
        assert shop.ran() == []
        # Nothing was asked of a human either: a near name is not a request.
        assert (await api.list())[0] == []

        # The listed names are judged by the policy as before.
        denied = await agent.call_tool("delete_customer", {"customer": "c-1"})
        assert denied.is_error and "denied by this gateway's policy" in text(denied)
        dropped = await agent.call_tool("drop_table", {"table": "customers"})
        assert dropped.is_error and "denied by this gateway's policy" in text(dropped)
        waiting = await agent.call_tool("refund_order", {"order": 500, "amount": 1})
        assert waiting.is_error and approval(waiting)["state"] == "pending"
        allowed = await agent.call_tool("list_orders", {"customer": "c-1"})
        assert not allowed.is_error, allowed

    # The upstream's own record: only the allowed call ran, under its exact name.
    assert shop.ran() == [
        {"sent": "list_orders", "tool": "list_orders", "arguments": {"customer": "c-1"}}
    ]


async def test_a_near_name_is_told_the_exact_one(shop: LooseShop) -> None:
    """The refusal names the listed tool it resembles, so a model can correct itself (and
    then meets the policy of that exact name)."""
    async with shop.gateway() as gateway:
        answer = await gateway.call_tool("Refund_Order", {"order": 500, "amount": 1})
        assert answer.is_error
        assert "'refund_order'" in text(answer)
        answer = await gateway.call_tool("no_such_tool", {})
        assert answer.is_error and "lists no tool named 'no_such_tool'" in text(answer)
    assert shop.ran() == []
