"""`signoff-mcp check` against a signoff server: does each capability the policy asks for have
a route there? A capability without one is refused `no_route` on the first gated call, which
is the first time a user would otherwise find out.

The policy names capabilities three ways: an exact `ask` rule (its `capability`, else
`mcp.<server>.<tool>`), an `ask` glob, and `default = "ask"` for tools named nowhere. For the
last two the tool names are the upstream's, unknown here, so one sample name stands for
them: the glob with each wildcard replaced by `x` (`send_*` asks as `mcp.<server>.send_x`),
and `tool` for any other tool. Pure standard library plus the signoff client: no MCP SDK.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from signoff_client.client import SignoffClient
from signoff_client.mcp.policy import Policy, default_capability

__all__ = ["Probe", "check_routes", "probes"]


@dataclass(frozen=True, slots=True)
class Probe:
    """One capability to ask signoff about, and which tools of the policy it stands for."""

    tools: str  # how the output names them: 'send_email', "tools matching 'send_*'", ...
    capability: str
    sample: bool  # True when a sample tool name stands for names only the upstream knows


def probes(policy: Policy) -> list[Probe]:
    """The capabilities the policy's `ask` rules (and an `ask` default) request, in the order
    `summary()` prints them."""
    found: list[Probe] = []
    for rule in sorted(policy.rules, key=lambda r: r.is_glob):
        if rule.action != "ask":
            continue
        if rule.capability:
            found.append(Probe(repr(rule.pattern), rule.capability, False))
        elif rule.is_glob:
            sample = default_capability(policy.server, _sample(rule.pattern))
            found.append(Probe(f"tools matching {rule.pattern!r}", sample, True))
        else:
            capability = default_capability(policy.server, rule.pattern)
            found.append(Probe(repr(rule.pattern), capability, False))
    if policy.default == "ask":
        sample = default_capability(policy.server, "tool")
        found.append(Probe("any other tool", sample, True))
    return found


def _sample(glob: str) -> str:
    """A name the glob matches: each `*` and `?` as `x`, each `[...]` as its first member."""
    name = re.sub(r"\[!?\]?[^\]]*\]", lambda m: _first(m.group(0)), glob)
    return name.replace("*", "x").replace("?", "x") or "x"


def _first(bracket: str) -> str:
    inner = bracket[1:-1]
    if inner.startswith("!"):
        return "_" if "_" not in inner else "x"  # a negated class: a character it leaves out
    return inner[0] if inner else "x"


async def check_routes(policy: Policy, signoff: SignoffClient) -> list[str]:
    """One line per probe, saying the route signoff would take; the lines of capabilities
    with no route start with "warning:"."""
    lines: list[str] = []
    seen: dict[str, dict[str, Any] | None] = {}
    for probe in probes(policy):
        if probe.capability not in seen:
            seen[probe.capability] = await signoff.route(probe.capability)
        route = seen[probe.capability]
        asks = f"{probe.tools} ask for {probe.capability}" + (
            " (a sample name: the upstream's tool names are not known here)" if probe.sample else ""
        )
        if route is None:
            lines.append(
                f"warning: {asks}: no route matches it for this tenant, so signoff refuses "
                "these calls (no_route); add a [[routes]] entry whose capability matches it "
                f'(e.g. capability = "mcp.{policy.server}.*") or set the rule\'s capability'
            )
        else:
            approvers = ", ".join(route["approvers"])
            lines.append(f"{asks}: route {route['capability']!r}, approvers {approvers}")
    return lines
