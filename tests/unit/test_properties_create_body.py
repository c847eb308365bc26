"""Property tests (hypothesis) for the create body and its canonical form: canonical JSON (and
check_canonical, which must refuse exactly what it refuses), parse_json, and the body itself:
what create accepts always hashes and always fits a webhook (issue 15, "Suites that stay").

Each property states what must hold for every input hypothesis can generate; a parser may
refuse, but only with signoff's own errors (or the ValueError it documents), never with a
RecursionError, TypeError, KeyError or the like. The inputs that broke a property when it was
written (and the bugs they showed, since fixed) stay as @example so they are tried first
every run.

Settings (no example database, a fixed seed under CI=true, no deadline) and why:
tests/support/json_strategies.py property_settings.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from bot.canonical import MAX_DEPTH, approval_hash, canonical_json, check_canonical
from bot.config import parse_config
from bot.errors import InvalidRequest, MalformedJson, NotCanonical
from bot.intake import ParsedRequest, RequestBody, parse_request, validate_request
from bot.outbox import jobs, webhooks
from bot.validation import parse_json
from store.outbox import NewJob
from store.records import Event
from tests.support.json_paths import delete_at as _delete
from tests.support.json_paths import paths_in as _paths
from tests.support.json_paths import set_at as _set
from tests.support.json_paths import value_at as _get
from tests.support.json_strategies import (
    ambiguous_floats,
    any_texts,
    json_scalars,
    json_values,
    principal_keys,
    python_values,
    texts,
)
from tests.support.json_strategies import property_settings as _settings
from tests.support.samples import RECORD_NOW, TEST_CONFIG, approval_record, request_body


def _depth(value: Any) -> int:
    """Nesting as bot.canonical counts it: each list or object is one level."""
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


@st.composite
def nested(draw: st.DrawFn, min_depth: int = 0, max_depth: int = MAX_DEPTH + 2) -> Any:
    """A JSON value wrapped in `levels` lists and objects: reaches the depth limits, which
    st.recursive alone almost never does."""
    levels = draw(st.integers(min_value=min_depth, max_value=max_depth))
    value = draw(json_values)
    for _ in range(levels):
        if draw(st.booleans()):
            value = [value]
        else:
            value = {draw(texts): value}
    return value


deep_json = json_values | nested()


def _wrap(value: Any, levels: int) -> Any:
    for level in range(levels):
        value = [value] if level % 2 else {"k": value}
    return value


def _same_json(a: Any, b: Any) -> bool:
    """Equal as JSON values: numbers compared as floats (JCS writes 1.0 as 1), everything
    else by type and value."""
    numbers = (int, float)
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, numbers) and isinstance(b, numbers):
        return float(a) == float(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _reordered(value: Any, shuffle: Callable[[list[str]], None]) -> Any:
    """The same JSON value with every object's keys in another order."""
    if isinstance(value, dict):
        keys = list(value)
        shuffle(keys)
        return {k: _reordered(value[k], shuffle) for k in keys}
    if isinstance(value, list):
        return [_reordered(v, shuffle) for v in value]
    return value


# -- canonical JSON ------------------------------------------------------------------------


@_settings(100)
@given(value=deep_json.filter(lambda v: _depth(v) <= MAX_DEPTH), data=st.data())
def test_canonical_json_is_deterministic_order_free_and_faithful(
    value: Any, data: st.DataObject
) -> None:
    encoded = canonical_json(value)
    assert canonical_json(copy.deepcopy(value)) == encoded
    random = data.draw(st.randoms(use_true_random=False))
    assert canonical_json(_reordered(value, random.shuffle)) == encoded
    assert _same_json(json.loads(encoded), value)


@_settings(200)
@given(value=ambiguous_floats.map(lambda f: {"amount": f}) | json_values)
@example(value={"amount": 2.0**53})
def test_the_canonical_form_of_an_accepted_value_is_accepted_again(value: Any) -> None:
    try:
        encoded = canonical_json(value)
    except NotCanonical:
        return
    assert canonical_json(json.loads(encoded)) == encoded


@_settings(100)
@given(value=deep_json, limit=st.integers(min_value=0, max_value=MAX_DEPTH + 2))
def test_canonical_json_refuses_exactly_what_is_too_deep(value: Any, limit: int) -> None:
    depth = _depth(value)
    if depth <= limit:
        canonical_json(value, max_depth=limit)
    else:
        with pytest.raises(NotCanonical):
            canonical_json(value, max_depth=limit)
    if depth <= MAX_DEPTH:
        canonical_json(value)
    else:
        with pytest.raises(NotCanonical):
            canonical_json(value)


