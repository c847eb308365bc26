"""The Telegram card: HTML that never lets agent text become markup, buttons whose data fits
Telegram's 64 bytes and says exactly which card it belongs to, and the reply grammar."""

from __future__ import annotations

import copy
import re
from datetime import timedelta
from typing import Any

import pytest

from bot.card import Card
from bot.config import parse_config
from bot.routing import Directory
from channels.telegram import card as telegram_card
from tests.support.markup import read_html
from tests.support.samples import RECORD_HASH as HASH
from tests.support.samples import RECORD_NOW as NOW
from tests.support.samples import TEST_CONFIG, approval_record, cast_vote

INJECTION = '<b>bold</b> <a href="https://evil.example">click</a> &amp; </pre>'


@pytest.fixture
def directory() -> Directory:
    return parse_config(copy.deepcopy(TEST_CONFIG)).directory()


def _card(directory: Directory, **changes: Any) -> Card:
    return Card.from_approval(approval_record(**changes), NOW, directory)


def test_callback_data_fits_and_names_the_card(directory: Directory) -> None:
    card = _card(directory)
    for action in ("approve", "reject"):
        data = telegram_card.callback_data(action, card)
        assert len(data.encode()) <= 64
        pressed = telegram_card.parse_callback(data)
        assert pressed == telegram_card.Pressed(action, card.approval_id, HASH[:12])


def test_a_questions_options_are_named_by_place_within_64_bytes(directory: Directory) -> None:
    options = ["Refund in full", "Store credit", "x" * 200]
    card = _card(
        directory, kind="question", tool_name=None, tool_args=None, question={"options": options}
    )
    rows = telegram_card.keyboard(card)
    assert rows is not None
    assert [label for row in rows for label, _ in row][:2] == options[:2]
    assert [label for row in rows for label, _ in row][3] == "Reject"  # never Approve
    for index, row in enumerate(rows[:3]):
        [(label, data)] = row
        assert len(data.encode()) <= 64 and len(label) <= telegram_card.OPTION_LABEL
        pressed = telegram_card.parse_callback(data)
        assert pressed == telegram_card.Pressed("answer", card.approval_id, HASH[:12], option=index)
    free = _card(directory, kind="question", tool_name=None, tool_args=None, question={})
    assert [label for label, _ in (telegram_card.keyboard(free) or [[]])[0]] == ["Answer", "Reject"]


def test_answer_in_a_reply_needs_words() -> None:
    assert telegram_card.parse_reply("answer: refund only 60") == telegram_card.Reply(
        "answer", "refund only 60"
    )
    assert telegram_card.parse_reply("answer") is None


@pytest.mark.parametrize(
    "data",
    [
        None,
        "",
        "approve",
        f"s1:x:{'a' * 32}:{'b' * 12}",  # unknown action
        f"s0:a:{'a' * 32}:{'b' * 12}",  # unknown version
        f"s1:a:{'a' * 31}:{'b' * 12}",  # short id
        f"s1:a:{'a' * 32}:{'B' * 12}",  # not lower hex
        f"s1:a:{'a' * 32}:{'b' * 12}:extra",
        f"s1:o5:{'a' * 32}:{'b' * 12}",  # at most five options: places 0 to 4
        f"s1:o:{'a' * 32}:{'b' * 12}",
    ],
)
def test_callback_data_signoff_did_not_make_is_not_read(data: str | None) -> None:
    assert telegram_card.parse_callback(data) is None


def test_pending_card_has_two_buttons_and_the_short_hash_last(directory: Directory) -> None:
    card = _card(directory)
    rows = telegram_card.keyboard(card)
    assert rows is not None
    assert [label for label, _ in rows[0]] == ["Approve", "Reject"]
    html = telegram_card.html(card)
    assert html.splitlines()[-1] == f"<code>sha256:{HASH[:12]}</code>"
    text = read_html(html).text
    assert "Refund €120.00 to Zoë" in text
    assert "Capability: payments.refund" in text
    assert "Tool: stripe.refunds.create" in text
    assert "Amount: €120.00" in text
    assert "charge = ch_1" in text
    assert "Reason (from the agent, unverified): refunds over €100 need approval" in text
    assert "Requested by Sam Requester (sam)" in text
    assert "Assigned to group finance" in text
    assert "Expires in" in text


def test_agent_text_never_becomes_markup(directory: Directory) -> None:
    card = _card(
        directory,
        presentation={
            "title": INJECTION,
            "summary": INJECTION,
            "fields": [{"label": INJECTION, "value": INJECTION}],
        },
        tool_args={INJECTION: INJECTION},
        reason=INJECTION,
    )
    html = telegram_card.html(card)
    parsed = read_html(html)
    # Only signoff's own formatting: the title, code spans, the arguments block, the reason.
    assert set(parsed.tags) <= {"b", "code", "pre", "i"}
    assert "a" not in parsed.tags
    # Read back as text, each injected string is exactly what the agent sent.
    assert parsed.text.count(INJECTION) >= 5
    assert "&amp;amp;" in html  # "&amp;" from the agent is shown as those five characters


