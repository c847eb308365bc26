"""signoff-mcp: an MCP server in front of one upstream MCP server, whose tools it re-exposes,
asking signoff before the gated ones run.

Per call, the policy says `allow` (forward as is), `deny` (refuse; the upstream never sees
it) or `ask`. An `ask` call files a signoff approval whose `tool` is exactly the MCP call,
`{"name", "arguments"}`, and answers at once that the call is waiting and that nothing ran.
Asked again with the same arguments, it finds the same approval (the run id is derived from
the call itself) and acts on its state: still pending, it says so again; approved, it claims
the grant, forwards exactly the stored call (the claim's `tool`, not the incoming arguments),
completes the approval with the upstream's result and returns that result; executed, it
returns the recorded result without running anything; rejected, expired or withdrawn, it says
so with the decider's note; started without a recorded outcome, it says so and runs nothing.

All state lives in signoff, so a gateway restart loses nothing and two gateways in front of
the same upstream agree. Task-augmented calls (MCP 2025-11-25 tasks) are answered as plain
calls: the installed `mcp` SDK does not carry tasks (see docs/integrations.md).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import aiohttp
import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from signoff_client.client import ApprovalRecord, Claim, SignoffClient
from signoff_client.errors import (
    ApprovalCorrupt,
    ApprovalExpired,
    NotCanonical,
    NotPending,
    SignoffError,
)
from signoff_client.hashing import canonical_json, record_hash
from signoff_client.mcp.policy import Decision, Policy

__all__ = ["META_KEY", "Gateway", "Upstream", "run_id_for", "serve"]

log = logging.getLogger("signoff_client.mcp")

# MCPError codes the SDK raises itself when no answer came (closed, timed out): the call may
# have run, so these are not the upstream refusing it.
_NO_ANSWER = frozenset({types.CONNECTION_CLOSED, types.REQUEST_TIMEOUT})
# Where results carry the approval they came from, for programs (an LLM reads the text).
META_KEY = "signoff/approval"
# `complete` keeps at most 16 KiB of canonical JSON; leave room for the envelope.
RESULT_LIMIT = 16 * 1024 - 512

INSTRUCTIONS = (
    "Some tools behind this gateway need a human's approval (signoff). Such a call first "
    "returns 'waiting for approval' and has NOT run. Do not retry it in a loop: tell the user. "
    "Calling the same tool with exactly the same arguments after the decision runs it once and "
    "returns its result (or says it was rejected or expired)."
)


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

    def client(self) -> Client:
        """An MCP client for the upstream (not yet connected: `async with`). No response
        cache: the gateway relists tools itself and must see a changed listing at once."""
        if self.url:
            return Client(self.url, cache=None)
        params = StdioServerParameters(
            command=self.command[0],
            args=list(self.command[1:]),
            env=dict(self.env) if self.env is not None else None,
            cwd=self.cwd,
        )
        return Client(params, cache=None)

    def describe(self) -> str:
        return self.url or " ".join(self.command)


def run_id_for(
    server: str, name: str, arguments: Mapping[str, Any], scope: str | None = None
) -> str:
    """The run id of an `ask` call: the server, an optional scope, and SHA-256 of the canonical
    call. The same call with the same arguments, asked again from any session or after a
    restart, finds the same approval (signoff dedupes on tenant, run id and hash); any changed
    argument is a new request. NotCanonical for arguments JSON cannot carry exactly."""
    digest = hashlib.sha256(canonical_json({"name": name, "arguments": dict(arguments)}))
    prefix = f"mcp:{server}:{scope}:" if scope else f"mcp:{server}:"
    return prefix + digest.hexdigest()


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
    ) -> None:
        self.policy = policy
        self.signoff = signoff
        self.upstream = upstream
        self.run_scope = run_scope
        self.wait = wait
        self.lease = lease
        self._tools: dict[str, types.Tool] = {}

    # -- tools/list -----------------------------------------------------------------------

    async def list_tools(self) -> list[types.Tool]:
        """The upstream's tools, every page, as the upstream describes them. `execution` (task
        support) is dropped: the gateway answers every call itself, without tasks."""
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(1000):  # a paginator that never ends cannot hang the gateway
            page = await self.upstream.list_tools(cursor=cursor)
            tools += [tool.model_copy(update={"execution": None}) for tool in page.tools]
            cursor = page.next_cursor
            if not cursor:
                break
        self._tools = {tool.name: tool for tool in tools}
        return tools

    async def _tool(self, name: str) -> types.Tool | None:
        if name not in self._tools:
            await self.list_tools()
        return self._tools.get(name)

    # -- tools/call -----------------------------------------------------------------------

    async def call_tool(
        self, name: str, arguments: Mapping[str, Any] | None
    ) -> types.CallToolResult:
        decision = self.policy.decide(name)
        arguments = dict(arguments or {})
        if decision.action == "deny":
            log.info("denied %s by policy", name)
            return _result(
                f"Refused by policy: the tool {name!r} is denied by this gateway's policy "
                f"(server {self.policy.server!r}). It was not run and will not be; do not "
                "retry it.",
                error=True,
                meta={"state": "denied", "tool": name},
            )
        if decision.action == "allow":
            return await self._forward_allowed(name, arguments)
        return await self._ask(decision, arguments)

    async def _forward_allowed(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        try:
            return _own(await self.upstream.call_tool(name, arguments))
        except MCPError:
            raise  # the upstream's own protocol error, passed through as it came
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            return _result(f"The upstream MCP server is unreachable: {exc}", error=True)

    async def _ask(self, decision: Decision, arguments: dict[str, Any]) -> types.CallToolResult:
        name = decision.tool
        try:
            run_id = run_id_for(self.policy.server, name, arguments, self.run_scope)
        except NotCanonical as exc:
            return _result(
                f"Not run: the arguments cannot be approved exactly ({exc}). Use plain JSON "
                "values (integers within ±2^53).",
                error=True,
            )
        tool = await self._tool(name)
        if tool is None:
            return _result(
                f"Not run: the upstream server has no tool {name!r}; no approval was requested.",
                error=True,
            )
        body: dict[str, Any] = {
            "run_id": run_id,
            "capability": decision.capability,
            "tool": {"name": name, "arguments": arguments},
            "presentation": self._presentation(decision, tool, arguments),
        }
        if self.policy.requested_by:
            body["requested_by"] = self.policy.requested_by
        if decision.approvers:
            body["approvers"] = list(decision.approvers)
        if decision.approval_ttl:
            body["approval_ttl"] = decision.approval_ttl
        try:
            record = await self.signoff.request(**body)
            if record.state == "pending" and self.wait > 0:
                record = await self.signoff.wait(record.id, self.wait, first=0.25, most=2.0)
            return await self._settle(record)
        except SignoffError as exc:
            return _result(
                f"Not run: signoff refused the approval request ({exc.code}: {exc}).", error=True
            )
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            return _result(
                f"Not run: the signoff service is unreachable ({type(exc).__name__}: {exc}); "
                "nothing was executed.",
                error=True,
            )

    def _presentation(
        self, decision: Decision, tool: types.Tool, arguments: Mapping[str, Any]
    ) -> dict[str, Any]:
        """What the human reads: the tool's own description and one field per argument, in
        key order (the presentation is hashed, so the same call must always look the same)."""
        server = self.policy.server
        title = decision.title or f"{decision.tool} (MCP server {server})"
        summary = (tool.description or "").strip() or f"Call the MCP tool {decision.tool}."
        fields = [
            {"label": (key or "(empty)")[:200], "value": _field_value(arguments[key])}
            for key in sorted(arguments)
        ]
        return {"title": title[:300], "summary": _cut(summary, 4000), "fields": fields}

    async def _settle(
        self, record: ApprovalRecord, *, claimed: bool = False
    ) -> types.CallToolResult:
        """Answer from the approval's state; an approved one is claimed and run here."""
        state = record.state
        note = record.raw.get("decision_note")
        meta = _meta(record)
        if state == "pending":
            return _result(
                "Waiting for human approval: this call has NOT been executed.\n"
                f"Tool: {record.tool['name']}\n"
                f"Approval: {record.id} (capability {record.capability})\n"
                f"Who decides: {record.assignee}\n"
                f"Decide by: {record.expires_at or 'no deadline'}\n"
                "Nothing has run. Once a human approves it, call this tool again with exactly "
                "the same arguments: it then runs once and returns its result. Asking again "
                "before the decision files no second request.",
                error=True,
                meta=meta,
            )
        if state == "approved":
            if claimed:  # handed back (released) while we looked: do not loop
                return _result(
                    f"Approved (approval {record.id}) but not run yet: another caller held it. "
                    "Call again with the same arguments to run it.",
                    error=True,
                    meta=meta,
                )
            return await self._execute(record)
        if state == "executed":
            return _replay(record, meta)
        if state == "failed":
            return _replay(record, meta)
        if state in ("executing", "outcome_unknown"):
            return _result(
                f"Approved and started (approval {record.id}), but no outcome is recorded "
                f"({'still running or interrupted' if state == 'executing' else 'interrupted'}). "
                "It will NOT be run again by asking again; a human must check what happened.",
                error=True,
                meta=meta,
            )
        if state == "rejected":
            who = record.decided_by or "a human"
            return _result(
                f"Rejected by {who}: {note or 'no reason given'}. The call was not executed.",
                error=True,
                meta=meta,
            )
        if state == "expired":
            return _result(
                f"Expired: nobody decided approval {record.id} in time ({record.expires_at}). "
                "The call was not executed.",
                error=True,
                meta=meta,
            )
        # cancelled, superseded (withdrawn, replaced, or the policy changed since approval)
        return _result(
            f"Not executed: the approval was {state}"
            + (f" ({note})" if note else "")
            + ". Nothing ran.",
            error=True,
            meta=meta,
        )

    async def _execute(self, record: ApprovalRecord) -> types.CallToolResult:
        try:
            claim = await self.signoff.claim(record.id, self.lease)
        except (NotPending, ApprovalExpired):
            # Another caller won the claim, the grant ran out, or the policy changed and
            # signoff superseded it: the record says which.
            return await self._settle(await self.signoff.get(record.id), claimed=True)
        except ApprovalCorrupt:
            return _result(
                f"Not run: the stored call of approval {record.id} no longer matches what was "
                "approved; signoff refused to hand it out.",
                error=True,
                meta=_meta(record),
            )
        approval = claim.approval
        tool = claim.tool
        if (
            record_hash(approval) != approval.hash
            or tool != approval.tool
            or (tool.get("name") != record.tool["name"])
        ):
            await self.signoff.release(record.id, claim.claim_token)
            return _result(
                f"Not run: approval {record.id} does not hash to what was approved.",
                error=True,
                meta=_meta(approval),
            )
        log.info("running approved call %s (approval %s)", tool["name"], record.id)
        try:
            result = await self._call_holding(claim, tool)
        except MCPError as exc:
            if exc.code in _NO_ANSWER:
                return self._unknown(record, approval, exc)
            # The upstream answered with a protocol error: it refused the call.
            stored = {"error": {"code": exc.code, "message": exc.message}}
            done = await self._complete(claim, "failed", stored)
            return _result(
                f"The upstream refused the approved call: {exc.message} (code {exc.code}).",
                error=True,
                meta=_meta(done or approval),
            )
        except Exception as exc:  # transport lost: it may or may not have run
            return self._unknown(record, approval, exc)
        outcome: Literal["succeeded", "failed"] = "failed" if result.is_error else "succeeded"
        done = await self._complete(claim, outcome, _stored(result))
        return result.model_copy(update={"meta": _merge_meta(result.meta, _meta(done or approval))})

    def _unknown(
        self, record: ApprovalRecord, approval: ApprovalRecord, exc: Exception
    ) -> types.CallToolResult:
        """No answer from the upstream: the call may have run. Nothing is completed, so the
        claim's lease lapses to `outcome_unknown` and signoff asks a human about a re-run."""
        log.error("approved call %s: no answer from the upstream: %r", record.id, exc)
        return _result(
            f"The approved call was sent to the upstream but no answer came back ({exc}). "
            "Its outcome is unknown, so it will not be run again; signoff asks a human once "
            "the claim's lease runs out.",
            error=True,
            meta=_meta(approval),
        )

    async def _call_holding(self, claim: Claim, tool: Mapping[str, Any]) -> types.CallToolResult:
        """Forward the claimed call, renewing the claim's lease while the upstream works."""
        answer: types.CallToolResult | Exception
        async with anyio.create_task_group() as group:
            group.start_soon(self._renew, claim)
            try:
                answer = _own(await self.upstream.call_tool(tool["name"], dict(tool["arguments"])))
            except Exception as exc:  # raised below, unwrapped from the task group's group
                answer = exc
            finally:
                group.cancel_scope.cancel()
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def _renew(self, claim: Claim) -> None:
        left = _seconds_until(claim.lease_until)
        interval = max(left / 3, 1.0) if left else 60.0
        while True:
            await anyio.sleep(interval)
            try:
                await self.signoff.renew(claim.approval.id, claim.claim_token)
            except Exception:  # exhausted, or signoff away: the call goes on regardless
                log.warning("could not renew the claim of %s", claim.approval.id, exc_info=True)
                return

    async def _complete(
        self, claim: Claim, outcome: Literal["succeeded", "failed"], stored: Any
    ) -> ApprovalRecord | None:
        """Record the outcome; retried, since a repeated completion is answered the same.
        If signoff stays away the row ends `outcome_unknown` and a human is asked: the
        result is still returned to the caller."""
        for attempt in range(4):
            try:
                return await self.signoff.complete(
                    claim.approval.id, claim.claim_token, outcome, stored
                )
            except SignoffError:
                log.exception("signoff refused the completion of %s", claim.approval.id)
                return None
            except (aiohttp.ClientError, OSError, TimeoutError):
                await anyio.sleep(0.5 * 2**attempt)
        log.error("could not record the outcome of %s", claim.approval.id)
        return None

    # -- the MCP server -------------------------------------------------------------------

    def server(self) -> Server[Any]:
        """A low-level MCP server whose tools/list and tools/call are this gateway."""

        async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            return types.ListToolsResult(tools=await self.list_tools())

        async def on_call_tool(
            ctx: Any, params: types.CallToolRequestParams
        ) -> types.CallToolResult:
            if params.task is not None:
                # No tasks capability is declared, so per MCP 2025-11-25 the call is
                # processed normally and answered with its result.
                log.debug("task augmentation requested for %s; answering directly", params.name)
            return await self.call_tool(params.name, params.arguments)

        from signoff_client.mcp import __version__

        return Server(
            "signoff-mcp",
            version=__version__,
            title=f"signoff gateway for {self.policy.server}",
            instructions=INSTRUCTIONS,
            on_list_tools=on_list_tools,
            on_call_tool=on_call_tool,
        )


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
) -> None:
    """Connect to the upstream and serve the gateway until the client goes (stdio) or the
    process is stopped (streamable HTTP)."""
    async with SignoffClient(signoff_url, api_key) as signoff, upstream.client() as client:
        gateway = Gateway(policy, signoff, client, run_scope=run_scope, wait=wait, lease=lease)
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


