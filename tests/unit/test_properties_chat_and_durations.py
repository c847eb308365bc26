"""Property tests (hypothesis) for what people and chat platforms send back: the Telegram reply
grammar, Slack button values and Telegram callback data, and durations and moments as people
write them (issue 15, "Suites that stay").

Each property states what must hold for every input hypothesis can generate; a parser may
refuse, but only with signoff's own errors (or the ValueError it documents), never with a
RecursionError, TypeError, KeyError or the like. The inputs that broke a property when it was
written (and the bugs they showed, since fixed) stay as @example so they are tried first
every run.

Settings (no example database, a fixed seed under CI=true, no deadline) and why:
tests/support/json_strategies.py property_settings.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from bot.card import Card
from bot.durations import MAX_SECONDS, format_duration, parse_duration, parse_moment
from channels.slack import card as slack_card
from channels.telegram import card as telegram_card
from tests.support.json_strategies import any_texts, principal_keys, texts
from tests.support.json_strategies import property_settings as _settings
from tests.support.samples import RECORD_NOW, approval_record


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
