"""The gateway under bad input (issue 25, item 3): whatever a caller passes as a tool's name or
arguments, the answer is an MCP error result in words, never an exception (the gateway used
to raise RecursionError for arguments nested 5,000 deep and TypeError for a list), nothing
reaches the upstream and nothing is asked of a human, and the gateway goes on working.

`Gateway.call_tool` is driven directly for inputs the MCP wire cannot carry (the SDK's own
client refuses to send them); over the wire, the official client and a raw HTTP client reach
the same answers or the SDK's own JSON-RPC errors. An upstream that never answers costs a call its
timeout, and the answer says the call may have run.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from signoff_client import SignoffClient
from tests.frameworks.loose_gateway import LooseShop, approval, text
from tests.support import prefork
from tests.support.agent_deployment import Deployment

# One signoff serve per database for the module, emptied before each test.
pytestmark = pytest.mark.shared_deployment


def nested(depth: int, leaf: Any = 1, *, lists: bool = False) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value] if lists else {"a": value}
    return value


BAD_CALLS: list[tuple[Any, Any, str]] = [
    # arguments nested far deeper than signoff (or any encoder's recursion) allows
    ("list_orders", nested(5000), "nested deeper than 64 levels"),
    ("refund_order", {"order": nested(5000)}, "nested deeper than 64 levels"),
    ("delete_customer", nested(5000), "nested deeper than 64 levels"),
    ("list_orders", {"x": nested(5000, lists=True)}, "nested deeper than 64 levels"),
    ("list_orders", nested(65), "nested deeper than 64 levels"),
    # arguments that are not an object
    ("list_orders", [1, 2], "must be a JSON object, not an array"),
    ("refund_order", "order=500", "must be a JSON object, not a string"),
    ("refund_order", 500, "must be a JSON object, not a number"),
    ("refund_order", 1.5, "must be a JSON object, not a number"),
    ("refund_order", True, "must be a JSON object, not a boolean"),
    # names that are not strings
    (5, {}, "a tool name must be a string, not int"),
    (None, {}, "a tool name must be a string, not NoneType"),
    (["list_orders"], {}, "a tool name must be a string, not list"),
    (b"list_orders", {}, "a tool name must be a string, not bytes"),
    # values JSON does not have
    ("list_orders", {"customer": float("nan")}, "not a JSON number"),
    ("list_orders", {"customer": float("inf")}, "not a JSON number"),
    ("list_orders", {1: "c-1"}, "key that is not a string"),
    ("list_orders", {"customer": {"c-1"}}, "set, which is not a JSON value"),
    ("list_orders", {"customer": b"c-1"}, "bytes, which is not a JSON value"),
    ("list_orders", {"customer": "\ud800"}, "lone surrogate"),
    ("refund_order", {"order": 2**60, "amount": 1}, "cannot be approved exactly"),
    # huge inputs
    ("list_orders", {"customer": "x" * (5 * 1024 * 1024)}, "larger than 4194304 bytes"),
    ("list_orders", {"ids": list(range(1_000_000))}, "larger than 4194304 bytes"),
    ("list_orders", {str(i): i for i in range(300_000)}, "larger than 4194304 bytes"),
    ("list_orders" * 1_000_000, {}, "lists no tool named"),
    ("", {}, "lists no tool named ''"),
]


@pytest.fixture
def shop(deployment: Deployment, tmp_path: Path) -> LooseShop:
    return LooseShop(deployment, tmp_path)


async def test_bad_input_is_an_error_result_in_words(
    shop: LooseShop, deployment: Deployment
) -> None:
    async with SignoffClient(deployment.url, deployment.api_key) as api:
        async with shop.gateway(api) as gateway:
            for name, arguments, says in BAD_CALLS:
                started = time.monotonic()
                answer = await gateway.call_tool(name, arguments)
                took = time.monotonic() - started
                label = (repr(name)[:40], type(arguments).__name__)
                assert isinstance(answer, types.CallToolResult), label
                assert answer.is_error, (label, answer)
                assert says in text(answer), (label, text(answer)[:300])
                assert len(text(answer)) < 1000, label  # the input is never echoed whole
                assert took < 5, (label, took)
            # Still working: a good call runs.
            good = await gateway.call_tool("list_orders", {"customer": "c-1"})
            assert not good.is_error, good
        assert (await api.list())[0] == []  # nothing was asked of a human
    assert [r["arguments"] for r in shop.ran()] == [{"customer": "c-1"}]


async def test_bad_input_over_the_wire(shop: LooseShop) -> None:
    """Through the official client and the gateway's stdio server: arguments too deep for
    signoff but within the SDK's parser are refused in words; arguments that are not an
    object are refused by the SDK (invalid params); the session goes on."""
    async with shop.agent() as agent:
        deep = await agent.call_tool("list_orders", nested(100))
        assert deep.is_error and "nested deeper than 64 levels" in text(deep)
        request = types.CallToolRequest.model_construct(
            method="tools/call",
            params=types.CallToolRequestParams.model_construct(name="list_orders", arguments=[1]),
        )
        with pytest.warns(UserWarning), pytest.raises(MCPError, match="Invalid request parameters"):
            await agent.session.send_request(request, types.CallToolResult)
        good = await agent.call_tool("list_orders", {"customer": "c-1"})
        assert not good.is_error, good
    assert [r["arguments"] for r in shop.ran()] == [{"customer": "c-1"}]


@pytest.fixture
def http_gateway(shop: LooseShop, deployment: Deployment) -> Iterator[str]:
    """The gateway served on streamable HTTP (its upstream on stdio), for raw requests."""
    log = shop.tmp / "gateway-http.log"
    env = {**deployment.env, "SIGNOFF_URL": deployment.url, "SIGNOFF_API_KEY": deployment.api_key}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [prefork.python(), "-m", "signoff_client.mcp.cli", "serve",
             "--policy", str(shop.policy_path), "--transport", "streamable-http", "--port", "0",
             "--", *shop.upstream_command()],
            cwd=shop.tmp, env=env, stdout=out, stderr=out,
        )  # fmt: skip
    try:
        # Room for a machine under load (the start took over 20 s beside other test runs); a
        # gateway that never starts still fails.
        deadline = time.monotonic() + 60
        while not (found := re.search(r"listening on (\S+)", log.read_text("utf-8", "replace"))):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        yield found.group(1)
    finally:
        proc.kill()
        proc.wait(10)


async def test_raw_json_nested_5000_deep_is_answered_over_http(
    shop: LooseShop, http_gateway: str
) -> None:
    """A hand-written request the SDK's client would never send: the gateway's server answers
    each with an error and keeps serving."""
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": "2025-11-25",
    }

    async with aiohttp.ClientSession() as http:

        async def post(body: bytes) -> tuple[int, str]:
            async with http.post(http_gateway, data=body, headers=headers | session) as answer:
                session.setdefault("mcp-session-id", answer.headers.get("mcp-session-id", ""))
                return answer.status, await answer.text()

        session: dict[str, str] = {}
        hello = {"protocolVersion": "2025-11-25", "capabilities": {},
                 "clientInfo": {"name": "raw", "version": "0"}}  # fmt: skip
        status, _ = await post(_rpc(1, "initialize", hello))
        assert status == 200
        await post(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode())

        deep = b'{"a":' * 5000 + b"1" + b"}" * 5000
        status, body = await post(
            b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"list_orders",'
            b'"arguments":' + deep + b"}}"
        )
        assert status == 400 and "Parse error" in body, (status, body[:300])
        status, body = await post(_rpc(3, "tools/call", {"name": "list_orders", "arguments": [1]}))
        assert status == 200 and "Invalid request parameters" in body, body[:300]
        status, body = await post(
            _rpc(4, "tools/call", {"name": "list_orders", "arguments": nested(100)})
        )
        assert status == 200 and "nested deeper than 64 levels" in body, body[:300]
        status, body = await post(
            _rpc(5, "tools/call", {"name": "list_orders", "arguments": {"customer": "c-1"}})
        )
        assert status == 200 and "list_orders ran with" in body, body[:300]
    assert [r["arguments"] for r in shop.ran()] == [{"customer": "c-1"}]


def _rpc(ident: int, method: str, params: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params}).encode()


async def test_an_integer_too_long_for_a_parser_is_refused(
    shop: LooseShop, deployment: Deployment
) -> None:
    """An integer of more than 4,300 digits passed the argument check; the upstream could not
    parse the request, answered a parse error with no id, and the gateway waited forever.
    Now it is refused in words before anything is forwarded or asked; 4,300 digits pass."""
    async with SignoffClient(deployment.url, deployment.api_key) as api:
        async with shop.gateway(api) as gateway:
            for name, arguments in [
                ("list_orders", {"customer": 10**5000}),
                ("list_orders", {"customer": [1, {"id": -(10**4300)}]}),
                ("refund_order", {"order": 10**4300, "amount": 1}),
            ]:
                with anyio.fail_after(10):
                    answer = await gateway.call_tool(name, arguments)
                says = text(answer)
                assert answer.is_error and says.startswith("Not run:"), says[:300]
                assert "integer of more than 4,300 digits" in says, says[:300]
            with anyio.fail_after(10):
                fits = await gateway.call_tool("list_orders", {"customer": 10**4300 - 1})
            assert not fits.is_error, text(fits)[:300]
        assert (await api.list())[0] == []
    assert [r["arguments"] for r in shop.ran()] == [{"customer": 10**4300 - 1}]


@pytest.fixture
def shop_on(deployment_on: Deployment, tmp_path: Path) -> LooseShop:
    return LooseShop(deployment_on, tmp_path)


async def test_an_upstream_that_never_answers_costs_the_call_timeout(
    shop_on: LooseShop, deployment_on: Deployment
) -> None:
    """`signoff-mcp serve --call-timeout 1` in front of an upstream that records a call and
    never answers it: an allowed call and an approved gated call each end after a second,
    saying that the call was sent and may have run (never "not run"); the gated one is left
    started, for signoff to ask a human about, and is not run again."""
    shop, deployment = shop_on, deployment_on
    hang = {"order": 9, "amount": 1, "hang": True}
    async with (
        shop.agent("--call-timeout", "1") as agent,
        SignoffClient(deployment.url, deployment.api_key) as api,
    ):
        with anyio.fail_after(20):
            allowed = await agent.call_tool("list_orders", {"customer": "c-1", "hang": True})
        says = text(allowed)
        assert allowed.is_error and "no answer came from the upstream within 1 s" in says, says
        assert "may have run" in says and "not run" not in says.lower()

        waiting = approval(await agent.call_tool("refund_order", hang))
        await deployment.approve_async(waiting["id"], waiting["hash"])
        with anyio.fail_after(20):
            gated = await agent.call_tool("refund_order", hang)
        says = text(gated)
        assert gated.is_error and "sent to the upstream, so it may have run" in says, says
        assert "within 1 s" in says and "not run" not in says.lower()
        record = await api.get(waiting["id"])
        assert record.state == "executing" and record.execution == "started"
        again = await agent.call_tool("refund_order", hang)
        assert again.is_error and "no outcome is recorded" in text(again)
    assert [r["tool"] for r in shop.ran()] == ["list_orders", "refund_order"]


async def test_the_gateways_own_failures_are_told_as_its_own(
    shop: LooseShop, deployment: Deployment
) -> None:
    """A tool name with a lone surrogate is refused with an answer that can be sent (its
    `_meta` used to hold the raw name, which no encoder takes); an upstream that goes away
    mid-call gets an answer in the gateway's words (that call may have run), not the SDK's
    "Connection closed" passed off as the upstream's own JSON-RPC error."""
    async with SignoffClient(deployment.url, deployment.api_key) as api:
        async with shop.gateway(api) as gateway:
            odd = await gateway.call_tool("list_orders\ud800", {})
            assert odd.is_error and "lists no tool named" in text(odd)
            sent = json.loads(odd.model_dump_json(by_alias=True, exclude_none=True))
            assert sent["_meta"]["signoff/approval"]["tool"] == "list_orders\\ud800"

            gone = await gateway.call_tool("list_orders", {"customer": "c-1", "exit": True})
            says = text(gone)
            assert gone.is_error and "connection to the upstream closed" in says, says
            assert "may have run" in says
            later = await gateway.call_tool("drop_table", {"table": "t"})
            assert later.is_error  # denied by policy before anything is sent
    assert [r["arguments"] for r in shop.ran()] == [{"customer": "c-1", "exit": True}]
