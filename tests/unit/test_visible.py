"""Trojan Source on every surface: bidirectional controls and zero-width characters in what an
agent sent are shown as `\\uXXXX` by the one function every surface uses (bot/visible.py), in
the terminal card, the Slack blocks (card and Home) and the Telegram HTML alike, while the
request itself keeps them (the hash is over what was sent)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from bot.card import Card
from bot.cli.rendering import render_card
from bot.config import parse_config
from bot.reminders import title_of
from bot.routing import Directory
from bot.visible import in_json, one_line, visible
from channels.slack import card as slack_card
from channels.slack import home as slack_home
from channels.telegram import card as telegram_card
from tests.support.samples import RECORD_NOW as NOW
from tests.support.samples import TEST_CONFIG, approval_record

BIDI = ["\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069"]
BIDI += ["\u200e", "\u200f", "\u061c"]
ZERO_WIDTH = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff"]
HIDDEN = BIDI + ZERO_WIDTH


@pytest.fixture
def directory() -> Directory:
    return parse_config(copy.deepcopy(TEST_CONFIG)).directory()


def _escape(char: str) -> str:
    return f"\\u{ord(char):04x}"


def _hostile(char: str) -> Card:
    """A request with `char` in its title, summary, a field, an argument and the reason."""
    approval = approval_record(
        presentation={
            "title": f"Refund {char}0009 €",
            "summary": f"Line one\nline{char} two",
            "fields": [{"label": f"Cus{char}tomer", "value": f"Zo{char}ë"}],
        },
        tool_args={"customer": f"delete{char}_customer", "amount": 1},
        reason=f"fine{char}",
        decision_note=f"ok{char}",
    )
    return Card.from_approval(approval, NOW, parse_config(copy.deepcopy(TEST_CONFIG)).directory())


@pytest.mark.parametrize("char", HIDDEN, ids=[f"U+{ord(c):04X}" for c in HIDDEN])
def test_visible_shows_each_hiding_character_as_its_escape(char: str) -> None:
    assert visible(f"a{char}b") == f"a{_escape(char)}b"
    assert one_line(f"a{char}b") == f"a{_escape(char)}b"
    assert json.loads(in_json(json.dumps(f"a{char}b", ensure_ascii=False))) == f"a{char}b"
    assert char not in in_json(json.dumps(f"a{char}b", ensure_ascii=False))


def test_visible_keeps_layout_and_readable_text() -> None:
    text = "Zoë Ångström — €120\n\ttabbed\r\nend 👩‍💻"
    shown = visible(text)
    assert shown.startswith("Zoë Ångström — €120\n\ttabbed\r\nend ")
    assert "\\u200d" in shown  # the price: an emoji's joiner is shown too
    assert visible("\x1b[31m") == "\\u001b[31m" and one_line("a\nb") == "a\\u000ab"
    assert visible(visible(f"x{HIDDEN[0]}")) == visible(f"x{HIDDEN[0]}")  # idempotent


@pytest.mark.parametrize("char", HIDDEN, ids=[f"U+{ord(c):04X}" for c in HIDDEN])
def test_the_card_every_surface_renders_shows_them(char: str) -> None:
    card = _hostile(char)
    shown: list[str] = [card.title, card.summary or "", card.reason or "", card.decision_note or ""]
    shown += [part for pair in card.fields + card.arguments for part in pair]
    assert not any(char in text for text in shown)
    assert card.title == f"Refund {_escape(char)}0009 €"
    assert dict(card.arguments)["customer"] == f"delete{_escape(char)}_customer"
    assert card.summary == f"Line one\nline{_escape(char)} two"


@pytest.mark.parametrize("char", HIDDEN, ids=[f"U+{ord(c):04X}" for c in HIDDEN])
def test_terminal_slack_and_telegram_show_them(char: str) -> None:
    card = _hostile(char)
    terminal = render_card(card)
    blocks = json.dumps(slack_card.blocks(card), ensure_ascii=False)
    home = json.dumps(slack_home._plain(f"Refund {char}0009"), ensure_ascii=False)
    telegram = telegram_card.html(card)
    for rendered in (terminal, blocks, home, telegram):
        assert char not in rendered
        assert f"{_escape(char)}0009" in rendered.replace("\\\\u", "\\u")
    assert f"delete{_escape(char)}_customer" in telegram
    assert char not in slack_card.fallback_text(card)


def test_a_reminder_quotes_the_title_with_them_shown() -> None:
    approval = approval_record(presentation={"title": "Pay \u202eevil"})
    assert title_of(approval) == "Pay \\u202eevil"


def test_the_request_keeps_what_the_agent_sent(directory: Directory) -> None:
    args: dict[str, Any] = {"customer": "delete\u200b_customer"}
    approval = approval_record(tool_args=args)
    Card.from_approval(approval, NOW, directory)
    assert approval.tool_args == {"customer": "delete\u200b_customer"}
