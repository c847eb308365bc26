"""The gateway under bad input (issue 25, item 3): whatever a caller passes as a tool's name or
arguments, the answer is an MCP error result in words, never an exception (the gateway used
to raise RecursionError for arguments nested 5,000 deep and TypeError for a list), nothing
reaches the upstream and nothing is asked of a human, and the gateway goes on working.

`Gateway.call_tool` is driven directly for inputs the MCP wire cannot carry (the SDK's own
client refuses to send them); over the wire, the official client and a raw HTTP client reach
the same answers or the SDK's own JSON-RPC errors.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from signoff_client import SignoffClient
from tests.integrations.conftest import Deployment
from tests.integrations.loose_gateway import LooseShop, text


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
            [sys.executable, "-m", "signoff_client.mcp.cli", "serve",
             "--policy", str(shop.policy_path), "--transport", "streamable-http", "--port", "0",
             "--", *shop.upstream_command()],
            cwd=shop.tmp, env=env, stdout=out, stderr=out,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
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