# -- results ----------------------------------------------------------------------------------


def _result(
    text: str, *, error: bool, meta: Mapping[str, Any] | None = None
) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        is_error=error,
        _meta={META_KEY: dict(meta)} if meta else None,
    )


def _own(result: types.CallToolResult) -> types.CallToolResult:
    """The upstream's result as the gateway's: without the upstream's `serverInfo` stamp
    (2026-07-28), which would otherwise stand in for the gateway's own."""
    if not result.meta or types.SERVER_INFO_META_KEY not in result.meta:
        return result
    meta = {k: v for k, v in result.meta.items() if k != types.SERVER_INFO_META_KEY}
    return result.model_copy(update={"meta": meta or None})


def _meta(record: ApprovalRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "state": record.state,
        "execution": record.execution,
        "hash": record.hash,
        "capability": record.capability,
        "assignee": record.assignee,
        "expires_at": record.expires_at,
        "decided_by": record.decided_by,
    }


def _merge_meta(existing: Mapping[str, Any] | None, approval: Mapping[str, Any]) -> dict[str, Any]:
    return {**(existing or {}), META_KEY: dict(approval)}


def _stored(result: types.CallToolResult) -> dict[str, Any]:
    """The upstream result as `complete` keeps it: content, structuredContent and isError as
    JSON; cut down to its text (with the full result's size and SHA-256) past 16 KiB."""
    data: dict[str, Any] = {
        "content": [
            c.model_dump(by_alias=True, mode="json", exclude_none=True) for c in result.content
        ],
        "isError": result.is_error,
    }
    if result.structured_content is not None:
        data["structuredContent"] = result.structured_content
    try:
        full = canonical_json(data)
    except NotCanonical:
        full = json.dumps(data, sort_keys=True, ensure_ascii=False).encode()
    else:
        if len(full) <= RESULT_LIMIT:
            return data
    text = "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))
    limit = 12_000
    while True:
        cut = {
            "truncated": True,
            "bytes": len(full),
            "sha256": hashlib.sha256(full).hexdigest(),
            "isError": result.is_error,
            "content": [{"type": "text", "text": _cut(text, limit)}],
        }
        if len(json.dumps(cut, ensure_ascii=False).encode()) <= RESULT_LIMIT or limit < 100:
            return cut
        limit //= 2


