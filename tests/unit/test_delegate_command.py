"""The chat grammar for a delegation: `delegate NAME [from WHEN] [until WHEN] [SCOPE]`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bot.delegations import DelegateCommand, parse_delegate
from bot.errors import InvalidRequest

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("bob", DelegateCommand("bob", None, None, "*")),
        (
            "bob until 2026-12-24 payments.*",
            DelegateCommand("bob", None, datetime(2026, 12, 24, tzinfo=UTC), "payments.*"),
        ),
        (
            "bob payments.* from 2d until 2026-12-24T18:30",
            DelegateCommand(
                "bob",
                NOW + timedelta(days=2),
                datetime(2026, 12, 24, 18, 30, tzinfo=UTC),
                "payments.*",
            ),
        ),
        (
            "bob until 2026-12-24T18:30+01:00",
            DelegateCommand("bob", None, datetime(2026, 12, 24, 17, 30, tzinfo=UTC), "*"),
        ),
    ],
)
def test_the_grammar(text: str, expected: DelegateCommand) -> None:
    assert parse_delegate(text.split(), NOW) == expected


@pytest.mark.parametrize(
    "text",
    ["", "bob until", "bob until christmas", "bob payments.* contracts.*", "bob from"],
)
def test_anything_else_says_how(text: str) -> None:
    with pytest.raises(InvalidRequest, match="delegate NAME"):
        parse_delegate(text.split(), NOW)
