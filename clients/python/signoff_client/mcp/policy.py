"""The gateway's policy file: which upstream tools run as they are, which are refused, and
which wait for a human's signoff.

    [gateway]
    server = "mail"                      # names the upstream: capabilities mcp.mail.<tool>
    signoff_url = "http://127.0.0.1:8700"
    api_key_env = "SIGNOFF_API_KEY"      # the variable holding the tenant's API key
    requested_by = "agent"               # optional: who the agent acts for
    approvers = ["alice"]                # optional: narrow the route's approvers
    approval_ttl = "4h"                  # optional: shorter than the route's
    default = "ask"                      # tools named nowhere below (default: ask)
    ask_human = true                     # optional: offer an `ask_human` tool (default off;
                                         # a string is its capability, else mcp.mail.ask_human)
    ask = "elicit"                       # how `ask` reaches a human: "elicit" (the default)
                                         # or "route"; a rule's own `ask` wins
    web_url = "https://signoff.example"  # optional: the web inbox (default: signoff_url)
    elicit_wait = "10m"                  # optional: how long an elicited call waits

    [tools]
    "read_*" = "allow"                   # forwarded as is
    "delete_*" = "deny"                  # refused, never reaches the upstream
    send_email = "ask"                   # capability mcp.mail.send_email
    archive = { action = "ask", capability = "mail.archive", approvers = ["bob"] }
    refund = [                           # a list: the first rule whose `when` holds decides
      { when = "amount <= 50", action = "allow" },
      { when = 'amount > 5000 or currency != "eur"', action = "deny" },
      { action = "ask", capability = "payments.refund" },   # no `when`: every call
    ]

A tool's entry is the one naming it exactly, else the first glob (fnmatch, case-sensitive)
matching it in file order, else `default`. An entry is one rule (a string or a table) or a
list of rules (inline, or `[[tools.refund]]` tables), checked in order: the first whose
`when` holds for the call's arguments decides, a rule without `when` always holds, and if
none holds `default` applies. A rule after one without `when` could never apply, and is
refused.

`ask = "elicit"` (the default): when the MCP host declared URL-mode elicitation, a pending
request's approval page on signoff's web inbox is offered to the host's user and the call
waits for the decision (elicit.py); a host that cannot elicit gets the "waiting" answer, as
with `ask = "route"`, which leaves the request to its route's cards alone.

`when` is a condition on the call's top-level arguments in the server's condition language
(signoff_client/conditions.py, a copy of the server's bot/conditions.py): comparisons of an
argument with a constant (`==`, `!=`, `<`, `<=`, `>`, `>=`, `in`, `glob(arg, "ch_*")`)
joined by `and`, `or` and parentheses (no `not`, no `not in`). Equality is RFC 8785's
(1 == 1.0, true != 1). A comparison with an argument the call lacks, or of another type, is
false, and so is its `!=`: `currency != "eur"` does not hold for a call without `currency`,
so a deny written that way lets such a call through to the next rule. Arguments that are not
a JSON object satisfy no `when`. Conditions are parsed and type-checked (an ordering needs a
number or a string, `in` a non-empty list, `glob` a string) when the file is read, and never
evaluated as code.

Errors name the file, the line and the key. Pure standard library (and the client's own
canonical JSON): checking a policy needs neither the MCP SDK nor a network.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from signoff_client import conditions
from signoff_client.errors import InvalidRequest
from signoff_client.mcp.policy_lines import Lines
from signoff_client.mcp.policy_values import (
    ELICIT_WAIT,
    AskMode,
    approvers_value,
    ask_mode,
    duration,
    seconds,
    url_value,
)

__all__ = [
    "ACTIONS",
    "Decision",
    "Policy",
    "PolicyError",
    "Rule",
    "default_capability",
    "load_policy",
    "parse_policy",
]

Action = Literal["allow", "deny", "ask"]
ACTIONS: tuple[str, ...] = ("allow", "deny", "ask")

# The signoff server's own rules (docs/reference.md, "The create body").
_CAPABILITY = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*")
_SEGMENT_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MAX_CAPABILITY = 256

_GATEWAY_KEYS = {
    "server",
    "signoff_url",
    "api_key_env",
    "requested_by",
    "approvers",
    "approval_ttl",
    "default",
    "ask_human",
    "ask",
    "web_url",
    "elicit_wait",
}
_RULE_KEYS = {"when", "action", "capability", "approvers", "approval_ttl", "title", "ask"}
_ASK_ONLY = ("capability", "approvers", "approval_ttl", "title", "ask")  # keys of `ask` rules


class PolicyError(ValueError):
    """A policy file that cannot be used; the message names the file, line and key."""

    def __init__(self, message: str, *, source: str = "policy", line: int | None = None) -> None:
        self.source = source
        self.line = line
        self.reason = message
        where = f"{source}:{line}" if line else source
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule of a `[tools]` entry: a tool name or glob, the condition on the arguments
    under which it applies (`when`, None: always), and what to do with the calls it decides.
    The rules of one list share their pattern and keep their order (`index`)."""

    pattern: str
    action: Action
    capability: str | None = None
    approvers: tuple[str, ...] | None = None
    approval_ttl: str | None = None
    title: str | None = None
    line: int | None = None
    when: str | None = None  # the condition as written
    condition: conditions.Condition | None = None  # ... and as parsed
    index: int | None = None  # its place in the entry's list; None: the single-rule form
    ask: AskMode | None = None  # None: the gateway's `ask`

    @property
    def is_glob(self) -> bool:
        return any(c in self.pattern for c in "*?[")

    @property
    def name(self) -> str:
        """How messages name it: `tools.refund`, `tools.refund[1]`, `tools."send_*"`."""
        return f"tools.{_quote(self.pattern)}" + (
            f"[{self.index}]" if self.index is not None else ""
        )

    def holds(self, arguments: Any) -> bool:
        """Whether the rule applies to a call with these arguments; a `when` never holds for
        arguments that are not an object."""
        if self.condition is None:
            return True
        return isinstance(arguments, dict) and self.condition.holds(arguments)