@_settings(200)
@given(value=python_values, levels=st.integers(min_value=0, max_value=3 * MAX_DEPTH))
@example(value="\ud800", levels=0)
@example(value=float("nan"), levels=1)
@example(value=2**53, levels=0)
@example(value=0, levels=10_000)
def test_canonical_json_refuses_only_with_not_canonical(value: Any, levels: int) -> None:
    try:
        encoded = canonical_json(_wrap(value, levels))
    except NotCanonical:
        return
    assert isinstance(encoded, bytes)
    encoded.decode("utf-8")


# Scalars JCS may refuse (lone surrogates, integers beyond 2^53, NaN and infinities) among
# ones it accepts, under keys that may hold a lone surrogate too.
_any_scalars = json_scalars | any_texts | st.integers() | st.floats()


_any_values = st.recursive(
    _any_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(any_texts, children, max_size=4)
    ),
    max_leaves=20,
)


@_settings(300)
@given(value=_any_values | deep_json, limit=st.integers(min_value=0, max_value=MAX_DEPTH + 2))
def test_check_canonical_refuses_exactly_what_canonical_json_refuses(
    value: Any, limit: int
) -> None:
    # A create body is checked whole by check_canonical and only part of it is serialised
    # (for its hash): an accepted body must be one canonical_json accepts, and the reverse.
    try:
        canonical_json(value, max_depth=limit)
    except NotCanonical:
        with pytest.raises(NotCanonical):
            check_canonical(value, max_depth=limit)
    else:
        check_canonical(value, max_depth=limit)


# -- parse_json ----------------------------------------------------------------------------


@_settings(300)
@given(
    data=st.binary(max_size=200)
    | any_texts.map(lambda t: t.encode("utf-8", "replace"))
    | deep_json.map(lambda v: json.dumps(v).encode())
)
@example(data=b"[" * 100_000)
@example(data=b'{"a": "\\ud800"}')
@example(data=b"1e400")
def test_parse_json_refuses_bytes_only_with_invalid_request(data: bytes) -> None:
    try:
        parse_json(data)
    except InvalidRequest:
        pass


@_settings(100)
@given(text=any_texts)
@example(text="\ud800")
def test_parse_json_refuses_text_only_with_invalid_request(text: str) -> None:
    try:
        parse_json(text)
    except InvalidRequest:
        pass


class _Literal:
    """A node written as the given text instead of as JSON."""

    def __init__(self, text: str) -> None:
        self.text = text


class _Duplicated(dict[str, Any]):
    """An object written with its first key (or "k") given twice."""


def _json_text(node: Any) -> str:
    if isinstance(node, _Literal):
        return node.text
    if isinstance(node, dict):
        members = [f"{json.dumps(k)}: {_json_text(v)}" for k, v in node.items()]
        if isinstance(node, _Duplicated):
            key = next(iter(node), "k")
            members += [f"{json.dumps(key)}: null"] * (1 if node else 2)
        return "{" + ", ".join(members) + "}"
    if isinstance(node, list):
        return "[" + ", ".join(_json_text(v) for v in node) + "]"
    return json.dumps(node)


@_settings(120)
@given(value=json_values, data=st.data())
def test_parse_json_refuses_every_duplicate_key(value: Any, data: st.DataObject) -> None:
    root = {"v": value}
    objects = [()] + [p for p in _paths(root) if isinstance(_get(root, p), dict)]
    path = data.draw(st.sampled_from(objects))
    if path:
        _set(root, path, _Duplicated(_get(root, path)))
        text = _json_text(root)
    else:
        text = _json_text(_Duplicated(root))
    with pytest.raises(MalformedJson) as info:
        parse_json(text.encode())
    assert "duplicate key" in info.value.message


@_settings(120)
@given(
    value=json_values,
    literal=st.sampled_from(["NaN", "Infinity", "-Infinity"]),
    data=st.data(),
)
def test_parse_json_refuses_every_nan_and_infinity(
    value: Any, literal: str, data: st.DataObject
) -> None:
    root = [value]
    _set(root, data.draw(st.sampled_from(_paths(root))), _Literal(literal))
    with pytest.raises(NotCanonical):
        parse_json(_json_text(root).encode())


# -- the create body -----------------------------------------------------------------------


_BODY_KEYS = sorted(RequestBody.model_fields)


