"""What an MCP approval binds and the checks on a call's input (signoff_client.mcp.definition),
without a server: the definition digest as docs/hashing.md specifies it, the card's fields,
near names, and argument checks that never recurse."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterator

import mcp_types as types
import pytest
import rfc8785

from signoff_client.mcp import cli, parse_policy
from signoff_client.mcp.definition import (
    BadDefinition,
    ToolDefinition,
    argument_label,
    argument_problem,
    json_problem,
    near_names,
    presentation,
    presented_digest,
    shown_name,
)
from signoff_client.mcp.gateway import CALL_TIMEOUT, LIST_TIMEOUT

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
        'Argument "a"', 'Argument "order"', "MCP tool title", "MCP tool input schema",
        "MCP tool definition",
    ]  # fmt: skip
    assert shown["fields"][-1]["value"] == definition.digest
    assert presented_digest(shown) == definition.digest
    # What the digest binds is shown whole: a long schema, a description past the summary's
    # 4,000 characters (in a field the summary names).
    long = ToolDefinition.of(
        tool(description="d" * 5000, input_schema={"type": "object", "description": "s" * 5000})
    )
    shown = presentation("shop", policy.decide("refund_order"), long, {})
    fields = {f["label"]: f["value"] for f in shown["fields"]}
    assert fields["MCP tool input schema"] == long.schema_text and len(long.schema_text) > 5000
    assert fields["MCP tool description"] == "d" * 5000
    assert "MCP tool description" in shown["summary"] and len(shown["summary"]) < 4000
    again = presentation(
        "shop", policy.decide("refund_order"), definition, {}, asked_again_after="apr-1"
    )
    assert {"label": "Asked again after", "value": "apr-1"} in again["fields"]


@pytest.mark.parametrize(
    ("key", "label"),
    [
        ("order", 'Argument "order"'),
        ("", 'Argument ""'),
        ("MCP tool definition", 'Argument "MCP tool definition"'),
        ("x\nMCP tool definition", 'Argument "x\\nMCP tool definition"'),
        ('say "hi"', 'Argument "say \\"hi\\""'),
    ],
)
def test_an_argument_never_passes_for_a_field_of_the_gateway(key: str, label: str) -> None:
    assert argument_label(key) == label


def test_a_long_argument_key_is_cut_within_the_servers_label_bound() -> None:
    label = argument_label("k" * 500)
    assert len(label) <= 200 and label.endswith("(500 characters)")


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


class _Counted(list[int]):
    """A list that counts the elements a walk takes from it."""

    taken = 0

    def __iter__(self) -> Iterator[int]:
        for item in super().__iter__():
            self.taken += 1
            yield item


def test_argument_checks_do_not_recurse_and_stop_early() -> None:
    limit = sys.getrecursionlimit()
    deep: list[object] = []
    for _ in range(limit * 5):
        deep = [deep]
    assert "nested deeper than 64 levels" in (argument_problem({"x": deep}) or "")
    assert argument_problem({"a": {"b": [1, "two", None, True, 2.5]}}) is None
    assert argument_problem([1]) == "the arguments must be a JSON object, not an array"
    assert argument_problem(None) == "the arguments must be a JSON object, not a NoneType"
    # A huge container is refused once the running size passes the bound: the walk stops
    # there, without taking (or naming) the rest, so the path in the message stays short.
    ids = _Counted(range(1_000_000))
    problem = json_problem({"ids": ids}, max_bytes=1024)
    assert problem == "arguments: larger than 1024 bytes as JSON"
    assert 0 < ids.taken < 1024
    key = "k" * 50
    long_path = json_problem({key: {key: {key: {key: {key: float("nan")}}}}})
    assert long_path is not None and len(long_path) < 250 and "…" in long_path


def test_integers_are_bounded_by_what_a_parser_reads() -> None:
    assert argument_problem({"n": 10**4300 - 1}) is None
    assert argument_problem({"n": -(10**4300 - 1)}) is None
    for n in (10**4300, -(10**4300), 10**100_000):
        assert "integer of more than 4,300 digits" in (argument_problem({"n": [n]}) or "")
    assert argument_problem({"n": True}) is None  # a boolean, not an integer


def test_a_name_is_shown_as_text_any_encoder_takes() -> None:
    assert shown_name("refund_order") == "refund_order"
    assert shown_name("x\ud800") == "x\\ud800"
    shown_name("x\ud800").encode("utf-8")
    assert len(shown_name("n" * 1000)) == 120


def test_the_cli_defaults_are_the_gateways() -> None:
    assert (cli.CALL_TIMEOUT, cli.LIST_TIMEOUT) == (CALL_TIMEOUT, LIST_TIMEOUT)


def test_ask_human_is_off_unless_the_policy_turns_it_on() -> None:
    from signoff_client.mcp import PolicyError

    assert parse_policy('[gateway]\nserver = "shop"\n').ask_human is None
    on = parse_policy('[gateway]\nserver = "shop"\nask_human = true\n')
    assert on.ask_human == "mcp.shop.ask_human"
    routed = parse_policy('[gateway]\nserver = "shop"\nask_human = "support.questions"\n')
    assert routed.ask_human == "support.questions"
    with pytest.raises(PolicyError, match=r"policy:3: gateway.ask_human must be true"):
        parse_policy('[gateway]\nserver = "shop"\nask_human = "not a capability"\n')
