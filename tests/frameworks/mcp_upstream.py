"""A small upstream MCP server for the gateway's tests. Every call a tool receives is appended
to a file as one JSON line before the tool does anything, so a test counts executions across
processes and gateway restarts. `count_slowly` sends progress notifications and log messages
while it runs (what a gateway must pass on to its caller).

    python tests/frameworks/mcp_upstream.py CALLS.jsonl                 # MCP on stdio
    python tests/frameworks/mcp_upstream.py CALLS.jsonl --port 9000     # streamable HTTP
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

server = MCPServer("upstream", log_level="WARNING")
CALLS: Path


def record(tool: str, **arguments: Any) -> None:
    with CALLS.open("a", encoding="utf-8") as calls:
        calls.write(json.dumps({"tool": tool, "arguments": arguments}) + "\n")


@server.tool(description="Send an email to one recipient. It cannot be taken back.")
def send_email(to: str, subject: str, body: str = "") -> str:
    record("send_email", to=to, subject=subject, body=body)
    if to.endswith("@bounce.invalid"):  # the tool fails: an isError result
        raise ToolError(f"mailbox {to} does not exist")
    if to.endswith("@refuse.invalid"):  # the server refuses: a JSON-RPC error
        raise MCPError(code=INVALID_PARAMS, message=f"recipient {to} refused")
    return f"sent to {to}: {subject}"


@server.tool(description="Read a note.")
def read_note(name: str) -> str:
    record("read_note", name=name)
    return f"note {name}: buy milk"


@server.tool(description="Delete a repository and all its history.")
def delete_repo(name: str) -> str:
    record("delete_repo", name=name)
    return f"deleted {name}"


@server.tool(description="Count slowly, reporting progress and logging each step.")
async def count_slowly(steps: int, ctx: Context) -> str:
    record("count_slowly", steps=steps)
    for step in range(1, steps + 1):
        await ctx.info(f"counted {step} of {steps}", logger_name="counter")
        await ctx.report_progress(step, steps, f"step {step}")
    return f"counted to {steps}"


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("calls", type=Path)
    parser.add_argument("--port", type=int)
    args = parser.parse_args()
    CALLS = args.calls
    if args.port is not None:
        # Uvicorn's INFO line "Uvicorn running on http://127.0.0.1:PORT" names the bound port.
        server.settings.log_level = "INFO"
        server.run("streamable-http", host="127.0.0.1", port=args.port)
    else:
        server.run()
