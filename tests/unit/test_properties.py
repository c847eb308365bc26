"""Property tests (hypothesis) for the pieces that parse what others send: the Telegram reply
grammar, Slack button values and Telegram callback data, durations and moments, the create
body and its canonical form (what is accepted always hashes and always fits a webhook), and
config loading (issue 15, "Suites that stay").

Each property states what must hold for every input hypothesis can generate; a parser may
refuse, but only with signoff's own errors (or the ValueError it documents), never with a
RecursionError, TypeError, KeyError or the like. The inputs that broke a property when it was
written (and the bugs they showed, since fixed) stay as @example so they are tried first
every run.

Settings: `database=None` keeps hypothesis from saving failing examples under
`.hypothesis/examples` and replaying one checkout's old failures first on the next run, so a
run depends only on this file and its seed; under CI=true the seed is fixed too
(`derandomize`), so CI tries the same examples every time, while local runs keep exploring
new ones (a failure prints the example to add as @example). `deadline=None`: these functions
do no I/O, but a loaded machine can make one example slow without making it wrong. The
example counts keep the whole file to about ten seconds of CPU.
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
import re
import tomllib
import typing
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from pydantic import BaseModel

from bot.canonical import (
    MAX_DEPTH,
    approval_hash,
    canonical_json,
    check_canonical,
)
from bot.card import Card
from bot.config import (
    Config,
    DatabaseConfig,
    EscalationConfig,
    GroupConfig,
    OutboxConfig,
    RouteConfig,
    ServerConfig,
    SweeperConfig,
    TenantConfig,
    config_model,
    load_config,
    parse_config,
)
from bot.durations import MAX_SECONDS, format_duration, parse_duration, parse_moment
from bot.errors import ConfigError, InvalidRequest, MalformedJson, NotCanonical
from bot.intake import ParsedRequest, RequestBody, parse_request, validate_request
from bot.outbox import jobs, webhooks
from bot.target import Target
from bot.validation import parse_json
from channels import slack_card, telegram_card
from channels.slack_surface import SlackConfig
from channels.telegram_surface import TelegramConfig
from store.engine import resolve_sqlite_path
from store.records import Event
from tests.support.json_strategies import (
    ambiguous_floats,
    any_texts,
    json_scalars,
    json_values,
    python_values,
    texts,
)
from tests.support.json_strategies import (
    property_settings as _settings,
)
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


# Paths into a JSON document: tuples of object keys and list indexes.


def _get(document: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        document = document[step]
    return document


def _set(document: Any, path: tuple[Any, ...], value: Any) -> None:
    _get(document, path[:-1])[path[-1]] = value


def _delete(document: Any, path: tuple[Any, ...]) -> None:
    del _get(document, path[:-1])[path[-1]]


def _paths(document: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found: list[tuple[Any, ...]] = []
    if isinstance(document, dict):
        for key, value in document.items():
            found.append((*prefix, key))
            found += _paths(value, (*prefix, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            found.append((*prefix, index))
            found += _paths(value, (*prefix, index))
    return found


def _card(approval_id: str, full_hash: str) -> Card:
    record = approval_record(id=approval_id, hash=full_hash)
    return Card.from_approval(record, RECORD_NOW)


hex64 = st.text("0123456789abcdef", min_size=64, max_size=64)
approval_ids = st.uuids().map(str)


# -- Telegram replies ----------------------------------------------------------------------

# Whitespace as people type it between words: re's \s and str.isspace agree on every one.
whitespace = st.sampled_from([" ", "\t", "\n", "\r\n", "\u00a0", "\u2003", "\u3000"])
separators = st.lists(whitespace, min_size=1, max_size=3).map("".join)
leading = st.lists(whitespace, max_size=2).map("".join)
punctuation = st.text(".,:;!", max_size=2)
principal_keys = st.from_regex(r"[a-z0-9][a-z0-9_.-]{0,15}", fullmatch=True)


@st.composite
def any_case(draw: st.DrawFn, word: str) -> str:
    flips = draw(st.lists(st.booleans(), min_size=len(word), max_size=len(word)))
    return "".join(c.upper() if up else c for c, up in zip(word, flips, strict=True))


def test_help_names_the_reply_grammar() -> None:
    for word in ("approve", "yes", "ok", "reject", "no", "delegate NAME"):
        assert word in telegram_card.HELP


@_settings(300)
@given(text=any_texts | st.none())
@example(text="delegate @")
@example(text="\u00a0ok!\u3000")
def test_parse_reply_never_raises(text: str | None) -> None:
    reply = telegram_card.parse_reply(text)  # type: ignore[arg-type]
    if reply is None:
        return
    assert reply.action in ("approve", "reject", "delegate")
    if reply.note is not None:
        assert reply.note and reply.note == reply.note.strip()
    assert (reply.to is not None) == (reply.action == "delegate")


@_settings(200)
@given(
    verdict=st.sampled_from(
        [
            ("approve", "approve"),
            ("approve", "yes"),
            ("approve", "ok"),
            ("reject", "reject"),
            ("reject", "no"),
        ]
    ),
    data=st.data(),
    before=leading,
    after=punctuation,
    separator=separators,
    note=texts,
)
def test_a_reply_built_from_the_grammar_parses_to_its_action_and_note(
    verdict: tuple[str, str],
    data: st.DataObject,
    before: str,
    after: str,
    separator: str,
    note: str,
) -> None:
    action, word = verdict
    text = f"{before}{data.draw(any_case(word))}{after}{separator}{note}"
    expected = telegram_card.Reply(action, note.strip() or None)  # type: ignore[arg-type]
    assert telegram_card.parse_reply(text) == expected


@_settings(150)
@given(
    data=st.data(),
    separator=separators,
    mention=st.booleans(),
    name=principal_keys,
    note=texts,
)
def test_a_delegate_reply_parses_to_the_name_and_note(
    data: st.DataObject, separator: str, mention: bool, name: str, note: str
) -> None:
    text = f"{data.draw(any_case('delegate'))}{separator}{'@' if mention else ''}{name} {note}"
    assert telegram_card.parse_reply(text) == telegram_card.Reply(
        "delegate", note.strip() or None, name
    )


@_settings(200)
@given(text=any_texts)
@example(text="delegate carol\nshe owns vendors")
@example(text="delegate @")
def test_a_delegate_reply_names_one_principal(text: str) -> None:
    reply = telegram_card.parse_reply(text)
    if reply is not None and reply.action == "delegate":
        assert reply.to
        assert not any(c.isspace() for c in reply.to)


# -- Slack button values and Telegram callback data ------------------------------------------


@_settings(200)
@given(approval_id=approval_ids, full_hash=hex64)
def test_button_value_parses_back_to_id_and_full_hash(approval_id: str, full_hash: str) -> None:
    value = slack_card.button_value(_card(approval_id, full_hash))
    assert slack_card.parse_button_value(value) == (approval_id, full_hash)
    # Slack allows 2,000 characters in a button's value.
    assert len(value) <= 2000


@_settings(150)
@given(
    value=any_texts
    | st.tuples(
        st.sampled_from(["", " ", "\n", "x", "-", "A"]),
        st.builds("{}:{}".format, approval_ids, hex64)
        | st.from_regex(r"[0-9a-f-]{36}:[0-9a-f]{64}", fullmatch=True)
        | st.from_regex(r"[0-9a-fA-F-]{35,37}:[0-9a-fA-F]{63,65}", fullmatch=True),
        st.sampled_from(["", " ", "\n", "0", ":"]),
    ).map("".join)
)
def test_parse_button_value_refuses_anything_else(value: str) -> None:
    parsed = slack_card.parse_button_value(value)
    if parsed is not None:
        # Whatever is read back is exactly what the value said: nothing trimmed or guessed.
        assert f"{parsed[0]}:{parsed[1]}" == value


@_settings(200)
@given(
    action=st.sampled_from(["approve", "reject"]),
    approval_id=approval_ids,
    full_hash=hex64,
)
def test_callback_data_parses_back_and_fits_telegram(
    action: telegram_card.Action, approval_id: str, full_hash: str
) -> None:
    data = telegram_card.callback_data(action, _card(approval_id, full_hash))
    assert len(data.encode("utf-8")) <= 64  # Telegram's limit on callback_data
    assert telegram_card.parse_callback(data) == telegram_card.Pressed(
        action, approval_id, full_hash[:12]
    )


@_settings(100)
@given(
    data=any_texts
    | st.none()
    | st.tuples(
        st.sampled_from(["", " ", "\n", "x"]),
        st.from_regex(r"s1:[ar]:[0-9a-f]{32}:[0-9a-f]{12}", fullmatch=True)
        | st.from_regex(r"s[0-2]:[a-z]:[0-9a-fA-F]{31,33}:[0-9a-fA-F]{11,13}", fullmatch=True),
        st.sampled_from(["", " ", "\n", "0"]),
    ).map("".join)
)
def test_parse_callback_refuses_anything_else(data: str | None) -> None:
    pressed = telegram_card.parse_callback(data)
    if pressed is not None:
        rebuilt = telegram_card.callback_data(
            pressed.action, _card(pressed.approval_id, pressed.short_hash + "0" * 52)
        )
        assert rebuilt == data


# -- durations and moments -----------------------------------------------------------------

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


@_settings(200)
@given(text=any_texts | st.from_regex(r"\s*(\d{1,12}[smhdw]){1,4}\s*", fullmatch=True))
@example(text="9" * 5000 + "s")
@example(text="٣m")  # Arabic-Indic digit: \d matches it and int() reads it
def test_parse_duration_answers_a_duration_or_value_error(text: str) -> None:
    try:
        parsed = parse_duration(text)
    except ValueError:
        return
    assert timedelta(0) < parsed <= timedelta(seconds=MAX_SECONDS)


@_settings(100)
@given(value=st.integers() | st.none() | st.binary() | st.floats() | st.lists(st.integers()))
def test_parse_duration_refuses_what_is_not_text(value: Any) -> None:
    with pytest.raises(ValueError):
        parse_duration(value)


@_settings(300)
@given(
    parts=st.lists(
        st.tuples(st.integers(min_value=0, max_value=10**9), st.sampled_from(sorted(_UNITS))),
        min_size=1,
        max_size=4,
    )
)
def test_parse_duration_sums_its_parts(parts: list[tuple[int, str]]) -> None:
    text = "".join(f"{n}{unit}" for n, unit in parts)
    seconds = sum(n * _UNITS[unit] for n, unit in parts)
    if 0 < seconds <= MAX_SECONDS:
        assert parse_duration(text) == timedelta(seconds=seconds)
    else:
        with pytest.raises(ValueError):
            parse_duration(text)


def _producible(seconds: int) -> bool:
    """Durations format_duration writes without dropping anything."""
    days, rest = divmod(seconds, 86400)
    if days:
        return rest % 3600 == 0
    hours, rest = divmod(rest, 3600)
    return rest % 60 == 0 if hours or rest >= 60 else True


@_settings(300)
@given(seconds=st.integers(min_value=1, max_value=MAX_SECONDS))
@example(seconds=1)
@example(seconds=MAX_SECONDS)
@example(seconds=86400 + 3599)
def test_format_duration_parses_back(seconds: int) -> None:
    """format_duration writes "2 d 4 h" (parse_duration refuses spaces by design, "3d 12h"
    included); without its spaces it reads back as the duration shown, exactly when nothing
    was dropped, and otherwise less by under one of its last unit: never rounded up."""
    delta = timedelta(seconds=seconds)
    shown = format_duration(delta)
    back = parse_duration(shown.replace(" ", ""))
    if _producible(seconds):
        assert back == delta
    last_unit = _UNITS[shown.split()[-1]]
    assert timedelta(0) <= delta - back < timedelta(seconds=last_unit)
    assert format_duration(back) == shown


# Offsets in whole minutes and within a day, as ISO 8601 writes them.
offsets = st.integers(min_value=-(24 * 60 - 1), max_value=24 * 60 - 1).map(
    lambda minutes: timezone(timedelta(minutes=minutes))
)


@_settings(300)
@given(
    moment=st.datetimes(
        min_value=datetime(2, 1, 1),
        max_value=datetime(9998, 12, 31),
        timezones=st.none() | offsets,
    )
)
def test_parse_moment_reads_iso_moments_as_utc(moment: datetime) -> None:
    parsed = parse_moment(f"  {moment.isoformat()} ", RECORD_NOW)
    assert parsed.tzinfo is UTC
    assert parsed == (moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment)
    day = parse_moment(moment.date().isoformat(), RECORD_NOW)
    assert day == datetime.combine(moment.date(), datetime.min.time(), UTC)


@_settings(200)
@given(seconds=st.integers(min_value=1, max_value=MAX_SECONDS))
def test_parse_moment_counts_a_duration_from_now(seconds: int) -> None:
    assert parse_moment(f"{seconds}s", RECORD_NOW) == RECORD_NOW + timedelta(seconds=seconds)


@_settings(300)
@given(
    text=any_texts
    | st.datetimes(timezones=st.none() | offsets).map(datetime.isoformat)
    | st.dates().map(lambda d: d.isoformat())
)
@example(text="0001-01-01T00:00+01:00")
def test_parse_moment_answers_a_moment_or_value_error(text: str) -> None:
    try:
        parsed = parse_moment(text, RECORD_NOW)
    except ValueError:
        return
    assert parsed.tzinfo is UTC


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

    async def enqueue(self, kind: str, payload: dict[str, Any], **_: Any) -> None:
        self.jobs.append((kind, payload))

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


# -- config --------------------------------------------------------------------------------


def _toml_string(text: str) -> str:
    escaped = []
    for char in text:
        if char in '"\\':
            escaped.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            escaped.append(f"\\u{ord(char):04x}")
        else:
            escaped.append(char)
    return '"' + "".join(escaped) + '"'


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        pairs = (f"{_toml_string(k)} = {_toml_value(v)}" for k, v in value.items())
        return "{" + ", ".join(pairs) + "}"
    raise TypeError(f"no TOML for {type(value).__name__}")


def _toml(data: dict[str, Any]) -> str:
    """A TOML document of `data` (inline tables throughout), as tomllib reads it back."""
    return "".join(f"{_toml_string(k)} = {_toml_value(v)}\n" for k, v in data.items())


toml_scalars = (
    st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.sampled_from(["10m", "72h", "0s", "25h", "1d12h", "-1", "web", "slack:dm"])
    | st.sampled_from(["127.0.0.1:8700", ":80", "host:99999", "sqlite:///x.db", "http://h/"])
    | st.sampled_from(["alice", "group:finance", "payments.*", "*", "acme", "U0ALICE"])
)
toml_values = st.recursive(
    toml_scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=10), children, max_size=3)
    ),
    max_leaves=10,
)
_SECTIONS = sorted(config_model().model_fields)


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def _full_config() -> dict[str, Any]:
    """TEST_CONFIG with every section written out (as the defaults are), so edits reach
    every key of the config; TOML has no null, so unset options are left out."""
    data = _drop_none(Config().model_dump(mode="json"))
    data["slack"] = _drop_none(SlackConfig().model_dump(mode="json"))
    data["telegram"] = _drop_none(TelegramConfig().model_dump(mode="json"))
    data.update(copy.deepcopy(TEST_CONFIG))
    data["tenants"][1]["webhook_secret_env"] = "GLOBEX_SECRET"
    data["tenants"][1]["api_key_env"] = "GLOBEX_KEY"
    data["routes"][0]["notify"] = ["slack:C0FIN", "telegram:dm", "web"]
    return data


@st.composite
def mutated_configs(draw: st.DrawFn) -> dict[str, Any]:
    data = _full_config()
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = _paths(data)
        path = draw(st.sampled_from(paths))
        operation = draw(st.sampled_from(["set", "set", "delete", "add"]))
        if operation == "set":
            _set(data, path, draw(toml_values))
        elif operation == "delete":
            _delete(data, path)
        else:
            node = _get(data, path[:-1])
            if isinstance(node, dict):
                node[draw(st.text(max_size=10))] = draw(toml_values)
    return data


random_configs = st.dictionaries(st.sampled_from(_SECTIONS) | st.text(max_size=10), toml_values)


@pytest.fixture(autouse=True)
def _no_signoff_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No property here may see the developer's own SIGNOFF_* settings."""
    monkeypatch.delenv("SIGNOFF_CONFIG", raising=False)
    monkeypatch.delenv("SIGNOFF_DATABASE_URL", raising=False)


