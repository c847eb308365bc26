"""signoff-mcp: an MCP gateway that asks signoff before the upstream's gated tools run.

    signoff-mcp check policy.toml [--signoff-url URL]       # with the key: routes checked too
    signoff-mcp serve --policy policy.toml -- python my_server.py        # gateway on stdio
    signoff-mcp serve --policy policy.toml --upstream-command python --upstream-arg my_server.py
    signoff-mcp serve --policy policy.toml --upstream-url http://127.0.0.1:9000/mcp \
        --transport streamable-http --port 8765

The policy (`signoff_client.mcp.policy`) is plain standard library; the gateway
(`gateway.py`, with `ask.py` for gated calls, `elicit.py` for offering a gated call's
approval page to the MCP host's user, `definition.py` for what an approval binds,
`results.py` for answers, `human.py` for the optional `ask_human` tool, `relay.py` for the
upstream's progress and log messages and
`serve.py` for transports) needs the `mcp` SDK (`pip install signoff-client[mcp]`) and is
imported only when used, so `signoff-mcp check` works without it (`routes.py`, which asks
signoff whether the policy's capabilities have routes, needs only the signoff client).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from signoff_client.mcp.policy import Decision, Policy, PolicyError, Rule, load_policy, parse_policy

if TYPE_CHECKING:
    from signoff_client.mcp.definition import run_id_for
    from signoff_client.mcp.gateway import Gateway
    from signoff_client.mcp.results import META_KEY
    from signoff_client.mcp.serve import Upstream, serve

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

# Where each name that needs the MCP SDK lives.
_GATEWAY = {
    "META_KEY": "results",
    "Gateway": "gateway",
    "Upstream": "serve",
    "run_id_for": "definition",
    "serve": "serve",
}


def __getattr__(name: str) -> Any:
    # The MCP SDK loads only when the gateway itself is asked for.
    if name in _GATEWAY:
        import importlib

        return getattr(importlib.import_module(f"signoff_client.mcp.{_GATEWAY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
