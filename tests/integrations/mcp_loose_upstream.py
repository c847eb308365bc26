"""An upstream MCP server that matches tool names loosely, as many real ones do (a dispatcher
that lower-cases, trims, drops zero-width characters and reads `-` as `_`): `Delete_Customer`,
`" delete_customer"` and `delete-customer` all run `delete_customer`. The gateway must never
rely on the upstream to refuse a name it did not list.

Every call is appended to CALLS (one JSON line, with the name as sent and the tool it ran)
before the tool does anything, so a test reads what really ran. The tools' descriptions and
input schemas are read from DEFINITIONS (JSON, `{tool: {"description", "inputSchema"} or null}`) on
every tools/list and tools/call when that file exists, so a test changes a tool under a
running gateway by writing the file. With `"_hold": N` in it, the next N tools/list answers
still show the old definitions (the file counts them down): a tool that changes between two
listings of the same call.

    python tests/integrations/mcp_loose_upstream.py CALLS.jsonl DEFINITIONS.json     # stdio
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

_OBJECT = {"type": "object"}
TOOLS: dict[str, dict[str, Any]] = {
    "list_orders": {
        "description": "List a customer's orders.",
        "inputSchema": {**_OBJECT, "properties": {"customer": {"type": "string"}}},
    },
    "delete_customer": {
        "description": "Delete a customer and everything stored about them.",
        "inputSchema": {**_OBJECT, "properties": {"customer": {"type": "string"}}},
    },
    "drop_table": {
        "description": "Drop a database table.",
        "inputSchema": {**_OBJECT, "properties": {"table": {"type": "string"}}},
    },
    "refund_order": {
        "description": "Refund an order to the card it was paid with.",
        "inputSchema": {
            **_OBJECT,
            "properties": {"order": {"type": "integer"}, "amount": {"type": "integer"}},
            "required": ["order", "amount"],
        },
    },
}
_ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff"))


def loose(name: str) -> str:
    """How a lenient dispatcher finds a tool: the weakness the gateway must not inherit."""
    return name.translate(_ZERO_WIDTH).strip().lower().replace("-", "_")


def definitions(path: Path, *, listing: bool = False) -> dict[str, dict[str, Any]]:
    if not path.exists():
        return TOOLS
    changes = json.loads(path.read_text("utf-8"))
    hold = changes.pop("_hold", 0)
    if hold and listing:
        path.write_text(json.dumps({**changes, "_hold": hold - 1}), "utf-8")
    if hold:
        return TOOLS
    merged = {**TOOLS, **changes}
    return {name: d for name, d in merged.items() if d is not None}  # null: the tool is gone


def main(calls: Path, defs: Path) -> None:
    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(name=name, description=d["description"], input_schema=d["inputSchema"])
                for name, d in definitions(defs, listing=True).items()
            ]
        )

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        ran = loose(params.name)
        if ran not in definitions(defs):
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=f"no tool {params.name!r}")],
                is_error=True,
            )
        with calls.open("a", encoding="utf-8") as out:
            record = {"sent": params.name, "tool": ran, "arguments": params.arguments}
            out.write(json.dumps(record) + "\n")
        text = f"{ran} ran with {json.dumps(params.arguments, sort_keys=True)}"
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    server = Server("loose-upstream", on_list_tools=on_list_tools, on_call_tool=on_call_tool)

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
