"""bot/openapi.json, the OpenAPI 3.1 description of the agent API, says what the handlers
take: each request body schema has exactly its pydantic model's fields, the same required ones
and the same limits (lengths, patterns, ranges, enums, defaults), and refuses NUL, wants a
duration or an http(s) URL exactly where the model does; the list's query parameters are
api.ListQuery's, and the Idempotency-Key header is what the claim handler accepts.

The document as a whole, its routes, the record and the error codes are
tests/unit/test_openapi_document.py's. (The acceptance test tests/acceptance/test_openapi.py
holds a running server to it.)
"""

from __future__ import annotations

import inspect
import re
import typing
from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from bot import api, api_embed
from bot.canonical import MAX_SAFE_INTEGER, canonical_json
from bot.destinations import url_problem
from bot.durations import parse_duration
from bot.embed_tokens import MAX_TTL as MAX_EMBED_TTL
from bot.errors import NotCanonical
from bot.intake import Presentation, PresentationField, RequestBody, ToolCall
from bot.model import MAX_LEASE
from bot.validation import IS_DURATION, IS_HTTP_URL, IS_LEASE, IS_TTL, MAX_TTL, NO_NUL
from tests.support.openapi_spec import (
    COMPONENTS,
    SPEC,
    Routes,
    component,
    deref,
    operations,
    served_routes,
    validator,
)
from tests.support.samples import RECORD_NOW, request_body

# The patterns the spec uses for what a model checks with a validator instead of a pattern.
# A duration validator with a limit has its own pattern (a JSON Schema pattern cannot add up a
# duration's parts, so those two admit the usual spellings within the limit, a subset of what
# the server takes: test_the_duration_patterns_admit_only_durations_within_their_limit).
NUL_PATTERN = "^[^\\u0000]*$"
DURATION_PATTERN = "^([0-9]+[smhdw])+$"
LEASE_PATTERN = COMPONENTS["schemas"]["Lease"]["pattern"]
TTL_PATTERN = COMPONENTS["schemas"]["Ttl"]["pattern"]
URL_PATTERN = COMPONENTS["schemas"]["CreateBody"]["properties"]["callback_url"]["allOf"][0][
    "pattern"
]
EMBED_TTL_PATTERN = COMPONENTS["schemas"]["EmbedTtl"]["pattern"]
ORIGIN_PATTERN = COMPONENTS["schemas"]["EmbedBody"]["properties"]["parent_origin"]["pattern"]
VALIDATOR_PATTERNS = {
    NO_NUL: NUL_PATTERN,
    IS_DURATION: DURATION_PATTERN,
    IS_LEASE: LEASE_PATTERN,
    IS_TTL: TTL_PATTERN,
    IS_HTTP_URL: URL_PATTERN,
    api_embed.IS_EMBED_TTL: EMBED_TTL_PATTERN,
    api_embed.IS_ORIGIN: ORIGIN_PATTERN,
}
# Checked by the canonical form on the whole document, not by the models (bot.canonical).
JSON_NUMBER = "#/components/schemas/JsonNumber"
JSON_VALUE = "#/components/schemas/JsonValue"

# Which model each request body is, and whether the handler reads it as optional.
BODIES: dict[tuple[str, str], tuple[type[BaseModel], bool]] = {
    ("/v1/approvals", "post"): (RequestBody, False),
    ("/v1/approvals/{id}/claim", "post"): (api.ClaimBody, True),
    ("/v1/approvals/{id}/renew", "post"): (api.RenewBody, False),
    ("/v1/approvals/{id}/release", "post"): (api.ReleaseBody, False),
    ("/v1/approvals/{id}/complete", "post"): (api.CompleteBody, False),
    ("/v1/approvals/{id}/supersede", "post"): (api.SupersedeBody, False),
    ("/v1/approvals/{id}/cancel", "post"): (api.CancelBody, True),
    ("/v1/approvals/{id}/embed", "post"): (api_embed.EmbedBody, False),
}


