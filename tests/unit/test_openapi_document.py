"""bot/openapi.json, the OpenAPI 3.1 description of the agent API that the server serves at
GET /v1/openapi.json, is valid and says what the handlers do:

- it is a valid OpenAPI 3.1 document (checked against the OpenAPI 3.1 schema schemathesis
  ships, with every schema in it checked against JSON Schema 2020-12), every `$ref`
  resolves, and schemathesis loads every operation;
- its paths and methods are exactly the routes `signoff serve` registers: the agent API
  (bot.api.add_routes) and health, readiness and metrics (bot.app.build_app);
- the record schema has exactly the keys of bot.model.public_record, all required, each
  nullable exactly where its column is, and it accepts records in every shape;
- every status each operation can answer is documented, and the error codes documented for
  each status are exactly the ones the API answers with it.

What it says of request bodies and parameters is tests/unit/test_openapi_requests.py's.
(The acceptance test tests/acceptance/test_openapi.py holds a running server to it.)
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import jsonschema_rs
import pytest
import schemathesis
from schemathesis.specs.openapi.definitions import OPENAPI_31_VALIDATOR

from bot import api, errors
from bot.embed_tokens import EmbedKeyRequired
from bot.errors import SignoffError
from bot.model import Execution, Kind, State, public_record
from store.schema import approvals
from tests.support.openapi_spec import (
    COMPONENTS,
    SPEC,
    SPEC_PATH,
    Routes,
    component,
    deref,
    operations,
    resolve,
    served_routes,
    walk,
)
from tests.support.samples import RECORD_NOW, approval_record

# -- a valid OpenAPI 3.1 document ---------------------------------------------------------------


def test_the_document_is_valid_openapi_3_1() -> None:
    assert SPEC["openapi"] == "3.1.0"
    OPENAPI_31_VALIDATOR.validate(SPEC)
    # The OpenAPI schema leaves Schema Objects to JSON Schema: check each one against it.
    schemas = list(COMPONENTS["schemas"].values())
    schemas += [
        node["schema"] for _, node in walk(SPEC) if isinstance(node, dict) and "schema" in node
    ]
    for schema in schemas:
        jsonschema_rs.meta.validate(schema)
    for where, node in walk(SPEC):
        if isinstance(node, dict) and isinstance(node.get("$ref"), str):
            assert resolve(node["$ref"]) is not None, where
    loaded = schemathesis.openapi.from_dict(copy.deepcopy(SPEC))
    labels = [result.ok().label for result in loaded.get_all_operations()]
    assert len(labels) == len(list(operations()))


def test_the_document_is_tidy_json_with_two_space_indents() -> None:
    text = SPEC_PATH.read_text("utf-8")
    assert text.endswith("}\n")
    assert "\t" not in text
    for number, line in enumerate(text.splitlines(), 1):
        indent = len(line) - len(line.lstrip(" "))
        assert indent % 2 == 0, f"line {number}: {line!r}"
        assert line == line.rstrip(), f"line {number} ends in spaces"
    ids = [operation["operationId"] for _, _, operation in operations()]
    assert len(ids) == len(set(ids)), ids


# -- the routes ---------------------------------------------------------------------------------


@pytest.fixture
async def served() -> tuple[Routes, Routes]:
    return await served_routes()


def test_the_paths_are_exactly_the_routes_the_server_registers(
    served: tuple[Routes, Routes],
) -> None:
    everything, agent_api = served
    described = {(method, path) for path, method, _ in operations()}
    # Every route of the agent API, and nothing it does not serve.
    assert set(agent_api) <= described
    assert {route for route in described if route[1].startswith("/v1/")} == set(agent_api)
    # With health, readiness and metrics: all that `signoff serve` serves without a chat
    # channel (Slack's and Telegram's webhooks are theirs, not an agent's), but for `/`, a
    # page for a person's browser naming these paths (docs/web.md).
    assert set(everything) - {("get", "/")} == described


def test_path_parameters_are_declared_for_every_template() -> None:
    for path, item in SPEC["paths"].items():
        names = set(re.findall(r"\{([^}]+)\}", path))
        declared = {
            deref(p)["name"] for p in item.get("parameters", []) if deref(p)["in"] == "path"
        }
        assert declared == names, path


# -- the record ---------------------------------------------------------------------------------


def _records() -> dict[str, Any]:
    later = RECORD_NOW + timedelta(hours=1)
    other = "5d2c3b4a-1f0e-4d9c-8b7a-6f5e4d3c2b1a"
    return {
        "pending": approval_record(),
        "without optional fields": approval_record(
            step=None,
            reason=None,
            requested_by=None,
            preconditions=None,
            resume=None,
            presentation={"title": "t"},
            tool_args={},
        ),
        "executed": approval_record(
            state="executed",
            decided_by="alice",
            decided_at=RECORD_NOW,
            decision_note="fine",
            grant_expires_at=later,
            claim_token="tok",
            claimed_at=later,
            lease_until=later,
            executed_at=later,
            outcome={"status": "succeeded", "result": {"refund": "re_1"}},
            escalation_level=2,
            version=6,
            superseded_by=other,
        ),
        "a follow-up": approval_record(
            kind="interrupted_side_effect",
            state="outcome_unknown",
            origin_id=other,
            follow_up_id=other,
            outcome={"status": "failed", "result": None},
            presentation={
                "title": "Outcome unknown: Refund",
                "summary": "This call was approved and started ...",
                "fields": [{"label": "Original approval", "value": other}],
            },
        ),
    }


def test_the_record_schema_has_exactly_the_keys_of_public_record() -> None:
    record = public_record(approval_record())
    schema = COMPONENTS["schemas"]["Approval"]
    assert set(schema["properties"]) == set(record)
    assert set(schema["required"]) == set(record)
    assert schema["additionalProperties"] is False


@pytest.mark.parametrize("shape", list(_records()))
def test_the_record_schema_accepts_records_in_every_shape(shape: str) -> None:
    record = public_record(_records()[shape])
    errors = [str(e) for e in component("Approval").iter_errors(record)]
    assert not errors, errors


@pytest.mark.parametrize("state", list(State))
def test_every_state_is_a_valid_record(state: State) -> None:
    record = public_record(approval_record(state=state.value))
    assert component("Approval").is_valid(record), state


def test_the_record_is_nullable_exactly_where_its_column_is() -> None:
    record = public_record(approval_record())
    check = component("Approval")
    # Keys that are not one column: `tool` (two NOT NULL columns, null for a question),
    # `original_arguments` and `approved_by_grant` (the original_args and grant_id
    # columns); the rest (`execution`, `edited`,
    # `votes`) are derived and never null.
    derived = {
        "tool": True,
        "original_arguments": approvals.c.original_args.nullable,
        "approved_by_grant": approvals.c.grant_id.nullable,
    }
    for key in record:
        if key in derived:
            nullable = derived[key]
        else:
            nullable = approvals.c[key].nullable if key in approvals.c else False
        assert check.is_valid({**record, key: None}) == nullable, key


def test_the_record_enums_are_the_models() -> None:
    props = COMPONENTS["schemas"]["Approval"]["properties"]
    assert COMPONENTS["schemas"]["State"]["enum"] == [s.value for s in State]
    assert props["kind"]["enum"] == [k.value for k in Kind]
    assert props["execution"]["enum"] == [e.value for e in Execution]


# -- statuses and error codes -------------------------------------------------------------------


def _codes(response: dict[str, Any]) -> set[str]:
    """The error codes a documented error response allows."""
    schema = deref(response)["content"]["application/json"]["schema"]
    codes: set[str] = set()
    for _, node in walk(schema):
        node = deref(node)
        if isinstance(node, dict):
            for part in node.get("allOf", []):
                code = part.get("properties", {}).get("error", {}).get("properties", {})
                code = code.get("code", {})
                codes |= set(code.get("enum", [])) | ({code["const"]} if "const" in code else set())
    return codes


def test_every_status_each_operation_can_answer_is_documented() -> None:
    for path, method, operation in operations():
        if not path.startswith("/v1/approvals"):
            continue
        statuses = set(operation["responses"])
        expected = {"401", "503"}  # every call checks the key, then asks the database
        if "requestBody" in operation:
            expected |= {"400", "413", "422"}  # malformed, too large, invalid
        if method == "get" and path == "/v1/approvals":
            expected.add("422")  # unknown or bad query parameters, a foreign cursor
        if "{id}" in path:
            expected.add("404")
        if "{id}" in path and method == "post":
            expected |= {"409", "410"}  # the row's state refuses it; its clock ran out
        if (method, path) == ("post", "/v1/approvals"):
            expected.add("429")  # the create gate: the server is busy serving people
        elif method == "get" and path in ("/v1/approvals", "/v1/approvals/{id}"):
            expected |= {"422", "429"}  # a bad wait; too many waits held
        else:
            assert "429" not in statuses, (method, path)  # nothing else is refused for load
        assert expected <= statuses, (method, path, sorted(expected - statuses))
        assert not {s for s in statuses if s.startswith("5")} - {"503"}, (method, path)


# The error families an agent API request can end in (each class's `http_status` is its
# answer); the rest (NotAnApprover, AlreadyVoted, DelegationLoop, ...) belong to people.
API_ERRORS: tuple[type[SignoffError], ...] = (
    errors.MalformedJson,
    errors.RequestTooLarge,
    errors.InvalidRequest,
    errors.Unauthorized,
    errors.NotFound,
    errors.ApprovalExpired,
    errors.NotPending,
    errors.ClaimMismatch,
    errors.ApprovalChanged,
    errors.ApprovalCorrupt,
    errors.LeaseExhausted,
    errors.Overloaded,
    errors.StoreUnavailable,
    errors.SchemaOutOfDate,
    EmbedKeyRequired,
)


def _subclasses(cls: type[SignoffError]) -> Iterator[type[SignoffError]]:
    yield cls
    for sub in cls.__subclasses__():
        yield from _subclasses(sub)


# Raised somewhere in signoff, under a class the API maps, but never by an API request.
NOT_FROM_THE_API = {
    "unknown_tenant": "the tenant comes from its key, which names a configured tenant",
    "approval_changed": "a shown hash is checked on human decisions only",
    "backup_refused": "signoff db backup and restore, commands of the CLI only",
}


def test_the_documented_error_codes_are_the_ones_the_api_answers() -> None:
    documented: set[tuple[int, str]] = set()
    for _, _, operation in operations():
        for status, response in operation["responses"].items():
            if int(status) >= 400:
                documented |= {(int(status), code) for code in _codes(response)}
    answered = {
        (cls.http_status, cls.code)
        for cls in set(_subclasses(SignoffError))
        if issubclass(cls, API_ERRORS) and cls.code not in NOT_FROM_THE_API
    }
    # aiohttp's own refusals, in the same shape (405 is no operation's answer: it is the
    # answer to a method no operation has, described in the document's introduction).
    answered |= {(s, c) for s, c in api._HTTP_CODES.items() if s != 405}
    assert documented == answered
    assert "405" in SPEC["info"]["description"]