@dataclass(frozen=True, slots=True)
class Decision:
    """What the policy says about one tool: the action, and for `ask` what to request."""

    tool: str
    action: Action
    rule: Rule | None  # None: `default` applied (no entry named the tool, or none held)
    capability: str
    approvers: tuple[str, ...] | None
    approval_ttl: str | None
    title: str | None
    # Which rule decided, in words for the gateway's log and its refusals.
    reason: str = "the default for tools no rule names"
    # Whether the call's arguments took part: a rule of the tool's entry has a `when`.
    by_arguments: bool = False
    # For `ask`: offer the host's user the approval page (when the host can open one).
    ask: AskMode = "elicit"


def default_capability(server: str, tool: str) -> str:
    """`mcp.<server>.<tool>`, with every character signoff does not allow in a capability
    segment (dots included: a tool name is one segment) replaced by `_`. A name too long for
    a capability is cut and keeps a hash of the whole, so two long names stay apart."""
    segment = _SEGMENT_CHARS.sub("_", tool) or "_"
    capability = f"mcp.{server}.{segment}"
    if len(capability) > _MAX_CAPABILITY:
        digest = hashlib.sha256(tool.encode()).hexdigest()[:16]
        capability = capability[: _MAX_CAPABILITY - 17] + "_" + digest
    return capability


