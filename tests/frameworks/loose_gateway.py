"""signoff-mcp in front of mcp_loose_upstream.py, the pieces the hardening tests share: the
policy of issue 25, the official `mcp` client launching the gateway over stdio (as an MCP
host does), an in-process Gateway for calls the wire cannot carry, and the upstream's own
record of what ran."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult

from signoff_client import SignoffClient
from signoff_client.mcp import Gateway, Upstream, parse_policy
from tests.support import prefork
from tests.support.agent_deployment import Deployment

LOOSE_UPSTREAM = Path(__file__).with_name("mcp_loose_upstream.py")
META = "signoff/approval"

POLICY = """\
[gateway]
server = "shop"
requested_by = "agent"
default = "allow"

[tools]
delete_customer = "deny"
"drop_*" = "deny"
refund_order = "ask"
"""


@dataclass
class LooseShop:
    """A gateway deployment under test: where its files live and what the upstream ran."""

    deployment: Deployment
    tmp: Path

    @property
    def calls(self) -> Path:
        return self.tmp / "calls.jsonl"

    @property
    def definitions(self) -> Path:
        return self.tmp / "definitions.json"

    @property
    def policy_path(self) -> Path:
        path = self.tmp / "policy.toml"
        if not path.exists():
            path.write_text(POLICY, "utf-8")
        return path

    def listings(self) -> list[str | None]:
        """The cursor of every tools/list request the upstream was sent (None: page one)."""
        path = self.calls.with_suffix(".lists")
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text("utf-8").splitlines()]

    def shape(self, **options: Any) -> None:
        """How the upstream lists its tools from now on (mcp_loose_upstream.py): `ttl_ms`,
        `page_two`, `repeat_cursor`. Kept across change_tool and remove_tool."""
        written = self._written()
        written.update({f"_{k}": v for k, v in options.items()})
        self.definitions.write_text(json.dumps(written), "utf-8")

    def _written(self) -> dict[str, Any]:
        if not self.definitions.exists():
            return {}
        return json.loads(self.definitions.read_text("utf-8"))

    def _options(self) -> dict[str, Any]:
        return {k: v for k, v in self._written().items() if k.startswith("_") and k != "_hold"}

    def ran(self) -> list[dict[str, Any]]:
        """Every call the upstream executed: {"sent", "tool", "arguments"}."""
        if not self.calls.exists():
            return []
        return [json.loads(line) for line in self.calls.read_text("utf-8").splitlines()]

    def change_tool(
        self, name: str, description: str, input_schema: dict[str, Any], *, hold: int = 0
    ) -> None:
        """The upstream redefines a tool: its tools/list and tools/call see it after `hold`
        more listings."""
        changes = {name: {"description": description, "inputSchema": input_schema}}
        written = {**self._options(), **changes, "_hold": hold}
        self.definitions.write_text(json.dumps(written), "utf-8")

    def remove_tool(self, name: str, *, hold: int = 0) -> None:
        """The upstream stops listing a tool, after `hold` more listings."""
        written = {**self._options(), name: None, "_hold": hold}
        self.definitions.write_text(json.dumps(written), "utf-8")

    def restore_tools(self) -> None:
        """The upstream lists its tools as at first again (its listing's shape stays)."""
        self.definitions.write_text(json.dumps(self._options()), "utf-8")

    def upstream_command(self) -> list[str]:
        return [prefork.python(), str(LOOSE_UPSTREAM), str(self.calls), str(self.definitions)]

    @contextlib.asynccontextmanager
    async def agent(self, *options: str) -> AsyncIterator[Client]:
        """The official MCP client, launching `signoff-mcp serve [options]` on stdio."""
        params = StdioServerParameters(
            command=prefork.python(),
            args=["-m", "signoff_client.mcp.cli", "serve", "--policy", str(self.policy_path),
                  *options, "--", *self.upstream_command()],
            env={
                **self.deployment.env,
                "SIGNOFF_URL": self.deployment.url,
                "SIGNOFF_API_KEY": self.deployment.api_key,
            },
            cwd=self.tmp,
        )  # fmt: skip
        async with Client(params, mode="legacy") as client:
            yield client

    @contextlib.asynccontextmanager
    async def gateway(
        self, signoff: SignoffClient | None = None, **options: Any
    ) -> AsyncIterator[Gateway]:
        """The gateway's behaviour in process (no transport of its own), in front of the same
        upstream subprocess: for inputs the MCP wire refuses before a handler sees them."""
        async with contextlib.AsyncExitStack() as stack:
            if signoff is None:
                signoff = await stack.enter_async_context(
                    SignoffClient(self.deployment.url, self.deployment.api_key)
                )
            upstream = await stack.enter_async_context(
                Upstream(command=self.upstream_command()).client()
            )
            yield Gateway(parse_policy(POLICY), signoff, upstream, **options)


def text(result: CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


def approval(result: CallToolResult) -> dict[str, Any]:
    assert result.meta and META in result.meta, result
    return result.meta[META]
