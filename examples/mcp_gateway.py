"""signoff-mcp in front of an MCP server, driven by a scripted agent: reads run at once, a
deletion is refused, a refund waits for a human and then runs exactly once.

Start `signoff serve` as in the README's quick start (the example config routes `payments.*`
to the finance group, alice and bob; tenant `acme`, API key `dev-key`), then, from the
repository root:

    pip install './clients/python[mcp]'
    export SIGNOFF_CONFIG=config/signoff.example.toml    # for the `signoff` CLI the human uses
    export SIGNOFF_URL=http://127.0.0.1:8700 SIGNOFF_API_KEY=dev-key
    python examples/mcp_gateway.py                        # alice approves
    python examples/mcp_gateway.py --reject "not this one"   # alice rejects

The agent is an MCP client that launches the gateway over stdio, the way an MCP host does:

    signoff-mcp serve --policy examples/mcp/policy.toml --run-scope RUN -- \
        python examples/mcp/shop_server.py

(examples/mcp/policy.toml says what is allowed, denied or asked; examples/mcp/shop_server.py
is the upstream.) Each run uses a fresh `--run-scope`, so the refund is asked afresh; without
it, the same call with the same arguments is one approval for good. No model is called.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult

from signoff_client import SignoffClient

HERE = Path(__file__).resolve().parent
META = "signoff/approval"
EXECUTION = {
    "not_started": "never ran",
    "started": "started, outcome unknown",
    "finished": "finished",
}


def say(who: str, text: str) -> None:
    print(f"{who:<7}{text}")


async def call(agent: Client, tool: str, arguments: dict[str, Any]) -> CallToolResult:
    """One tool call and what the model reads back (shortened)."""
    say("agent", f"-> {tool} {json.dumps(arguments, ensure_ascii=False)}")
    result = await agent.call_tool(tool, arguments)
    text = " ".join(" ".join(getattr(b, "text", "").split()) for b in result.content) or "(empty)"
    text = text if len(text) <= 110 else text[:109] + "…"
    say("", f"<- {'isError: ' if result.is_error else ''}{text}")
    return result


async def report(signoff: SignoffClient, approval_id: str) -> None:
    record = await signoff.get(approval_id)
    say("", f"   the gated call: {EXECUTION[record.execution]} (approval {record.state})")


def decide(approval: dict[str, Any], who: str, reject: str | None) -> None:
    """The human's side: the `signoff` CLI, naming the hash they were shown."""
    verb = ["reject", "--note", reject] if reject else ["approve"]
    cli = shutil.which("signoff")
    if cli is None:
        sys.exit("the `signoff` CLI is not on PATH: activate the server's venv (or install it)")
    command = [cli, "approvals", verb[0], approval["id"], "--hash", approval["hash"],
               "--as", who, *verb[1:]]  # fmt: skip
    say("human", " ".join(["signoff", *command[1:]]))
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


async def main(who: str, reject: str | None) -> None:
    gateway = StdioServerParameters(
        command=sys.executable,
        args=["-m", "signoff_client.mcp.cli", "serve", "--log-level", "warning",
              "--policy", str(HERE / "mcp" / "policy.toml"), "--run-scope", uuid.uuid4().hex[:12],
              "--", sys.executable, str(HERE / "mcp" / "shop_server.py")],
        env=dict(os.environ),
    )  # fmt: skip
    refund = {"order": "8812", "amount_cents": 12000}
    async with (
        Client(gateway) as agent,
        SignoffClient(os.environ["SIGNOFF_URL"], os.environ["SIGNOFF_API_KEY"]) as signoff,
    ):
        tools = (await agent.list_tools()).tools
        say("agent", f"sees tools: {', '.join(tool.name for tool in tools)}")
        await call(agent, "list_orders", {})
        await call(agent, "delete_customer", {"customer": "Zoë"})

        approval = (await call(agent, "refund_order", refund)).meta[META]
        say("", f"   approval {approval['id']}: {approval['assignee']} decides, "
                f"until {approval['expires_at']}")  # fmt: skip
        await report(signoff, approval["id"])
        await call(agent, "refund_order", refund)  # asking again files nothing new

        decide(approval, who, reject)
        await report(signoff, approval["id"])

        await call(agent, "refund_order", refund)  # approved: runs now, once
        await report(signoff, approval["id"])
        await call(agent, "refund_order", refund)  # the recorded result, not a second refund
        await call(agent, "list_refunds", {})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--as", dest="who", default="alice", help="the deciding principal")
    parser.add_argument("--reject", metavar="REASON", help="reject instead of approving")
    options = parser.parse_args()
    asyncio.run(main(options.who, options.reject))
