"""signoff-mcp: an MCP gateway that asks signoff before the upstream's gated tools run.

    signoff-mcp check policy.toml
    signoff-mcp serve --policy policy.toml -- python my_server.py        # gateway on stdio
    signoff-mcp serve --policy policy.toml --upstream-url http://127.0.0.1:9000/mcp \
        --transport streamable-http --port 8765

The policy (`signoff_client.mcp.policy`) is plain standard library; the gateway
(`signoff_client.mcp.gateway`) needs the `mcp` SDK (`pip install signoff-client[mcp]`) and
is imported only when used, so `signoff-mcp check` works without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from signoff_client.mcp.policy import Decision, Policy, PolicyError, Rule, load_policy, parse_policy

if TYPE_CHECKING:
    from signoff_client.mcp.gateway import META_KEY, Gateway, Upstream, run_id_for, serve

__version__ = "0.1.0"

__all__ = [
    "META_KEY",
    "Decision",
    "Gateway",
    "Policy",
    "PolicyError",
    "Rule",
    "Upstream",
    "load_policy",
    "parse_policy",
    "run_id_for",
    "serve",
]

_GATEWAY = {"META_KEY", "Gateway", "Upstream", "run_id_for", "serve"}


def __getattr__(name: str) -> Any:
    # The MCP SDK loads only when the gateway itself is asked for.
    if name in _GATEWAY:
        from signoff_client.mcp import gateway

        return getattr(gateway, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