def _parsed(data: dict[str, Any]) -> Config | ConfigError:
    try:
        return parse_config(data)
    except ConfigError as error:
        assert error.message
        return error


def test_the_full_config_is_valid() -> None:
    assert isinstance(parse_config(_full_config()), Config)


@_settings(150)
@given(data=random_configs | mutated_configs())
def test_parse_config_answers_a_config_or_config_error(data: dict[str, Any]) -> None:
    config = _parsed(data)
    if isinstance(config, Config):
        config.directory()  # what the server builds from it at start


# The tables of the config, each with the model that reads it (principals and groups are
# maps of names to tables; a new key there is a new principal or group, not an unknown key).
# A file's model has a table per registered surface and their accounts in each principal.
_CONFIG = config_model()
_PRINCIPAL = typing.get_args(_CONFIG.model_fields["principals"].annotation)[1]
_TABLES: list[tuple[tuple[Any, ...], type[BaseModel]]] = [
    ((), _CONFIG),
    (("server",), ServerConfig),
    (("database",), DatabaseConfig),
    (("outbox",), OutboxConfig),
    (("sweeper",), SweeperConfig),
    (("slack",), SlackConfig),
    (("telegram",), TelegramConfig),
    (("tenants", 0), TenantConfig),
    (("tenants", 1), TenantConfig),
    (("principals", "alice"), _PRINCIPAL),
    (("principals", "carol"), _PRINCIPAL),
    (("groups", "finance"), GroupConfig),
    (("routes", 0), RouteConfig),
    (("routes", 3), RouteConfig),
    (("routes", 0, "escalation", 0), EscalationConfig),
]


