"""Running the gateway: the one upstream it fronts, and serving it on stdio or streamable
HTTP (what `signoff-mcp serve` does)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import anyio
from mcp import Client, StdioServerParameters

from signoff_client.client import SignoffClient
from signoff_client.mcp.gateway import CALL_TIMEOUT, LIST_TIMEOUT, Gateway
from signoff_client.mcp.policy import Policy
from signoff_client.mcp.relay import Relay

__all__ = ["Upstream", "serve", "upstream_environment"]

log = logging.getLogger("signoff_client.mcp")


@dataclass(frozen=True, slots=True)
class Upstream:
    """The one MCP server behind the gateway: a command speaking MCP on stdio, or a
    streamable HTTP URL. A stdio upstream's `env` is laid over the SDK's safe defaults
    (PATH, HOME, ...); the CLI passes its own environment minus the signoff API key."""

    command: Sequence[str] = ()
    url: str | None = None
    env: Mapping[str, str] | None = None
    cwd: str | None = None

    def __post_init__(self) -> None:
        if bool(self.command) == bool(self.url):
            raise ValueError("an upstream is either a command (stdio) or a URL, exactly one")

    def client(self, relay: Relay | None = None) -> Client:
        """An MCP client for the upstream (not yet connected: `async with`). No response
        cache: the gateway relists tools itself and must see a changed listing at once (its
        listings bypass any cache anyway; this keeps the client from storing them). With a
        `relay`, the upstream's log messages go to it: every level is asked for (2026-07-28
        connections send none unless asked), and each caller's own level applies on the way
        out."""
        options: dict[str, Any] = {"cache": None}
        if relay is not None:
            options |= {"logging_callback": relay.on_log, "log_level": "debug"}
        if self.url:
            return Client(self.url, **options)
        params = StdioServerParameters(
            command=self.command[0],
            args=list(self.command[1:]),
            env=dict(self.env) if self.env is not None else None,
            cwd=self.cwd,
        )
        return Client(params, **options)

    def describe(self) -> str:
        return self.url or " ".join(self.command)


async def serve(
    policy: Policy,
    upstream: Upstream,
    *,
    signoff_url: str,
    api_key: str,
    transport: Literal["stdio", "streamable-http"] = "stdio",
    host: str = "127.0.0.1",
    port: int = 8765,
    path: str = "/mcp",
    run_scope: str | None = None,
    wait: float = 0.0,
    lease: str | None = None,
    call_timeout: float = CALL_TIMEOUT,
    list_timeout: float = LIST_TIMEOUT,
) -> None:
    """Connect to the upstream and serve the gateway until the client goes (stdio) or the
    process is stopped (streamable HTTP)."""
    relay = Relay()
    async with SignoffClient(signoff_url, api_key) as signoff, upstream.client(relay) as client:
        gateway = Gateway(
            policy,
            signoff,
            client,
            relay=relay,
            run_scope=run_scope,
            wait=wait,
            lease=lease,
            call_timeout=call_timeout,
            list_timeout=list_timeout,
        )
        tools = await gateway.list_tools()
        log.info(
            "signoff-mcp: %d upstream tool(s) from %s, server %r, signoff at %s",
            len(tools),
            upstream.describe(),
            policy.server,
            signoff_url,
        )
        server = gateway.server()
        if transport == "stdio":
            from mcp.server.stdio import stdio_server

            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())
            return
        import uvicorn

        app = server.streamable_http_app(streamable_http_path=path, host=host)
        http = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
        async with anyio.create_task_group() as group:
            group.start_soon(_announce, http, host, path)
            await http.serve()
            group.cancel_scope.cancel()


async def _announce(http: Any, host: str, path: str) -> None:
    """Log the bound address once listening (with `--port 0` the only way to learn it)."""
    while not http.started:  # noqa: ASYNC110 (uvicorn offers a flag, not an event)
        await anyio.sleep(0.05)
    port = http.servers[0].sockets[0].getsockname()[1]
    print(f"signoff-mcp listening on http://{host}:{port}{path}", file=sys.stderr, flush=True)


def upstream_environment(policy: Policy) -> dict[str, str]:
    """A stdio upstream's environment: the gateway's, without the signoff API key (the
    upstream must not be able to claim its own approvals)."""
    return {k: v for k, v in os.environ.items() if k != policy.api_key_env}
