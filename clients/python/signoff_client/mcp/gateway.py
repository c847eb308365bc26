"""signoff-mcp: an MCP server in front of one upstream MCP server, whose tools it re-exposes,
asking signoff before the gated ones run.

A call is forwarded only to a tool the upstream listed, under the exact name it listed, and
the policy judges that exact name. Any other name is refused in words without reaching the
upstream: many servers match names loosely (case, padding, zero-width characters, `-` for
`_`), and a near name would otherwise run a tool the policy denies or gates. Arguments must
be a JSON object within the bounds of definition.py; anything else, and any failure inside
the gateway, becomes an `isError` result in words, never an exception.

Per call, the policy says `allow` (forward as is), `deny` (refuse; the upstream never sees
it) or `ask` (ask.py: file a signoff approval showing the tool's current definition, and run
the approved call once, only while the tool is still defined as the approver saw it; with
`ask = "elicit"`, a host that can open a URL is offered the approval page and the call waits
for the decision, elicit.py).

All state lives in signoff, so a gateway restart loses nothing and two gateways in front of
the same upstream agree. Task-augmented calls (MCP 2025-11-25 tasks) are answered as plain
calls: the installed `mcp` SDK does not carry tasks (see docs/integrations.md).
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

from signoff_client.client import SignoffClient
from signoff_client.mcp.ask import AskCall, Attempt
from signoff_client.mcp.definition import (
    MAX_ARGUMENT_BYTES,
    Ambiguous,
    argument_problem,
    near_names,
    shown_name,
)
from signoff_client.mcp.elicit import Host
from signoff_client.mcp.human import ASK_HUMAN, ask_human, ask_human_tool
from signoff_client.mcp.policy import Policy
from signoff_client.mcp.relay import Relay
from signoff_client.mcp.results import NO_ANSWER, error, no_answer, own, upstream_failure

__all__ = ["INSTRUCTIONS", "Gateway"]

log = logging.getLogger("signoff_client.mcp")

MAX_PAGES = 1000  # pages of one tools/list
# Seconds a forwarded tools/call may wait for the upstream's answer, and a whole tools/list
# (every page): an upstream that never answers (it could not parse the request, say) must
# not hold a call forever.
CALL_TIMEOUT = 300.0
LIST_TIMEOUT = 60.0

INSTRUCTIONS = (
    "Some tools behind this gateway need a human's approval (signoff). Such a call may wait "
    "while the user is shown the approval page, then return what was decided; otherwise it "
    "returns 'waiting for approval' and has NOT run. Do not retry it in a loop: tell the user. "
    "Calling the same tool with exactly the same arguments after the decision runs it once and "
    "returns its result (or says it was rejected or expired). Tool names are exact: call a "
    "tool by the name tools/list gives it."
)


class Gateway:
    """The gateway's behaviour, transport-free: `list_tools()` and `call_tool()` are what the
    MCP server's handlers call. Build one with an entered SignoffClient and an entered
    upstream `mcp.Client`; `server()` wraps it in an MCP server."""

    def __init__(
        self,
        policy: Policy,
        signoff: SignoffClient,
        upstream: Client,
        *,
        run_scope: str | None = None,
        wait: float = 0.0,
        lease: str | None = None,
        max_argument_bytes: int = MAX_ARGUMENT_BYTES,
        complete_retry: float = 0.5,
        call_timeout: float = CALL_TIMEOUT,
        list_timeout: float = LIST_TIMEOUT,
        relay: Relay | None = None,
    ) -> None:
        self.policy = policy
        # The upstream's progress and log messages, to the callers (relay.py); its logging
        # callback must be the upstream client's for log messages to reach it.
        self.relay = relay or Relay()
        # How long a forwarded tools/call, and one whole tools/list, may go unanswered.
        self.call_timeout = call_timeout
        self.list_timeout = list_timeout
        # The first wait before recording an outcome again (then doubled, 4 tries in all).
        self.complete_retry = complete_retry
        self.signoff = signoff
        self.upstream = upstream
        self.run_scope = run_scope
        self.wait = wait
        self.lease = lease
        self.max_argument_bytes = max_argument_bytes
        self._tools: dict[str, types.Tool] = {}
        self._ambiguous: set[str] = set()

    # -- tools/list -----------------------------------------------------------------------

    async def list_tools(self) -> list[types.Tool]:
        """The upstream's tools, every page, as the upstream describes them, always asked of
        the upstream itself: `cache_mode="bypass"`, so that no `mcp.Client` configuration
        (the SDK's default client honours an upstream's `ttlMs` hint and would answer from
        its cache) can show a human, or re-check before running, a stale definition.
        `execution` (task support) is dropped: the gateway answers every call itself.

        A name listed more than once with differing definitions (on two pages, say) is
        ambiguous: which one the upstream would run is unknown, so calls to it are refused.
        Listing stops at a cursor already seen, and after `MAX_PAGES` pages."""
        tools: list[types.Tool] = []
        cursor: str | None = None
        seen: set[str] = set()
        with anyio.fail_after(self.list_timeout):
            for _ in range(MAX_PAGES):  # a paginator that never ends cannot hang the gateway
                page = await self.upstream.list_tools(cursor=cursor, cache_mode="bypass")
                tools += [tool.model_copy(update={"execution": None}) for tool in page.tools]
                cursor = page.next_cursor
                if not cursor:
                    break
                if cursor in seen:
                    log.warning(
                        "the upstream's tools/list repeats cursor %r: listing stops", cursor
                    )
                    break
                seen.add(cursor)
        listed: dict[str, types.Tool] = {}
        ambiguous: set[str] = set()
        for tool in tools:
            if tool.name in listed and listed[tool.name] != tool:
                ambiguous.add(tool.name)
            listed.setdefault(tool.name, tool)
        for name in sorted(ambiguous):
            log.warning(
                "the upstream lists %s more than once with different definitions: calls to it "
                "are refused",
                _shown(name),
            )
        self._tools, self._ambiguous = listed, ambiguous
        if self.policy.ask_human:
            if ASK_HUMAN in listed:
                log.warning(
                    "the upstream lists its own %s: the gateway's ask_human tool hides it",
                    ASK_HUMAN,
                )
            tools = [t for t in tools if t.name != ASK_HUMAN] + [ask_human_tool()]
        return tools

    async def fresh_tool(self, name: str) -> types.Tool | None:
        """The tool listed under exactly `name` by a tools/list sent now (None if none is):
        what a human is shown, and checked again before an approved call runs. Ambiguous
        if the upstream lists two different definitions under that name."""
        await self.list_tools()
        return self._known(name)

    async def listed_tool(self, name: str) -> types.Tool | None:
        """The tool listed under exactly `name`, listing again only if the last listing has
        no such name (a tool added since) or listed it twice. Ambiguous, as for fresh_tool."""
        if name not in self._tools or name in self._ambiguous:
            await self.list_tools()
        return self._known(name)

    def declares_output(self, name: str) -> bool:
        """Whether the tool as last listed declares an `outputSchema`."""
        tool = self._tools.get(name)
        return tool is not None and tool.output_schema is not None

    def _known(self, name: str) -> types.Tool | None:
        if name in self._ambiguous:
            raise Ambiguous(name)
        return self._tools.get(name)

    # -- tools/call -----------------------------------------------------------------------

    async def call_tool(
        self, name: Any, arguments: Any, host: Host | None = None
    ) -> types.CallToolResult | types.InputRequiredResult:
        """Answer one tools/call. Whatever the input, the answer is a result: refusals and
        failures are `isError` results in words. The one exception is the upstream's own
        JSON-RPC error to an allowed call, passed through as it came. `host`: the MCP client
        calling, whose user a gated call's approval page may be offered to (elicit.py); on
        2026-07-28 that first answer is an `InputRequiredResult`."""
        attempt = Attempt()
        try:
            return await self._call(name, arguments, attempt, host)
        except MCPError as exc:
            if attempt.forwarded and attempt.passthrough:
                raise
            log.exception("tools/call %s failed", _shown(name))
            return self._failure(attempt, upstream_failure(exc))
        except Exception as exc:  # RecursionError, a bug, a transport: in words, not a trace
            log.exception("tools/call %s failed", _shown(name))
            return self._failure(attempt, f"{type(exc).__name__}: {_cut(str(exc))}")

    @staticmethod
    def _failure(attempt: Attempt, why: str) -> types.CallToolResult:
        if attempt.forwarded:
            return error(
                f"The call was sent to the upstream, but the gateway failed afterwards ({why}). "
                "It may have run: its outcome is unknown. Do not call it again before a human "
                "has checked."
            )
        return error(f"Not run: the gateway could not handle this call ({why}). Nothing ran.")

    async def _call(
        self, name: Any, arguments: Any, attempt: Attempt, host: Host | None
    ) -> types.CallToolResult | types.InputRequiredResult:
        if not isinstance(name, str):
            return error(f"Not run: a tool name must be a string, not {type(name).__name__}.")
        problem = argument_problem(
            {} if arguments is None else arguments, max_bytes=self.max_argument_bytes
        )
        if problem is not None:
            return error(
                f"Not run: {problem}. Call {_shown(name)} with a JSON object of arguments "
                "as its input schema describes; nothing was forwarded or asked."
            )
        arguments = dict(arguments or {})
        if self.policy.ask_human and name == ASK_HUMAN:
            return await ask_human(self, arguments)
        try:
            tool = await self.listed_tool(name)
        except Ambiguous as exc:
            return self._ambiguous_refusal(exc)
        except Exception as exc:  # the upstream's transport or protocol: nothing was sent
            return error(
                "Not run: the gateway could not list the upstream's tools "
                f"({upstream_failure(exc)})."
            )
        if tool is None:
            return self._unlisted(name)
        # From here on the name is the upstream's own listed name, and the policy judges it,
        # with the arguments as they will be forwarded or asked about.
        decision = self.policy.decide(tool.name, arguments)
        rule = decision.rule
        where = f" ({self.policy.source}:{rule.line})" if rule and rule.line else ""
        if decision.action == "deny":
            log.info("denied %s by policy: %s%s", tool.name, decision.reason, where)
            meta = {"state": "denied", "tool": tool.name}
            if rule is not None:
                meta["rule"] = rule.name
            return error(
                f"Refused by policy: the tool {tool.name!r} is denied by this gateway's policy "
                f"(server {self.policy.server!r}; {decision.reason}). It was not run and will "
                "not be; do not retry it.",
                meta=meta,
            )
        if decision.by_arguments:
            # The log shows why two calls of one tool went different ways.
            log.info("%s %s by policy: %s%s", decision.action, tool.name, decision.reason, where)
        if decision.action == "allow":
            return await self._forward_allowed(tool.name, arguments, attempt)
        return await AskCall(self, decision, arguments, attempt, host).run()

    @staticmethod
    def _ambiguous_refusal(exc: Ambiguous) -> types.CallToolResult:
        log.info("refused %s: %s", _shown(exc.name), exc.words())
        return error(
            f"Not run: {exc.words()}. The call was not forwarded and no approval was requested; "
            "the upstream's operator must give each tool its own name.",
            meta={"state": "ambiguous", "tool": shown_name(exc.name)},
        )

    def _unlisted(self, name: str) -> types.CallToolResult:
        log.info("refused %s: not a name the upstream lists", _shown(name))
        near = near_names(name, self._tools)
        hint = (
            f" Tool names are exact; the listed tool it resembles is {near[0]!r} (subject to "
            "this gateway's policy)."
            if len(near) == 1
            else " Tool names are exact: use a name from tools/list."
        )
        return error(
            f"Not run: the upstream server lists no tool named {_shown(name)}, so the call "
            f"was not forwarded and no approval was requested.{hint}",
            meta={"state": "unlisted", "tool": shown_name(name)},
        )

    async def _forward_allowed(
        self, name: str, arguments: dict[str, Any], attempt: Attempt
    ) -> types.CallToolResult:
        attempt.forwarded = attempt.passthrough = True
        try:
            async with self.relay.forwarding() as progress:
                called = await self.upstream.call_tool(
                    name,
                    arguments,
                    read_timeout_seconds=self.call_timeout,
                    progress_callback=progress,
                )
            return own(called)
        except MCPError as exc:
            if exc.code in NO_ANSWER:  # the SDK's own: no answer came, the call may have run
                return error(
                    f"The call was sent to the upstream, but {no_answer(exc, self.call_timeout)}. "
                    "It may have run: its outcome is unknown."
                )
            raise  # the upstream's own protocol error, passed through as it came
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            return error(
                f"The gateway lost its connection to the upstream MCP server "
                f"({type(exc).__name__}: {_cut(str(exc))}). If the call was sent before the "
                "connection broke, it may have run."
            )

    # -- the MCP server -------------------------------------------------------------------

    def server(self) -> Server[Any]:
        """A low-level MCP server whose tools/list and tools/call are this gateway."""

        async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            try:
                return types.ListToolsResult(tools=await self.list_tools())
            except (MCPError, TimeoutError) as exc:  # the gateway's words, not the upstream's
                raise MCPError(
                    types.INTERNAL_ERROR,
                    f"signoff-mcp could not list the upstream's tools ({upstream_failure(exc)})",
                ) from exc

        async def on_call_tool(
            ctx: Any, params: types.CallToolRequestParams
        ) -> types.CallToolResult | types.InputRequiredResult:
            if params.task is not None:
                # No tasks capability is declared, so per MCP 2025-11-25 the call is
                # processed normally and answered with its result.
                log.debug("task augmentation requested for %s; answering directly", params.name)
            with self.relay.answering(ctx):
                return await self.call_tool(params.name, params.arguments, Host.of(ctx, params))

        async def on_set_logging_level(
            ctx: Any, params: types.SetLevelRequestParams
        ) -> types.EmptyResult:
            # A handshake-era client's level for the upstream log messages relayed to it.
            self.relay.set_level(params.level)
            return types.EmptyResult()

        from signoff_client.mcp import __version__

        with warnings.catch_warnings():  # logging is deprecated in 2026-07-28, not before
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            return Server(
                "signoff-mcp",
                version=__version__,
                title=f"signoff gateway for {self.policy.server}",
                instructions=INSTRUCTIONS,
                on_list_tools=on_list_tools,
                on_call_tool=on_call_tool,
                on_set_logging_level=on_set_logging_level,
            )


def _shown(name: Any) -> str:
    """A tool name quoted for a message, cut: the name may be anything the agent sent."""
    return _cut(repr(name))


def _cut(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
