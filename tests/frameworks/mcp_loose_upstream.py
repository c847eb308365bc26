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
listings of the same call. Other keys of that file shape the listing:

- `"_ttl_ms": N`: every tools/list answer carries the caching hint `ttlMs` (MCP 2026-07-28),
  which the SDK's default client honours by answering later listings from its cache;
- `"_page_two": {tool: {"description", "inputSchema"}}`: the listing has a second page
  (cursor "2") holding these tools, listed a second time under a name page one lists too;
- `"_repeat_cursor": true`: page two names cursor "2" again as the next page, for ever.

Each tools/list request appends its cursor to LISTS (CALLS with the suffix `.lists`).

A call whose arguments hold `"hang": true` is recorded and then never answered; one holding
`"exit": true` is recorded and the server exits before answering.

    python tests/frameworks/mcp_loose_upstream.py CALLS.jsonl DEFINITIONS.json     # stdio
"""

from __future__ import annotations

import json
import os
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


def options(path: Path) -> dict[str, Any]:
    """The `_` keys of the definitions file."""
    if not path.exists():
        return {}
    return {k: v for k, v in json.loads(path.read_text("utf-8")).items() if k.startswith("_")}


def definitions(path: Path, *, listing: bool = False) -> dict[str, dict[str, Any]]:
    if not path.exists():
        return TOOLS
    written = json.loads(path.read_text("utf-8"))
    hold = written.get("_hold", 0)
    if hold and listing:
        path.write_text(json.dumps({**written, "_hold": hold - 1}), "utf-8")
    if hold:
        return TOOLS
    changes = {k: v for k, v in written.items() if not k.startswith("_")}
    merged = {**TOOLS, **changes}
    return {name: d for name, d in merged.items() if d is not None}  # null: the tool is gone


def tools(listed: dict[str, dict[str, Any]]) -> list[types.Tool]:
    return [
        types.Tool(name=name, description=d["description"], input_schema=d["inputSchema"])
        for name, d in listed.items()
    ]


def main(calls: Path, defs: Path) -> None:
    lists = calls.with_suffix(".lists")

    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        cursor = params.cursor if params is not None else None
        with lists.open("a", encoding="utf-8") as out:
            out.write(json.dumps(cursor) + "\n")
        shape = options(defs)
        hint = {"ttl_ms": shape["_ttl_ms"]} if "_ttl_ms" in shape else {}
        if cursor is None:
            listed = tools(definitions(defs, listing=True))
            two = "2" if shape.get("_page_two") or shape.get("_repeat_cursor") else None
            return types.ListToolsResult(tools=listed, next_cursor=two, **hint)
        again = "2" if shape.get("_repeat_cursor") else None
        return types.ListToolsResult(
            tools=tools(shape.get("_page_two") or {}), next_cursor=again, **hint
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
        if (params.arguments or {}).get("hang") is True:
            await anyio.sleep_forever()
        if (params.arguments or {}).get("exit") is True:
            os._exit(0)
        text = f"{ran} ran with {json.dumps(params.arguments, sort_keys=True)}"
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    server = Server("loose-upstream", on_list_tools=on_list_tools, on_call_tool=on_call_tool)

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