def test_decided_card_has_no_buttons_and_says_who(directory: Directory) -> None:
    card = _card(
        directory,
        state="rejected",
        decided_by="alice",
        decided_at=NOW + timedelta(hours=2),
        decision_note="<i>budget</i> exhausted",
    )
    assert telegram_card.keyboard(card) is None
    html = telegram_card.html(card)
    assert (
        f"⛔ <b>Rejected</b> by Alice Ng (alice) at {NOW + timedelta(hours=2):%Y-%m-%d %H:%M}"
        in html
    )
    assert "Note: &lt;i&gt;budget&lt;/i&gt; exhausted" in html
    assert html.splitlines()[-1] == f"<code>sha256:{HASH[:12]}</code>"


def test_overdue_card_offers_no_buttons(directory: Directory) -> None:
    card = Card.from_approval(approval_record(), NOW + timedelta(days=30), directory)
    assert card.overdue
    assert telegram_card.keyboard(card) is None


def test_a_huge_request_fits_telegrams_limit_and_says_what_is_left_out(
    directory: Directory,
) -> None:
    args = {f"line_item_{i:03d}": "x" * 150 for i in range(300)}
    card = _card(directory, tool_args=args)
    html = telegram_card.html(card)
    text = read_html(html).text
    assert len(text) <= 4096
    match = re.search(
        r"… and (\d+) more arguments; every one is in signoff approvals show (\S+)", text
    )
    assert match is not None and match.group(2) == card.approval_id
    shown = len(re.findall(r"line_item_\d{3} = ", text))
    assert shown + int(match.group(1)) == 300
    assert html.splitlines()[-1] == f"<code>sha256:{HASH[:12]}</code>"


@pytest.mark.parametrize(
    ("text", "action", "note"),
    [
        ("approve", "approve", None),
        ("approve looks fine", "approve", "looks fine"),
        ("Yes", "approve", None),
        ("ok, ship it", "approve", "ship it"),
        ("OK: ship it", "approve", "ship it"),
        ("reject", "reject", None),
        ("no budget exhausted", "reject", "budget exhausted"),
        ("No. Budget\nexhausted", "reject", "Budget\nexhausted"),
        ("  reject   duplicate  ", "reject", "duplicate"),
    ],
)
def test_reply_grammar(text: str, action: str, note: str | None) -> None:
    assert telegram_card.parse_reply(text) == telegram_card.Reply(action, note)  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["maybe", "", "   ", "approves", "noo", "not now", "👍"])
def test_anything_else_is_not_a_decision(text: str) -> None:
    assert telegram_card.parse_reply(text) is None


def test_a_quorum_card_shows_its_progress_and_how_it_was_assigned(directory: Directory) -> None:
    approval = approval_record(
        required_approvals=2,
        assignee="carol",
        assigned_note="escalated to Carol Diaz after 24 h without a decision",
        votes=(cast_vote("alice"),),
    )
    card = Card.from_approval(approval, NOW, directory)
    assert card.progress == "1 of 2 (Alice Ng)"
    text = read_html(telegram_card.html(card)).text
    assert "Approvals: 1 of 2 (Alice Ng)" in text
    assert (
        "Assigned to Carol Diaz (carol) (escalated to Carol Diaz after 24 h without a decision)"
        in text
    )
    decided = Card.from_approval(
        approval_record(
            required_approvals=2,
            state="approved",
            decided_by="bob",
            votes=(cast_vote("alice"), cast_vote("bob", 90, "telegram")),
        ),
        NOW,
        directory,
    )
    assert decided.progress is None  # no longer gathering, but every vote it took is shown
    text = read_html(telegram_card.html(decided)).text
    assert "Approved by Alice Ng (alice) at 2026-03-02 09:30 UTC on the web" in text
    assert "Approved by Bob Stone (bob) at 2026-03-02 10:30 UTC in Telegram" in text


def test_a_large_quorum_shows_its_first_votes_and_where_every_one_is() -> None:
    raw = copy.deepcopy(TEST_CONFIG)
    for i in range(50):  # a long name each: the worst a card holds
        raw["principals"][f"p{i}"] = {"name": "N" * 150}
    fields = [{"label": f"Line {i}", "value": "x" * 1000} for i in range(50)]
    approval = approval_record(
        presentation={"title": "T" * 300, "summary": "s" * 4000, "fields": fields},
        reason="r" * 4000,
        required_approvals=50,
        state="rejected",
        decided_by="p49",
        decision_note="n" * 3000,
        votes=tuple(cast_vote(f"p{i}", i) for i in range(50)),
    )
    html = telegram_card.html(Card.from_approval(approval, NOW, parse_config(raw).directory()))
    text = read_html(html).text
    assert text.count("Approved by") == 3
    assert f"… and 47 more votes; every one is in signoff approvals show {approval.id}" in text
    assert len(text.encode("utf-16-le")) // 2 <= 4096  # Telegram's limit, in UTF-16 units