@pytest.fixture
async def served() -> tuple[Routes, Routes]:
    return await served_routes()


# -- request bodies and parameters --------------------------------------------------------------


def _facts(node: Any, root: dict[str, Any], *, query: bool = False) -> dict[str, Any]:
    """What a schema asks of one value, through $ref, anyOf and allOf: its types, limits,
    patterns, enum and default (not what it asks of nested properties)."""
    found: dict[str, Any] = {"types": set(), "patterns": set()}

    def visit(n: Any) -> None:
        if isinstance(n, dict) and n.get("$ref") == JSON_NUMBER:
            found["types"].add("number")  # its bounds are the canonical form's, not a model's
            return
        if isinstance(n, dict) and n.get("$ref") == JSON_VALUE:
            return  # any JSON to a model (Any); the canonical form judges it
        while isinstance(n, dict) and "$ref" in n:
            ref = n["$ref"]
            visit({k: v for k, v in n.items() if k != "$ref"})
            n = root
            for part in ref[2:].split("/"):
                n = n[part]
        if not isinstance(n, dict):
            return
        for sub in [*n.get("anyOf", []), *n.get("allOf", [])]:
            visit(sub)
        kind = n.get("type")
        if kind is not None:
            found["types"] |= set(kind) if isinstance(kind, list) else {kind}
        if "const" in n:
            found["enum"] = {n["const"]}
        if "enum" in n:
            found["enum"] = set(n["enum"])
        if "pattern" in n:
            found["patterns"].add(n["pattern"])
        for key in ("minLength", "maxLength", "minimum", "maximum", "minItems", "default"):
            if key in n:
                found[key] = n[key]
        if "items" in n:
            found["items"] = _facts(n["items"], root)["types"]

    visit(node)
    if "number" in found["types"]:
        found["types"].discard("integer")  # a JSON Schema number includes the integers
    if query:
        found["types"].discard("null")  # a query parameter is left out, never null
    return found


def _validators(annotation: Any) -> set[Any]:
    """The pydantic validators (AfterValidator objects) anywhere in an annotation."""
    found: set[Any] = set()
    if typing.get_origin(annotation) is typing.Annotated:
        found |= {m for m in annotation.__metadata__ if m in VALIDATOR_PATTERNS}
    for arg in typing.get_args(annotation):
        found |= _validators(arg)
    return found


def _compare_field(model: type[BaseModel], name: str, spec_node: Any, *, query: bool) -> None:
    pydantic_schema = model.model_json_schema()
    ours = _facts(pydantic_schema["properties"][name], pydantic_schema, query=query)
    theirs = _facts(spec_node, SPEC, query=query)
    info = model.model_fields[name]
    validators = _validators(info.annotation) | {
        m for m in info.metadata if m in VALIDATOR_PATTERNS
    }
    if validators & {IS_LEASE, IS_TTL, api_embed.IS_EMBED_TTL}:
        validators.discard(IS_DURATION)  # the narrower pattern says it already
    expected_patterns = ours.pop("patterns") | {VALIDATOR_PATTERNS[v] for v in validators}
    assert theirs.pop("patterns") == expected_patterns, f"{model.__name__}.{name}: patterns"
    if "default" not in theirs:
        ours.pop("default", None)
    assert theirs == ours, f"{model.__name__}.{name}"


def _compare_model(model: type[BaseModel], schema: dict[str, Any]) -> None:
    schema = deref(schema)
    fields = model.model_fields
    assert set(schema["properties"]) == set(fields), model.__name__
    required = {name for name, info in fields.items() if info.is_required()}
    assert set(schema.get("required", [])) == required, model.__name__
    assert schema["additionalProperties"] is (model.model_config.get("extra") != "forbid")
    for name in fields:
        _compare_field(model, name, schema["properties"][name], query=False)