def _replay(record: ApprovalRecord, meta: dict[str, Any]) -> types.CallToolResult:
    """The recorded outcome of a call that already ran, returned instead of running it again."""
    outcome = record.raw.get("outcome") or {}
    stored = outcome.get("result")
    when = record.raw.get("executed_at") or "earlier"
    note = (
        f"[signoff-mcp] Recorded result of approval {record.id}: the approved call ran once "
        f"({when}) and was not run again."
    )
    if isinstance(stored, dict) and "error" in stored:
        error = stored["error"]
        return _result(
            f"The upstream refused the approved call: {error.get('message')} "
            f"(code {error.get('code')}).\n{note}",
            error=True,
            meta=meta,
        )
    if not isinstance(stored, dict) or not isinstance(stored.get("content"), list):
        return _result(
            f"The approved call ran once ({record.state}) but no result was recorded.\n{note}",
            error=record.state == "failed",
            meta=meta,
        )
    if stored.get("truncated"):
        note += f" The result was {stored.get('bytes')} bytes; only its text start was kept."
    try:
        result = types.CallToolResult.model_validate(
            {k: stored[k] for k in ("content", "structuredContent", "isError") if k in stored}
        )
    except ValueError:
        return _result(
            f"The approved call ran once; its recorded result is unreadable.\n{note}",
            error=record.state == "failed",
            meta=meta,
        )
    content = [*result.content, types.TextContent(type="text", text=note)]
    update = {
        "content": content,
        "is_error": result.is_error or record.state == "failed",
        "meta": _merge_meta(result.meta, meta),
    }
    return result.model_copy(update=update)


def _field_value(value: Any) -> Any:
    """An argument as a card field: scalars as they are, anything else as compact JSON."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int) and abs(value) <= 2**53 - 1:
        return value
    if isinstance(value, float):
        return value
    if isinstance(value, str):
        return _cut(value, 2000)
    try:
        text = canonical_json(value).decode()
    except NotCanonical:
        text = repr(value)
    return _cut(text, 2000)


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    more = len(text) - limit
    suffix = f"… ({more} more characters)"
    return text[: max(limit - len(suffix), 0)] + suffix


def _seconds_until(moment: str | None) -> float | None:
    if not moment:
        return None
    try:
        then = datetime.fromisoformat(moment.replace("Z", "+00:00"))
    except ValueError:
        return None
    return max((then - datetime.now(UTC)).total_seconds(), 0.0) or None
