"""Durations as operators write them in config and agents send them in requests."""

from __future__ import annotations

from datetime import timedelta

import pytest

from bot.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("15m", timedelta(minutes=15)),
        ("72h", timedelta(hours=72)),
        ("3d", timedelta(days=3)),
        ("1d12h", timedelta(days=1, hours=12)),
        ("2w", timedelta(weeks=2)),
        ("1h30m15s", timedelta(hours=1, minutes=30, seconds=15)),
    ],
)
def test_parse_duration_accepts_the_documented_forms(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    "bad",
    ["3 fortnights", "", "0h", "-1h", "72", "h", "72H", "1.5h", "3d 12h", "72 h"],
)
def test_parse_duration_refuses_malformed_text_naming_it(bad: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_duration(bad)
    assert repr(bad) in str(info.value)


def test_parse_duration_refuses_zero_saying_it_must_be_positive() -> None:
    with pytest.raises(ValueError, match="longer than zero"):
        parse_duration("0m0s")


@pytest.mark.parametrize("bad", [72, 72.0, None, ["72h"]])
def test_parse_duration_refuses_non_strings_naming_the_value(bad: object) -> None:
    with pytest.raises(ValueError) as info:
        parse_duration(bad)  # type: ignore[arg-type]
    assert repr(bad) in str(info.value)


@pytest.mark.parametrize("huge", ["1000000000d", "99999999999999999999w"])
def test_parse_duration_refuses_absurdly_long_durations_with_value_error(huge: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_duration(huge)
    assert huge in str(info.value)


@pytest.mark.parametrize(
    ("delta", "expected"),
    [
        (timedelta(days=2, hours=4), "2 d 4 h"),
        (timedelta(days=2, hours=4, minutes=59), "2 d 4 h"),
        (timedelta(days=3), "3 d"),
        (timedelta(hours=3, minutes=5), "3 h 5 m"),
        (timedelta(hours=3, minutes=5, seconds=40), "3 h 5 m"),
        (timedelta(hours=3), "3 h"),
        (timedelta(minutes=7, seconds=3), "7 m"),
        (timedelta(seconds=45), "45 s"),
    ],
)
def test_format_duration_compact_human_form(delta: timedelta, expected: str) -> None:
    assert format_duration(delta) == expected


def test_format_duration_of_a_past_deadline_is_not_negative() -> None:
    assert format_duration(timedelta(seconds=-30)) == "0 s"


@pytest.mark.parametrize("text", ["1d12h", "3h5m", "45s"])
def test_format_duration_reads_back_what_parse_duration_read(text: str) -> None:
    formatted = format_duration(parse_duration(text))
    assert parse_duration(formatted.replace(" ", "")) == parse_duration(text)