@dataclass(frozen=True, slots=True)
class Policy:
    """A parsed, validated policy. `decide(tool)` is all the gateway asks of it."""

    server: str
    rules: tuple[Rule, ...]
    default: Action = "ask"
    signoff_url: str | None = None
    api_key_env: str = "SIGNOFF_API_KEY"
    requested_by: str | None = None
    approvers: tuple[str, ...] | None = None
    approval_ttl: str | None = None
    source: str = "policy"
    # The capability of the gateway's own `ask_human` tool, or None: not offered.
    ask_human: str | None = None
    ask: AskMode = "elicit"
    web_url: str | None = None  # the web inbox's public address; None: the signoff URL
    elicit_wait: float = ELICIT_WAIT

    def entry_for(self, tool: str) -> tuple[Rule, ...]:
        """The rules of the entry naming the tool exactly, else of the first glob matching it
        in file order; () if none does."""
        pattern = next((r.pattern for r in self.rules if not r.is_glob and r.pattern == tool), None)
        if pattern is None:
            pattern = next(
                (
                    r.pattern
                    for r in self.rules
                    if r.is_glob and fnmatch.fnmatchcase(tool, r.pattern)
                ),
                None,
            )
        return tuple(r for r in self.rules if r.pattern == pattern) if pattern is not None else ()

    def rule_for(self, tool: str, arguments: Any = None) -> Rule | None:
        """The rule that decides a call of `tool` with these arguments: the first of its
        entry that holds. None: `default` applies."""
        return next((r for r in self.entry_for(tool) if r.holds(arguments)), None)

    def decide(self, tool: str, arguments: Any = None) -> Decision:
        """What to do with a call of `tool` with these arguments (None, or anything but an
        object: no `when` holds)."""
        entry = self.entry_for(tool)
        rule = next((r for r in entry if r.holds(arguments)), None)
        action: Action = rule.action if rule else self.default
        if rule is not None:
            reason = f"rule {rule.name}" + (f": {rule.when}" if rule.when is not None else "")
        elif entry:
            reason = (
                f"the default: no rule of {entry[0].name.split('[')[0]} held for these arguments"
            )
        else:
            reason = "the default for tools no rule names"
        return Decision(
            tool=tool,
            action=action,
            rule=rule,
            capability=(rule and rule.capability) or default_capability(self.server, tool),
            approvers=rule.approvers if rule and rule.approvers is not None else self.approvers,
            approval_ttl=(rule and rule.approval_ttl) or self.approval_ttl,
            title=rule.title if rule else None,
            reason=reason,
            by_arguments=any(r.condition is not None for r in entry),
            ask=(rule and rule.ask) or self.ask,
        )

    def with_overrides(self, **changes: Any) -> Policy:
        """The same policy with gateway settings replaced (CLI flags win over the file);
        None values are ignored. Validated like the file."""
        values = {k: v for k, v in changes.items() if v is not None}
        if "server" in values:
            _check_server(values["server"], self.source, None, "--server-name")
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__}
        return Policy(**(fields | values))

    def summary(self) -> str:
        """What `signoff-mcp check` prints: one line per rule, in the order they apply."""
        lines = [
            f"policy {self.source}: server {self.server!r}, "
            f"{len(self.rules)} rule(s), unnamed tools: {self.default}",
            f"  signoff_url: {self.signoff_url or '(from --signoff-url or $SIGNOFF_URL)'}",
            f"  api key from: ${self.api_key_env}",
        ]
        if self.requested_by:
            lines.append(f"  requested_by: {self.requested_by}")
        if self.approvers:
            lines.append(f"  approvers: {', '.join(self.approvers)}")
        if self.approval_ttl:
            lines.append(f"  approval_ttl: {self.approval_ttl}")
        if self.ask_human:
            lines.append(f"  ask_human: offered, capability {self.ask_human}")
        if (self.ask, self.web_url, self.elicit_wait) != ("elicit", None, ELICIT_WAIT):
            lines.append(  # the defaults go unsaid, as `approvers` and the others above
                f"  ask: {self.ask}"
                + (
                    f" (a host that can open a URL is offered the approval page at "
                    f"{self.web_url or 'the signoff URL'}; the call waits up to "
                    f"{self.elicit_wait:g} s for the decision)"
                    if self.ask == "elicit"
                    else " (the route's cards only)"
                )
            )
        exact = [r for r in self.rules if not r.is_glob]
        globs = [r for r in self.rules if r.is_glob]
        for position, rule in enumerate([*exact, *globs]):
            label = repr(rule.pattern) + (f"[{rule.index}]" if rule.index is not None else "")
            text = f"  {label:<24} {rule.action}"
            if rule.when is not None:
                text += f" when {rule.when}"
            if rule.action == "ask":
                capability = rule.capability or (
                    f"mcp.{self.server}.<tool>"
                    if rule.is_glob
                    else default_capability(self.server, rule.pattern)
                )
                text += f" -> capability {capability}"
                if rule.approvers:
                    text += f", approvers {', '.join(rule.approvers)}"
                if rule.approval_ttl:
                    text += f", approval_ttl {rule.approval_ttl}"
                if rule.ask:
                    text += f", ask {rule.ask}"
            lines.append(text)
            following = [*exact, *globs][position + 1 : position + 2]
            if rule.condition is not None and (
                not following or following[0].pattern != rule.pattern
            ):
                lines.append(
                    f"  {repr(rule.pattern) + ' otherwise':<24} {self.default} (the default)"
                )
        lines.append(f"  {'(any other tool)':<24} {self.default}")
        return "\n".join(lines)