# Values near what a field expects, so mutations also land on the edges of validity.
near_values = (
    texts
    | st.text(min_size=250, max_size=320)
    | st.just("")
    | st.just("a\x00b")
    | any_texts
    | st.integers(min_value=-2, max_value=60)
    | st.integers(min_value=2**53 - 2, max_value=2**53 + 2)
    | st.sampled_from(["10m", "72h", "0s", "400d", "1d12h", "3 d", "https://x.example/h"])
    | st.sampled_from(["http://user@127.0.0.1/", "ftp://x", "payments.refund", "a..b"])
    | st.lists(texts, max_size=3)
    | deep_json
)


@st.composite
def mutated_bodies(draw: st.DrawFn) -> Any:
    """A valid create body (tests/support/samples.py request_body) after one to four random edits:
    a value replaced, a key deleted, an unknown key added; now and then the whole body."""
    body: Any = request_body(
        step={"cursor": 4}, preconditions={"balance_at_least": 12000}, resume={"thread": "t"}
    )
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        if not isinstance(body, dict) or draw(st.integers(0, 30)) == 0:
            body = draw(deep_json)
            continue
        paths = _paths(body)
        operation = draw(st.sampled_from(["set", "set", "set", "delete", "add", "add_top"]))
        if not paths:
            operation = "add_top"
        path = draw(st.sampled_from(paths)) if paths else ()
        if operation == "set":
            _set(body, path, draw(near_values))
        elif operation == "delete":
            _delete(body, path)
        elif operation == "add_top":
            body[draw(st.sampled_from(_BODY_KEYS) | texts)] = draw(near_values)
        else:
            node = _get(body, path[:-1])
            if isinstance(node, dict):
                node[draw(texts)] = draw(near_values)
    return body


@st.composite
def plausible_bodies(draw: st.DrawFn) -> dict[str, Any]:
    """Create bodies built field by field, most of them valid, with any JSON (deep near the
    limits, too) wherever the body allows any JSON."""
    body: dict[str, Any] = {
        "run_id": draw(st.text(min_size=1, max_size=40)),
        "capability": draw(
            st.from_regex(r"[A-Za-z0-9_-]{1,8}(\.[A-Za-z0-9_-]{1,8}){0,3}", fullmatch=True)
        ),
        "tool": {
            "name": draw(st.text(min_size=1, max_size=40)),
            "arguments": draw(st.dictionaries(texts, deep_json, max_size=4)),
        },
        "presentation": {"title": draw(st.text(min_size=1, max_size=60))},
    }
    if draw(st.booleans()):
        body["presentation"]["summary"] = draw(st.none() | texts)
    if draw(st.booleans()):
        body["presentation"]["fields"] = draw(
            st.lists(
                st.fixed_dictionaries(
                    {"label": st.text(min_size=1, max_size=20), "value": json_scalars}
                ),
                max_size=3,
            )
        )
    optional = {
        "step": deep_json,
        "preconditions": deep_json,
        "resume": deep_json,
        "reason": st.none() | texts,
        "requested_by": st.none() | st.text(min_size=1, max_size=20),
        "approvers": st.none() | st.lists(principal_keys, min_size=1, max_size=3),
        "approval_ttl": st.none() | st.sampled_from(["10m", "72h", "1d12h"]),
        "grant_ttl": st.none() | st.sampled_from(["10m", "24h"]),
        "required_approvals": st.none() | st.integers(min_value=1, max_value=50),
        "callback_url": st.none() | st.just("https://agent.example/hooks"),
        "kind": st.just("tool_call"),
    }
    for key, strategy in optional.items():
        if draw(st.booleans()):
            body[key] = draw(strategy)
    return body


class _Tx:
    """What enqueue_transition writes to, kept in memory."""

    def __init__(self) -> None:
        self.jobs: list[tuple[str, dict[str, Any]]] = []

    async def enqueue_all(self, jobs: list[NewJob], **_: Any) -> None:
        self.jobs += [(job.kind, dict(job.payload)) for job in jobs]

    async def card_messages_for(self, approval_id: str) -> list[Any]:
        return []


_DIRECTORY = parse_config(TEST_CONFIG).directory()


