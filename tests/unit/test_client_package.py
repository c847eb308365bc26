"""signoff-client against the server it talks to: the same error classes and codes, the same
request hash on the same vectors (fixed, and generated), and an import that loads nothing of
the server."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bot.errors as server_errors
import signoff_client.errors as client_errors
from bot.canonical import approval_hash as server_hash
from bot.canonical import canonical_json as server_canonical
from signoff_client import approval_hash as client_hash
from signoff_client import canonical_json as client_canonical
from signoff_client import record_hash

# Raised inside the server only (start-up, the outbox, the web pages); never an API answer.
SERVER_ONLY = {
    "ConfigError", "SchemaOutOfDate", "DeliveryFailed", "Undeliverable", "RetryLater",
    "SignInRefused",  # the web surface's, never an API answer
}  # fmt: skip
# Raised by the client only (verifying a webhook it received).
CLIENT_ONLY = {"BadWebhookSignature"}


def _classes(module: Any) -> dict[str, type[Exception]]:
    root = module.SignoffError
    return {
        name: value
        for name, value in vars(module).items()
        if isinstance(value, type) and issubclass(value, root)
    }


def test_the_client_has_every_error_the_api_answers_with_the_same_code_and_parent() -> None:
    server, client = _classes(server_errors), _classes(client_errors)
    assert set(server) - SERVER_ONLY == set(client) - CLIENT_ONLY
    for name in set(server) - SERVER_ONLY:
        ours, theirs = server[name], client[name]
        assert ours.code == theirs.code, name  # type: ignore[attr-defined]
        assert ours.__mro__[1].__name__ == theirs.__mro__[1].__name__, name


@pytest.mark.parametrize(
    ("code", "details", "cls"),
    [
        ("not_pending", {"state": "executing", "decided_by": "alice"}, client_errors.NotPending),
        ("expired", {"state": "expired"}, client_errors.ApprovalExpired),
        ("policy_changed", {"state": "superseded"}, client_errors.PolicyChanged),
        (
            "invalid_request",
            {"fields": [{"field": "run_id", "message": "x"}]},
            client_errors.InvalidRequest,
        ),
        ("not_canonical", {"fields": []}, client_errors.NotCanonical),
        ("not_an_approver", {"assignee": "group:finance"}, client_errors.NotAnApprover),
        ("unauthorized", {}, client_errors.Unauthorized),
        ("approval_corrupt", {}, client_errors.ApprovalCorrupt),
    ],
)
def test_server_errors_come_back_as_the_same_classes(
    code: str, details: dict[str, Any], cls: type[client_errors.SignoffError]
) -> None:
    error = client_errors.error_from_code(code, "because", details)
    assert type(error) is cls
    assert (error.code, error.message, error.details) == (code, "because", details)
    if isinstance(error, client_errors.NotPending):
        assert (error.state, error.decided_by) == (details["state"], details.get("decided_by"))
    if isinstance(error, client_errors.InvalidRequest):
        assert error.fields == details["fields"]


def test_an_unknown_code_stays_visible() -> None:
    error = client_errors.error_from_code("rate_limited", "slow down", {})
    assert type(error) is client_errors.SignoffError
    assert error.code == "rate_limited"


# The vectors docs/hashing.md walks through, and the corners of JCS: key order by UTF-16 code
# units, number forms, escapes, non-ASCII text.
VECTORS: list[tuple[str, str, Any, str, Any]] = [
    ("tool_call", "payments.refund", {"title": "Refund €120.00 to Zoë"},
     "stripe.refunds.create", {"charge": "ch_1", "amount": 12000}),
    ("tool_call", "a", {"title": "t", "fields": [{"label": "x", "value": None}]}, "n", {}),
    ("interrupted_side_effect", "x.y", {"title": "\u2028 \"q\" \\ \n"}, "t",
     {"\U0001f600": 1, "\ue000": 2, "a": [1.5, -0.0, 1e21, 1e-7, 9007199254740991, True]}),
]  # fmt: skip


@pytest.mark.parametrize("vector", VECTORS)
def test_client_and_server_hash_the_same_vectors_alike(vector: tuple[Any, ...]) -> None:
    assert client_hash(*vector) == server_hash(*vector)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=("Cs",))),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.text(st.characters(exclude_categories=("Cs",)), max_size=8), inner, max_size=4
        )
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(value=json_values)
def test_client_and_server_canonicalise_any_json_value_alike(value: Any) -> None:
    try:
        expected = server_canonical(value)
    except server_errors.NotCanonical:
        with pytest.raises(client_errors.NotCanonical):
            client_canonical(value)
        return
    assert client_canonical(value) == expected


@pytest.mark.parametrize(
    "value",
    [math.nan, math.inf, 2**53, -(2**53), 1e16, "\ud800", {1: "x"}, {"a": {1, 2}}, b"bytes"],
    ids=["nan", "inf", "2^53", "-2^53", "1e16", "lone surrogate", "int key", "set", "bytes"],
)
def test_client_and_server_refuse_the_same_values(value: Any) -> None:
    with pytest.raises(server_errors.NotCanonical):
        server_canonical(value)
    with pytest.raises(client_errors.NotCanonical):
        client_canonical(value)


def test_a_record_hashes_to_its_stored_hash() -> None:
    kind, capability, presentation, name, arguments = VECTORS[0]
    record = {
        "kind": kind,
        "capability": capability,
        "presentation": presentation,
        "tool": {"name": name, "arguments": arguments},
    }
    assert record_hash(record) == server_hash(*VECTORS[0])
    record["tool"]["arguments"] = {**arguments, "amount": 12001}
    assert record_hash(record) != server_hash(*VECTORS[0])


def test_importing_the_client_loads_no_server_module_nor_its_dependencies() -> None:
    code = (
        "import json, sys, signoff_client, signoff_client.client, signoff_client.webhooks;"
        "print(json.dumps(sorted(sys.modules)))"
    )
    loaded = json.loads(subprocess.check_output([sys.executable, "-c", code], text=True))
    roots = {name.split(".")[0] for name in loaded}
    server = {"bot", "store", "channels", "sqlalchemy", "alembic", "asyncpg", "aiosqlite",
              "slack_bolt", "slack_sdk", "telegram", "pydantic", "prometheus_client"}  # fmt: skip
    assert roots & server == set()
    assert roots & {"mcp", "agents", "langgraph"} == set()  # integrations load on demand


@pytest.mark.parametrize("question", [{"options": ["Yes", "No"]}, {}])
def test_a_question_hashes_as_the_server_hashes_it(question: dict[str, Any]) -> None:
    shown = {"title": "Close ticket 8812?"}
    expected = server_hash("question", "tools.ask", shown, "", {}, question)
    assert client_hash("question", "tools.ask", shown, "", {}, question) == expected
    # The question is what is hashed, not a call: other options are another hash.
    assert client_hash("question", "tools.ask", shown, "", {}, {"options": ["A", "B"]}) != expected
    record = {"kind": "question", "capability": "tools.ask", "presentation": shown,
              "tool": None, "question": question}  # fmt: skip
    assert record_hash(record) == expected