def load_policy(path: str | Path) -> Policy:
    """Read and validate a policy file; PolicyError (naming file, line, key) otherwise."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        message = f"cannot read the policy file: {exc.strerror or exc}"
        raise PolicyError(message, source=str(path)) from None
    except UnicodeDecodeError:
        raise PolicyError("the policy file is not UTF-8 text", source=str(path)) from None
    return parse_policy(text, source=str(path))


def parse_policy(text: str, *, source: str = "policy") -> Policy:
    """Validate policy TOML text (see the module docstring for the format)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        raise PolicyError(
            f"not valid TOML: {exc}", source=source, line=int(match.group(1)) if match else None
        ) from None
    lines = Lines(text)

    def fail(message: str, table: Sequence[str], key: str | None = None) -> PolicyError:
        return PolicyError(message, source=source, line=lines.find(table, key))

    unknown = sorted(set(data) - {"gateway", "tools"})
    if unknown:
        raise fail(
            f"unknown table or key {unknown[0]!r} (expected [gateway] and [tools])", [], unknown[0]
        )
    gateway = data.get("gateway")
    if not isinstance(gateway, dict):
        raise fail('a [gateway] table with at least `server = "NAME"` is required', [])
    for key in gateway:
        if key not in _GATEWAY_KEYS:
            raise fail(
                f"gateway.{key}: unknown key (known: {', '.join(sorted(_GATEWAY_KEYS))})",
                ["gateway"],
                key,
            )

    def gateway_value(key: str) -> Any:
        return gateway.get(key)

    server = gateway_value("server")
    if server is None:
        raise fail('gateway.server is required: the upstream\'s name, e.g. "mail"', ["gateway"])
    _check_server(server, source, lines.find(["gateway"], "server"), "gateway.server")

    def fail_gateway(message: str, key: str | None) -> PolicyError:
        return fail(message, ["gateway"], key)

    signoff_url = url_value(gateway_value("signoff_url"), "gateway.signoff_url", fail_gateway)
    web_url = url_value(gateway_value("web_url"), "gateway.web_url", fail_gateway)
    api_key_env = gateway_value("api_key_env") or "SIGNOFF_API_KEY"
    if not isinstance(api_key_env, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", api_key_env):
        raise fail(
            "gateway.api_key_env must name an environment variable (letters, digits, _)",
            ["gateway"],
            "api_key_env",
        )
    requested_by = gateway_value("requested_by")
    if requested_by is not None and (
        not isinstance(requested_by, str) or not 1 <= len(requested_by) <= 128
    ):
        raise fail("gateway.requested_by must be 1-128 characters", ["gateway"], "requested_by")
    default = gateway_value("default") or "ask"
    if default not in ACTIONS:
        raise fail(
            f"gateway.default must be one of {', '.join(ACTIONS)} (got {default!r})",
            ["gateway"],
            "default",
        )

    approvers = approvers_value(gateway_value("approvers"), "gateway.approvers", fail_gateway)
    approval_ttl = duration(gateway_value("approval_ttl"), "gateway.approval_ttl", fail_gateway)
    ask = ask_mode(gateway_value("ask"), "gateway.ask", fail_gateway) or "elicit"
    waited = duration(gateway_value("elicit_wait"), "gateway.elicit_wait", fail_gateway)
    elicit_wait = seconds(waited) if waited is not None else ELICIT_WAIT
    if not elicit_wait:  # the host's user needs time to open the page and decide
        raise fail_gateway(
            'gateway.elicit_wait must be more than 0 (or ask = "route")', "elicit_wait"
        )

    ask_human = gateway_value("ask_human")
    if ask_human is True:
        ask_human = default_capability(server, "ask_human")
    elif ask_human is False:
        ask_human = None
    elif ask_human is not None and (
        not isinstance(ask_human, str)
        or len(ask_human) > _MAX_CAPABILITY
        or not _CAPABILITY.fullmatch(ask_human)
    ):
        raise fail(
            "gateway.ask_human must be true, false, or the capability its questions are "
            "routed by (dotted segments of letters, digits, _ and -)",
            ["gateway"],
            "ask_human",
        )

    tools = data.get("tools", {})
    if not isinstance(tools, dict):
        raise fail('tools must be a table: [tools] then `NAME_OR_GLOB = "allow"`', [], "tools")
    rules: list[Rule] = []
    for pattern, entry in tools.items():
        rules += _entry(pattern, entry, source, lines)

    return Policy(
        server=server,
        rules=tuple(rules),
        default=default,
        signoff_url=signoff_url,
        api_key_env=api_key_env,
        requested_by=requested_by,
        approvers=approvers,
        approval_ttl=approval_ttl,
        source=source,
        ask_human=ask_human,
        ask=ask,
        web_url=web_url,
        elicit_wait=elicit_wait,
    )


def _entry(pattern: str, entry: Any, source: str, lines: Lines) -> list[Rule]:
    """The rules of one `[tools]` entry: one, or the list's in order."""
    table = ["tools", pattern]
    if not isinstance(entry, list):

        def at(key: str | None) -> int | None:
            return lines.find(table, key) if key is not None else lines.find(["tools"], pattern)

        return [_rule(pattern, entry, _failing(source, at), lines.find(["tools"], pattern))]
    name = f"tools.{_quote(pattern)}"
    if not entry:
        line = lines.find(["tools"], pattern)
        raise PolicyError(
            f"{name}: an empty list of rules decides nothing", source=source, line=line
        )
    rules: list[Rule] = []
    for index, item in enumerate(entry):

        def at(key: str | None, index: int = index) -> int | None:
            return lines.item(table, index, key)

        fail = _failing(source, at)
        if rules and rules[-1].condition is None:
            raise fail(
                f"{name}[{index}]: never applies: {name}[{index - 1}] has no `when`, so it "
                "decides every call that reaches it (put rules with a `when` first)",
                None,
            )
        rules.append(_rule(pattern, item, fail, at(None), index))
    return rules


def _failing(source: str, at: Any) -> Any:
    """`fail(message, key)` for one rule: a PolicyError on the line that sets `key` (None:
    the rule's own line)."""

    def fail(message: str, key: str | None) -> PolicyError:
        return PolicyError(message, source=source, line=at(key))

    return fail


def _rule(pattern: str, entry: Any, fail: Any, line: int | None, index: int | None = None) -> Rule:
    name = f"tools.{_quote(pattern)}" + (f"[{index}]" if index is not None else "")
    if not pattern:
        raise fail(f"{name}: an empty tool name matches nothing", None)
    if isinstance(entry, str):
        entry = {"action": entry}
    if not isinstance(entry, dict):
        raise fail(
            f'{name}: expected "allow", "deny", "ask" or a table {{ action = "ask", ... }}',
            None,
        )
    for key in entry:
        if key not in _RULE_KEYS:
            raise fail(f"{name}.{key}: unknown key (known: {', '.join(sorted(_RULE_KEYS))})", key)
    when = entry.get("when")
    condition = None
    if when is not None:
        if not isinstance(when, str):
            raise fail(
                f'{name}.when must be a condition written as text, e.g. "amount <= 50"', "when"
            )
        try:
            condition = conditions.text(when, where=f"{name}.when")
        except InvalidRequest as exc:
            raise fail(exc.message, "when") from None
    action = entry.get("action")
    if action not in ACTIONS:
        raise fail(f"{name}: action must be one of {', '.join(ACTIONS)} (got {action!r})", "action")
    capability = entry.get("capability")
    if capability is not None and (
        not isinstance(capability, str)
        or len(capability) > _MAX_CAPABILITY
        or not _CAPABILITY.fullmatch(capability)
    ):
        raise fail(
            f"{name}.capability: dotted segments of A-Z a-z 0-9 _ - (at most 256 characters), "
            f"e.g. 'payments.refund' (got {capability!r})",
            "capability",
        )
    title = entry.get("title")
    if title is not None and (not isinstance(title, str) or not 1 <= len(title) <= 300):
        raise fail(f"{name}.title must be 1-300 characters", "title")
    if action != "ask":
        extra = [k for k in _ASK_ONLY if k in entry]
        if extra:
            raise fail(
                f"{name}.{extra[0]}: only an `ask` rule requests approval (action is {action!r})",
                extra[0],
            )
    return Rule(
        pattern=pattern,
        action=action,
        capability=capability,
        approvers=approvers_value(entry.get("approvers"), f"{name}.approvers", fail),
        approval_ttl=duration(entry.get("approval_ttl"), f"{name}.approval_ttl", fail),
        title=title,
        line=line,
        when=when,
        condition=condition,
        index=index,
        ask=ask_mode(entry.get("ask"), f"{name}.ask", fail),
    )


def _check_server(server: Any, source: str, line: int | None, name: str) -> None:
    if not isinstance(server, str) or not _SERVER_NAME.fullmatch(server):
        raise PolicyError(
            f"{name} must be 1-64 characters of A-Z a-z 0-9 _ - (it becomes a capability "
            f"segment, mcp.<server>.<tool>; got {server!r})",
            source=source,
            line=line,
        )


def _quote(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else f'"{key}"'
