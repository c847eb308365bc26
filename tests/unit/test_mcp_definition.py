"""What an MCP approval binds and the checks on a call's input (signoff_client.mcp.definition),
without a server: the definition digest as docs/hashing.md specifies it, the card's fields,
near names, and argument checks that never recurse."""

from __future__ import annotations

import hashlib
import sys

import mcp_types as types
import pytest
import rfc8785

from signoff_client.mcp import parse_policy
from signoff_client.mcp.definition import (
    BadDefinition,
    ToolDefinition,
    argument_problem,
    json_problem,
    near_names,
    presentation,
)

SCHEMA = {"type": "object", "properties": {"order": {"type": "integer"}}}


def tool(**changes: object) -> types.Tool:
    fields = {"name": "refund_order", "description": "Refund an order.", "input_schema": SCHEMA}
    return types.Tool(**(fields | changes))  # type: ignore[arg-type]


def test_the_digest_is_sha256_of_the_canonical_definition() -> None:
    document = {
        "name": "refund_order",
        "title": None,
        "description": "Refund an order.",
        "inputSchema": SCHEMA,
    }
    expected = "sha256:" + hashlib.sha256(rfc8785.dumps(document)).hexdigest()
    assert ToolDefinition.of(tool()).digest == expected
    # Any change a human could read changes it: description, schema, title.
    digests = {
        ToolDefinition.of(t).digest
        for t in [
            tool(),
            tool(description="Refund an order and close the account."),
            tool(input_schema={**SCHEMA, "required": ["order"]}),
            tool(title="Refund"),
        ]
    }
    assert len(digests) == 4
    # Integers JCS cannot hold exactly still give a stable digest (sorted json.dumps).
    big = tool(input_schema={"type": "integer", "maximum": 2**64 - 1})
    assert ToolDefinition.of(big).digest == ToolDefinition.of(big).digest
    assert "18446744073709551615" in ToolDefinition.of(big).schema_text


def test_a_definition_no_human_could_be_shown_is_refused() -> None:
    deep: dict[str, object] = {}
    for _ in range(5000):
        deep = {"a": deep}
    with pytest.raises(BadDefinition, match="nested deeper than 64"):
        ToolDefinition.of(tool(input_schema={"type": "object", "properties": deep}))
    with pytest.raises(BadDefinition, match="larger than"):
        ToolDefinition.of(tool(description="x" * (2 * 1024 * 1024)))


def test_the_card_shows_the_arguments_then_the_tool() -> None:
    policy = parse_policy('[gateway]\nserver = "shop"\n')
    definition = ToolDefinition.of(tool(title="Refund"))
    shown = presentation("shop", policy.decide("refund_order"), definition, {"order": 5, "a": [1]})
    assert shown["summary"] == "Refund an order."
    assert [f["label"] for f in shown["fields"]] == [
        "a", "order", "MCP tool title", "MCP tool input schema", "MCP tool definition"
    ]  # fmt: skip
    assert shown["fields"][-1]["value"] == definition.digest
    long = ToolDefinition.of(tool(input_schema={"type": "object", "description": "d" * 5000}))
    schema = presentation("shop", policy.decide("refund_order"), long, {})["fields"][-2]["value"]
    assert len(schema) == 2000 and schema.endswith("more characters)")


@pytest.mark.parametrize(
    ("name", "near"),
    [
        ("Refund_Order", ["refund_order"]),
        (" refund_order\t", ["refund_order"]),
        ("refund_\u200border\u200b", ["refund_order"]),
        ("refund-order", ["refund_order"]),
        ("ＲＥＦＵＮＤ_ＯＲＤＥＲ", ["refund_order"]),  # fullwidth, folded by NFKC
        ("refund_orders", []),
        ("x" * 10_000, []),
    ],
)
def test_near_names_only_explain_a_refusal(name: str, near: list[str]) -> None:
    assert near_names(name, ["refund_order", "list_orders"]) == near


def test_argument_checks_do_not_recurse_and_stop_early() -> None:
    limit = sys.getrecursionlimit()
    deep: list[object] = []
    for _ in range(limit * 5):
        deep = [deep]
    assert "nested deeper than 64 levels" in (argument_problem({"x": deep}) or "")
    assert argument_problem(nested := {"a": {"b": [1, "two", None, True, 2.5]}}) is None
    assert nested  # the walrus keeps the example readable
    assert argument_problem([1]) == "the arguments must be a JSON object, not an array"
    assert argument_problem(None) == "the arguments must be a JSON object, not a NoneType"
    # A huge container is refused once the running size passes the bound, without walking
    # (or naming) every element: the path in the message stays short.
    problem = json_problem({"ids": list(range(10_000_000))}, max_bytes=1024)
    assert problem == "arguments: larger than 1024 bytes as JSON"
    key = "k" * 50
    long_path = json_problem({key: {key: {key: {key: {key: float("nan")}}}}})
    assert long_path is not None and len(long_path) < 250 and "…" in long_path