@_settings(120)
@given(table=st.sampled_from(_TABLES), key=st.text(min_size=1, max_size=20), value=toml_values)
@example(table=((), _CONFIG), key="Server", value={})
@example(table=(("server",), ServerConfig), key="listen ", value="127.0.0.1:8700")
def test_an_unknown_key_is_refused_and_named(
    table: tuple[tuple[Any, ...], type[BaseModel]], key: str, value: Any
) -> None:
    path, model = table
    if key in model.model_fields:
        return
    data = _full_config()
    _get(data, path)[key] = value
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert key in info.value.message


@_settings(60)
@given(data=random_configs | mutated_configs())
def test_load_config_reads_toml_as_parse_config_reads_the_data(
    data: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    text = _toml(data)
    assert tomllib.loads(text) == data  # the helper writes what it means to
    path = tmp_path_factory.getbasetemp() / "properties-signoff.toml"
    path.write_text(text, encoding="utf-8")
    # load_config places a relative SQLite path beside the file, as parse_config cannot.
    as_loaded = copy.deepcopy(data)
    database = as_loaded.get("database")
    if isinstance(database, dict) and isinstance(database.get("url"), str):
        database["url"] = resolve_sqlite_path(database["url"], path.parent)
    expected = _parsed(as_loaded)
    try:
        loaded: Config | ConfigError = load_config(path)
    except ConfigError as error:
        loaded = error
    assert type(loaded) is type(expected)
    if isinstance(expected, Config):
        assert loaded == expected
    else:
        assert str(path) in str(loaded)


def _load_bytes(content: bytes, tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.getbasetemp() / "properties-signoff.toml"
    path.write_bytes(content)
    try:
        load_config(path)
    except ConfigError as error:
        assert error.message


@_settings(150)
@given(content=st.text(max_size=200), levels=st.integers(min_value=0, max_value=3000))
@example(content="", levels=3000)
def test_load_config_refuses_any_text_only_with_config_error(
    content: str, levels: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    _load_bytes(f"a = {'[' * levels}{']' * levels}\n{content}".encode(), tmp_path_factory)


@_settings(100)
@given(content=st.text(max_size=200) | mutated_configs().map(_toml))
def test_load_config_refuses_shallow_text_only_with_config_error(
    content: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    _load_bytes(content.encode(), tmp_path_factory)


@_settings(100)
@given(content=st.binary(max_size=200))
@example(content=b"\xff\xfe[server]\n")
def test_load_config_refuses_any_bytes_only_with_config_error(
    content: bytes, tmp_path_factory: pytest.TempPathFactory
) -> None:
    _load_bytes(content, tmp_path_factory)


@_settings(200)
@given(
    target=st.tuples(
        st.sampled_from(["slack:dm", "slack:C0FIN", "telegram:dm", "telegram:-100", "web"]),
        st.sampled_from(["", "\n", " ", "x"]),
    ).map("".join)
    | st.text(max_size=15)
)
@example(target="web\n")
def test_an_accepted_notify_target_is_one_signoff_can_send_to(target: str) -> None:
    data = _full_config()
    data["routes"][0]["notify"] = [target]
    config = _parsed(data)
    if isinstance(config, Config):
        parsed = Target.parse(target)
        assert str(parsed) == target
        assert parsed.surface in ("slack", "telegram", "web")
        assert parsed.where == parsed.where.strip()
        assert (parsed.surface == "web") == (parsed.where == "")


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