def _decision_webhook(request: ParsedRequest, full_hash: str) -> bytes:
    """The body of the decision webhook for an approval made of `request`, as the outbox
    queues it (bot/outbox/jobs.py enqueue_transition, wrapping bot/model.py public_record)
    and as it is sent (bot/outbox/webhooks.py body_bytes)."""
    body = request.body
    record = approval_record(
        run_id=body.run_id,
        step=body.step,
        kind=body.kind,
        capability=body.capability,
        tool_name=body.tool.name,
        tool_args=body.tool.arguments,
        presentation=request.raw_presentation,
        reason=body.reason,
        hash=full_hash,
        requested_by=body.requested_by,
        approvers=body.approvers or ["group:finance"],
        required_approvals=body.required_approvals or 1,
        preconditions=body.preconditions,
        resume=body.resume,
        callback_url=body.callback_url,
        state="approved",
        decided_by="alice",
        decided_at=RECORD_NOW,
        decision_note="fine",
        grant_expires_at=RECORD_NOW + timedelta(days=1),
        version=2,
    )
    event = Event(
        id=2,
        approval_id=record.id,
        seq=2,
        type="approved",
        actor="alice",
        at=RECORD_NOW,
        data={},
        prev_hash="0" * 64,
        hash="1" * 64,
    )
    tx: Any = _Tx()
    asyncio.run(jobs.enqueue_transition(tx, _DIRECTORY, record, event, RECORD_NOW))
    (kind, payload), *_ = tx.jobs
    assert kind == jobs.JobKind.WEBHOOK
    assert payload["body"]["approval"]["tool"]["arguments"] == body.tool.arguments
    return webhooks.body_bytes(payload["body"])


def _check_accepted(document: Any, request: ParsedRequest) -> None:
    """What create accepts always hashes and always fits its decision webhook."""
    assert request.raw_presentation == document["presentation"]
    body = request.body
    full_hash = approval_hash(
        body.kind, body.capability, request.raw_presentation, body.tool.name, body.tool.arguments
    )
    assert re.fullmatch(r"[0-9a-f]{64}", full_hash)
    sent = _decision_webhook(request, full_hash)
    assert json.loads(sent)["approval"]["hash"] == full_hash


def _check_refused(error: InvalidRequest) -> None:
    assert error.message
    for field in error.fields:
        assert field["field"] and field["message"]
    if type(error) is InvalidRequest:  # a validation failure: it names the fields
        assert error.fields


@_settings(150)
@given(document=mutated_bodies())
def test_a_mutated_body_is_accepted_or_refused_with_invalid_request(document: Any) -> None:
    try:
        request = validate_request(copy.deepcopy(document))
    except InvalidRequest as error:
        _check_refused(error)
        return
    _check_accepted(document, request)


@_settings(100)
@given(document=plausible_bodies())
def test_what_create_accepts_always_hashes_and_fits_a_webhook(document: dict[str, Any]) -> None:
    try:
        request = validate_request(document)
    except InvalidRequest as error:
        _check_refused(error)
        return
    _check_accepted(document, request)


@pytest.mark.parametrize("where", ["arguments", "step", "preconditions", "resume"])
def test_the_deepest_body_create_accepts_is_delivered(where: str) -> None:
    """At the boundary: the deepest value create accepts in each free-form field still fits
    its webhook, and one level more is refused at create, not at send time."""

    def body(levels: int) -> dict[str, Any]:
        value = _wrap(1, levels)
        if where == "arguments":
            return request_body(tool={"name": "t", "arguments": {"deep": value}})
        return request_body(**{where: value})

    deepest = max(levels for levels in range(MAX_DEPTH + 2) if _accepts(body(levels)))
    # docs/hashing.md: "a create body nested deeper than 63 arrays/objects (counting the body
    # itself)" is refused; the webhook carries it one level deeper, at most 64.
    assert _depth(body(deepest)) == MAX_DEPTH - 1
    request = validate_request(body(deepest))
    _check_accepted(body(deepest), request)
    with pytest.raises(NotCanonical):
        validate_request(body(deepest + 1))


def _accepts(document: Any) -> bool:
    try:
        validate_request(document)
    except InvalidRequest:
        return False
    return True


@_settings(120)
@given(document=deep_json)
def test_any_json_document_is_accepted_or_refused_with_invalid_request(document: Any) -> None:
    try:
        request = validate_request(document)
    except InvalidRequest as error:
        _check_refused(error)
        return
    _check_accepted(document, request)


@_settings(100)
@given(data=st.binary(max_size=300) | mutated_bodies().map(lambda b: json.dumps(b).encode()))
def test_parse_request_refuses_bytes_only_with_invalid_request(data: bytes) -> None:
    try:
        parse_request(data)
    except InvalidRequest as error:
        _check_refused(error)
