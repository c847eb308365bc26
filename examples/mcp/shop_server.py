"""A small upstream MCP server for examples/mcp_gateway.py: a shop with orders and refunds,
kept in memory. Nothing in it knows about signoff; the gateway in front of it decides which
calls reach it.

    python examples/mcp/shop_server.py          # MCP on stdio
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

shop = MCPServer("shop", log_level="WARNING")
ORDERS = {"8812": {"customer": "Zoë", "total_cents": 12000}}
REFUNDS: list[dict[str, object]] = []


@shop.tool(description="List the shop's orders.")
def list_orders() -> dict[str, dict[str, object]]:
    return ORDERS


@shop.tool(description="List the refunds made so far.")
def list_refunds() -> list[dict[str, object]]:
    return REFUNDS


@shop.tool(description="Refund an order (money leaves the shop; it cannot be undone).")
def refund_order(order: str, amount_cents: int) -> str:
    REFUNDS.append({"order": order, "amount_cents": amount_cents})
    return f"refunded {amount_cents / 100:.2f} EUR on order {order}"


@shop.tool(description="Delete a customer and all their orders.")
def delete_customer(customer: str) -> str:
    return f"deleted {customer}"


if __name__ == "__main__":
    shop.run()