@pytest.mark.parametrize(
    ("model", "schema"),
    [
        (RequestBody, COMPONENTS["schemas"]["CreateBody"]),
        (ToolCall, COMPONENTS["schemas"]["ToolCall"]),
        (Presentation, COMPONENTS["schemas"]["Presentation"]),
        (PresentationField, COMPONENTS["schemas"]["Presentation"]["properties"]["fields"]["items"]),
        *[(model, COMPONENTS["schemas"][model.__name__]) for model, _ in list(BODIES.values())[1:]],
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_each_body_schema_is_its_pydantic_model(model: type[BaseModel], schema: Any) -> None:
    _compare_model(model, schema)


def test_each_operation_takes_its_model_as_body_required_as_the_handler_reads_it(
    served: tuple[Routes, Routes],
) -> None:
    _, handlers = served
    for path, method, operation in operations():
        body = operation.get("requestBody")
        if (path, method) not in BODIES:
            assert body is None, (method, path)
            continue
        model, optional = BODIES[(path, method)]
        schema = body["content"]["application/json"]["schema"]
        assert list(body["content"]) == ["application/json"]
        name = "CreateBody" if model is RequestBody else model.__name__
        assert schema == {"$ref": f"#/components/schemas/{name}"}, path
        assert body["required"] is not optional, path
        source = inspect.getsource(handlers[(method, path)])
        assert ("validate_request" if model is RequestBody else model.__name__) in source, path
        assert ("optional=True" in source) is optional, path


def test_the_list_parameters_are_list_query() -> None:
    parameters = {
        p["name"]: p
        for p in SPEC["paths"]["/v1/approvals"]["get"]["parameters"]
        if p["in"] == "query"
    }
    assert set(parameters) == set(api.ListQuery.model_fields)
    for name, parameter in parameters.items():
        assert parameter["required"] is api.ListQuery.model_fields[name].is_required()
        _compare_field(api.ListQuery, name, parameter["schema"], query=True)


def test_the_get_parameters_are_the_wait_query() -> None:
    parameters = {
        p["name"]: p for p in SPEC["paths"]["/v1/approvals/{id}"]["get"]["parameters"]
    }
    assert set(parameters) == set(api.WaitQuery.model_fields)
    for name, parameter in parameters.items():
        assert parameter["in"] == "query" and parameter["required"] is False
        _compare_field(api.WaitQuery, name, parameter["schema"], query=True)


def test_the_idempotency_key_header_is_what_the_claim_handler_accepts() -> None:
    (header,) = SPEC["paths"]["/v1/approvals/{id}/claim"]["post"]["parameters"]
    assert (header["name"], header["in"], header["required"]) == (
        "Idempotency-Key",
        "header",
        False,
    )
    schema = header["schema"]
    for key in ("", "k", "~!", "x" * 255, "x" * 256, "a b", "é", "tab\t", "ok-" + "7" * 200):
        described = (
            schema["minLength"] <= len(key) <= schema["maxLength"]
            and re.search(schema["pattern"], key) is not None
        )
        assert described is (api._IDEMPOTENCY_KEY.fullmatch(key) is not None), repr(key)


def _admitted(schema: dict[str, Any], value: Any) -> bool:
    return validator(schema).is_valid(value)


def _duration_within(text: str, limit: timedelta) -> bool:
    try:
        return parse_duration(text) <= limit
    except ValueError:
        return False


@pytest.mark.parametrize(
    ("name", "limit", "longest"),
    [
        ("Lease", MAX_LEASE, ["24h", "1d", "1440m", "86400s", "23h59m59s"]),
        ("Ttl", MAX_TTL, ["365d", "52w", "8760h", "525600m", "31536000s", "51w6d23h59m59s"]),
        ("EmbedTtl", MAX_EMBED_TTL, ["1h", "60m", "3600s", "59m59s"]),
    ],
)
def test_the_duration_patterns_admit_only_durations_within_their_limit(
    name: str, limit: timedelta, longest: list[str]
) -> None:
    """Every spelling the pattern admits is a duration the server takes (the pattern is what
    a generated request is made from), and the usual spellings up to the limit are admitted."""
    schema = COMPONENTS["schemas"][name]
    usual = ["1s", "90s", "15m", "1h30m", "2h", "1h5s", "59m59s", *longest]
    usual = [text for text in usual if parse_duration(text) <= limit]  # an hour, for EmbedTtl
    for text in [*usual, *schema["examples"]]:
        assert _admitted(schema, text) and _duration_within(text, limit), text
    just_over = {
        "Lease": ["25h", "2d", "1441m", "86401s", "24h1s", "1d1s"],
        "Ttl": ["366d", "53w", "8761h", "52w1d", "364d24h", "365d1s"],
        "EmbedTtl": ["2h", "61m", "3601s", "1h1s", "60m1s", "1d", "1w"],
    }[name]
    refused = ["0s", "0h", "", "1", "h", "1y", "-1h", " 1h", "1h ", "1H", "１h", "1w" * 60]
    for text in [*just_over, *refused]:
        assert not _admitted(schema, text), text
    # Every number of every unit, alone and as the leading part of a sum.
    for unit, seconds in {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}.items():
        most = int(limit.total_seconds()) // seconds
        for n in sorted({*range(0, 70), most - 1, most, most + 1, most * 10}):
            for text in (f"{n}{unit}", f"0{n}{unit}", f"{n}{unit}59s", f"{n}{unit}1m"):
                if _admitted(schema, text):
                    assert _duration_within(text, limit), text


def test_json_numbers_are_the_ones_the_canonical_form_takes() -> None:
    """JsonNumber admits a number exactly when the canonical form writes it back, except an
    integer written in digits at or beyond 1e21, which JSON Schema cannot tell from a double
    (said in its description)."""
    number = {"$ref": JSON_NUMBER}

    def canonical(value: Any) -> bool:
        try:
            canonical_json(value)
        except NotCanonical:
            return False
        return True

    edges = [0, 1, -1, 0.5, 1e-300, MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, 9007199254740991.0]
    edges += [MAX_SAFE_INTEGER + 1, -MAX_SAFE_INTEGER - 1, 2.0**53, 1e16, -1e16, 9.99e20]
    edges += [1e21, -1e21, 1.5e21, 1e300, -1e300, 2**60]
    for value in edges:
        assert _admitted(number, value) is canonical(value), value
    assert "1000000000000000000000" in COMPONENTS["schemas"]["JsonNumber"]["description"]
    # Wherever a request carries JSON, numbers are JsonNumbers, at any depth.
    good = {"a": [{"b": [MAX_SAFE_INTEGER, 1e21, None, True, "x"]}]}
    bad = {"a": [{"b": [MAX_SAFE_INTEGER + 1]}]}
    value = {"$ref": "#/components/schemas/JsonValue"}
    tool = {"$ref": "#/components/schemas/ToolCall"}
    assert _admitted(value, good) and not _admitted(value, bad)
    assert _admitted(tool, {"name": "t", "arguments": good})
    assert not _admitted(tool, {"name": "t", "arguments": bad})
    field = COMPONENTS["schemas"]["Presentation"]["properties"]["fields"]["items"]
    assert not _admitted(field, {"label": "l", "value": 2**53})
    assert _admitted(field, {"label": "l", "value": 2**53 - 1})


# Bodies at the edges of what the document admits, and the model that must take each.
EDGES: list[tuple[str, type[BaseModel], dict[str, Any]]] = [
    ("CreateBody", RequestBody, request_body(required_approvals=50)),
    ("CreateBody", RequestBody, request_body(required_approvals=2.0)),  # JSON's integer 2
    ("CreateBody", RequestBody, request_body(approval_ttl="365d", grant_ttl="52w")),
    ("CreateBody", RequestBody, request_body(approval_ttl="51w6d23h59m59s")),
    ("CreateBody", RequestBody, request_body(callback_url="https://h.example:65535/x")),
    ("CreateBody", RequestBody, request_body(step={"n": [MAX_SAFE_INTEGER, -1e21, 0.5]})),
    ("ClaimBody", api.ClaimBody, {"lease": "24h"}),
    ("ClaimBody", api.ClaimBody, {"lease": "86400s"}),
    ("RenewBody", api.RenewBody, {"claim_token": "t", "lease": "23h59m59s"}),
    ("CompleteBody", api.CompleteBody, {"claim_token": "t", "outcome": "failed", "result": 1e21}),
]


@pytest.mark.parametrize(("schema", "model", "body"), EDGES)
def test_the_models_take_the_edges_the_document_admits(
    schema: str, model: type[BaseModel], body: dict[str, Any]
) -> None:
    assert component(schema).is_valid(body), body
    model.model_validate(body)
    canonical_json(body)


def test_the_cursor_pattern_admits_the_cursors_the_server_issues() -> None:
    (cursor,) = [
        p for p in SPEC["paths"]["/v1/approvals"]["get"]["parameters"] if p["name"] == "cursor"
    ]
    issued = api._encode_cursor(RECORD_NOW, "0b7d1c4e-8a59-4c35-9d0e-3f1a2b3c4d5e")
    assert re.search(cursor["schema"]["pattern"], issued)
    assert len(issued) <= cursor["schema"]["maxLength"]
    assert "only the server can make one" in cursor["description"]


@pytest.mark.parametrize(
    ("url", "admitted"),
    [
        ("https://hooks.example.com/signoff", True),
        ("http://203.0.113.9:8443/h?x=1#f", True),
        ("https://example.com", True),
        ("https://example.com:65535/", True),
        ("https://example.com:65536/", False),
        ("https://example.com:99999", False),
        ("https://user@example.com/", False),
        ("https://user:pw@example.com/", False),
        ("https://exa mple.com/", False),
        ("https://:80/", False),
        ("https://[::1/", False),
        ("ftp://example.com/", False),
        ("https://", False),
    ],
)
def test_the_callback_url_pattern_admits_only_urls_the_server_takes(
    url: str, admitted: bool
) -> None:
    """What the pattern admits passes the body's URL check and has no user info (the check
    intake makes whatever the tenant allows)."""
    assert (re.search(URL_PATTERN, url) is not None) is admitted, url
    if admitted:
        assert IS_HTTP_URL.func(url) == url
        assert url_problem(url, allow_private=True) is None


@pytest.mark.parametrize(
    ("origin", "admitted"),
    [
        ("https://app.example.com", True),
        ("http://localhost:8080", True),
        ("https://app.example.com:65535", True),
        ("http://127.0.0.1:8080", True),
        ("https://App.Example.com:443", True),
        ("http://[::1]:8080", False),
        ("HTTPS://app.example.com", False),
        ("https://app.example.com:00443", False),
        ("https://app.example.com/", False),
        ("https://app.example.com/page", False),
        ("https://app.example.com:65536", False),
        ("https://user@app.example.com", False),
        ("https://*.example.com", False),
        ("https://app.example.com?x", False),
        ("ftp://app.example.com", False),
        ("https://", False),
        ("null", False),
    ],
)
def test_the_parent_origin_pattern_admits_only_origins_the_server_takes(
    origin: str, admitted: bool
) -> None:
    """What the embed body's pattern admits is an origin the server takes (bot.origins
    .parse_origin); what it refuses, the server refuses too."""
    assert (re.search(ORIGIN_PATTERN, origin) is not None) is admitted, origin
    try:
        api_embed.IS_ORIGIN.func(origin)
        taken = True
    except ValueError:
        taken = False
    assert taken is admitted, origin
