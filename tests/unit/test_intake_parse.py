"""Parsing and validating the create body (docs/reference.md, "HTTP API"): the pure part
of bot.intake, shared by `POST /v1/approvals` and `signoff approvals request`."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import pytest
import rfc8785

from bot.canonical import approval_hash
from bot.errors import InvalidRequest, MalformedJson, NotCanonical, RequestTooLarge
from bot.intake import parse_request, validate_request
from bot.validation import MAX_REQUEST_BYTES, parse_json
from tests.support.samples import request_body


def _invalid(document: Any) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        validate_request(document)
    return info.value


def _failing_fields(document: Any) -> set[str]:
    error = _invalid(document)
    assert type(error) is InvalidRequest
    return {f["field"] for f in error.fields}


# -- parse_json --------------------------------------------------------------------------


def test_parse_json_reads_a_valid_body() -> None:
    body = request_body()
    assert parse_json(json.dumps(body).encode()) == body
    assert parse_json(json.dumps(body)) == body


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_parse_json_refuses_non_json_number_literals(literal: str) -> None:
    with pytest.raises(NotCanonical) as info:
        parse_json(f'{{"tool": {{"arguments": {{"amount": [1, {literal}]}}}}}}')
    assert literal in info.value.message


def test_parse_json_refuses_duplicate_keys() -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_json(b'{"run_id": "a", "tool": {"name": "x", "name": "y"}}')
    assert "duplicate key 'name'" in info.value.message


@pytest.mark.parametrize(
    "text",
    [b"", b"{", b'{"run_id": }', b"{'run_id': 'a'}", b'{"a": 1,}', b'{"a": "\xff"}'],
)
def test_parse_json_refuses_malformed_json(text: bytes) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_json(text)
    assert type(info.value) is MalformedJson
    assert "malformed JSON" in info.value.message


def test_parse_json_refuses_bodies_over_the_limit() -> None:
    document = json.dumps({"pad": "x" * 200}).encode()
    assert parse_json(document, limit=len(document)) == {"pad": "x" * 200}
    with pytest.raises(RequestTooLarge) as info:
        parse_json(document, limit=len(document) - 1)
    assert str(len(document)) in info.value.message
    assert str(len(document) - 1) in info.value.message


def test_parse_json_limit_counts_bytes_not_characters() -> None:
    text = json.dumps("€" * 10, ensure_ascii=False)  # 12 characters, 32 bytes
    assert len(text) <= 20 < len(text.encode())
    with pytest.raises(RequestTooLarge):
        parse_json(text, limit=20)


def test_parse_json_default_limit_applies() -> None:
    oversized = b'"' + b"x" * MAX_REQUEST_BYTES + b'"'
    with pytest.raises(RequestTooLarge):
        parse_json(oversized)


@pytest.mark.parametrize("opening", ["[", '{"a":'])
def test_parse_json_deep_nesting_is_invalid_not_a_crash(opening: str) -> None:
    text = opening * 100_000
    with pytest.raises(InvalidRequest) as info:
        parse_json(text, limit=len(text))
    assert type(info.value) is MalformedJson


# -- validate_request: what is refused ---------------------------------------------------


@pytest.mark.parametrize("missing", ["run_id", "capability", "tool", "presentation"])
def test_required_fields(missing: str) -> None:
    body = request_body()
    del body[missing]
    assert missing in _failing_fields(body)


def test_unknown_top_level_field() -> None:
    assert "colour" in _failing_fields(request_body(colour="blue"))


def test_unknown_field_inside_tool() -> None:
    body = request_body()
    body["tool"]["timeout"] = 5
    assert "tool.timeout" in _failing_fields(body)


def test_unknown_field_inside_presentation() -> None:
    body = request_body()
    body["presentation"]["colour"] = "red"
    assert "presentation.colour" in _failing_fields(body)


def test_unknown_field_inside_a_presentation_field() -> None:
    body = request_body()
    body["presentation"]["fields"][0]["hint"] = "x"
    assert "presentation.fields.0.hint" in _failing_fields(body)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"run_id": 5}, "run_id"),
        ({"run_id": ""}, "run_id"),
        ({"tool": {"name": "t", "arguments": [1, 2]}}, "tool.arguments"),
        ({"tool": {"name": "", "arguments": {}}}, "tool.name"),
        ({"tool": {"arguments": {}}}, "tool.name"),
        ({"presentation": {"summary": "no title"}}, "presentation.title"),
        ({"presentation": {"title": 7}}, "presentation.title"),
        ({"presentation": "Refund"}, "presentation"),
        ({"reason": ["a"]}, "reason"),
        ({"required_approvals": 0}, "required_approvals"),
        ({"required_approvals": "2"}, "required_approvals"),
        ({"required_approvals": True}, "required_approvals"),
        ({"approvers": []}, "approvers"),
        ({"approvers": "alice"}, "approvers"),
    ],
)
def test_wrong_types_and_values_are_refused(changes: dict[str, Any], field: str) -> None:
    assert field in _failing_fields(request_body(**changes))


def test_interrupted_side_effect_kind_cannot_be_requested() -> None:
    assert "kind" in _failing_fields(request_body(kind="interrupted_side_effect"))


def test_tool_call_kind_may_be_stated() -> None:
    assert validate_request(request_body(kind="tool_call")).body.kind == "tool_call"


@pytest.mark.parametrize(
    "capability", ["payments refund", "payments.", ".payments", "payments..refund", "pay*"]
)
def test_malformed_capability_is_refused(capability: str) -> None:
    assert "capability" in _failing_fields(request_body(capability=capability))


@pytest.mark.parametrize("name", ["approval_ttl", "grant_ttl"])
def test_bad_duration_is_refused(name: str) -> None:
    error = _invalid(request_body(**{name: "3 fortnights"}))
    assert name in {f["field"] for f in error.fields}
    assert "3 fortnights" in error.message


def test_absurd_duration_is_an_invalid_request() -> None:
    assert "approval_ttl" in _failing_fields(request_body(approval_ttl="1000000000d"))


@pytest.mark.parametrize("url", ["ftp://x", "hooks.example/x", "javascript:alert(1)"])
def test_callback_url_must_be_http(url: str) -> None:
    assert "callback_url" in _failing_fields(request_body(callback_url=url))


def test_not_a_json_object_is_refused() -> None:
    assert _failing_fields([request_body()]) == {"(body)"}


def test_every_failing_field_is_listed() -> None:
    body = request_body(run_id=5, colour="blue", callback_url="ftp://x")
    del body["presentation"]
    error = _invalid(body)
    assert {"run_id", "colour", "callback_url", "presentation"} <= {
        f["field"] for f in error.fields
    }
    assert all(f["message"] for f in error.fields)


@pytest.mark.parametrize(
    ("where", "value"),
    [
        ("argument", float("inf")),
        ("argument", 2**60),
        ("argument", "\ud800"),
        ("field", float("inf")),
        ("step", 2**60),
    ],
)
def test_values_that_cannot_be_hashed_exactly_are_refused(where: str, value: Any) -> None:
    body = request_body()
    if where == "argument":
        body["tool"]["arguments"]["amount"] = value
    elif where == "field":
        body["presentation"]["fields"][0]["value"] = value
    else:
        body["step"] = {"cursor": value}
    with pytest.raises(NotCanonical):
        validate_request(body)


def test_number_overflowing_to_infinity_in_the_body_is_refused() -> None:
    text = json.dumps(request_body()).replace("12000", "1e400")
    assert "1e400" in text
    with pytest.raises(NotCanonical):
        parse_request(text.encode())


def test_integer_beyond_exact_double_range_in_the_body_is_refused() -> None:
    text = json.dumps(request_body()).replace("12000", str(2**60))
    with pytest.raises(NotCanonical):
        parse_request(text.encode())


def test_largest_exact_integer_is_accepted() -> None:
    body = request_body()
    body["tool"]["arguments"]["amount"] = 2**53 - 1
    assert validate_request(body).body.tool.arguments["amount"] == 2**53 - 1


def test_deeply_nested_arguments_are_refused_not_crashing() -> None:
    nested: Any = "leaf"
    for _ in range(500):
        nested = {"n": nested}
    body = request_body()
    body["tool"]["arguments"] = {"deep": nested}
    with pytest.raises(InvalidRequest):
        parse_request(json.dumps(body).encode())


# -- validate_request: what is kept ------------------------------------------------------


def test_valid_body_is_read_faithfully() -> None:
    sent = request_body(
        step={"cursor": 3},
        approval_ttl="48h",
        grant_ttl="2h",
        required_approvals=1,
        approvers=["group:finance"],
        preconditions={"balance_at_least": 12000},
        resume={"thread": "t-1"},
        callback_url="https://agents.example/hooks",
    )
    body = validate_request(copy.deepcopy(sent)).body
    assert body.run_id == sent["run_id"]
    assert body.capability == "payments.refund"
    assert body.tool.name == "stripe.refunds.create"
    assert body.tool.arguments == sent["tool"]["arguments"]
    assert body.kind == "tool_call"
    assert body.step == {"cursor": 3}
    assert body.approval_ttl == "48h"
    assert body.approvers == ["group:finance"]
    assert body.requested_by == "sam"
    assert body.preconditions == sent["preconditions"]
    assert body.resume == sent["resume"]
    assert body.callback_url == "https://agents.example/hooks"


def test_raw_presentation_is_exactly_what_was_sent() -> None:
    sent = request_body(presentation={"title": "Refund €120.00 to Zoë"})
    sent_copy = copy.deepcopy(sent["presentation"])

    parsed = validate_request(sent)

    assert parsed.raw_presentation is sent["presentation"]
    assert parsed.raw_presentation == sent_copy  # no summary/fields defaults added
    assert parsed.body.presentation.summary is None  # the model has defaults; the raw does not


def test_hash_over_raw_presentation_matches_what_the_agent_computes() -> None:
    text = json.dumps(request_body(presentation={"title": "Refund"}))
    parsed = parse_request(text.encode())
    sent = json.loads(text)
    agent_side = hashlib.sha256(
        rfc8785.dumps(
            {
                "kind": "tool_call",
                "capability": sent["capability"],
                "presentation": sent["presentation"],
                "tool": sent["tool"],
            }
        )
    ).hexdigest()

    ours = approval_hash(
        parsed.body.kind,
        parsed.body.capability,
        parsed.raw_presentation,
        parsed.body.tool.name,
        parsed.body.tool.arguments,
    )
    assert ours == agent_side
    # Hashing the validated model (with its defaults filled in) would not match.
    assert parsed.body.presentation.model_dump() != sent["presentation"]


def test_parse_request_uses_the_limit() -> None:
    data = json.dumps(request_body()).encode()
    assert parse_request(data, limit=len(data)).body.run_id == "run-1"
    with pytest.raises(RequestTooLarge):
        parse_request(data, limit=len(data) - 1)


@pytest.mark.parametrize("url", ["http://", "https://?x", "ftp://host/x", "host/x"])
def test_callback_url_needs_a_scheme_and_host(url: str) -> None:
    assert "callback_url" in _failing_fields(request_body(callback_url=url))


@pytest.mark.parametrize("field", ["run_id", "reason", "requested_by"])
def test_nul_in_a_text_field_is_refused_on_every_database(field: str) -> None:
    # PostgreSQL text cannot store U+0000 and SQLite can: refuse it before either sees it.
    assert field in _failing_fields(request_body(**{field: "a\x00b"}))


def test_nul_in_the_tool_name_is_refused() -> None:
    body = request_body(tool={"name": "x\x00", "arguments": {}})
    assert "tool.name" in _failing_fields(body)
