"""The card's layout, decided once (bot/card_sections.py): its sections in one order, and every
surface (the terminal, Slack, Telegram, the web page) showing each of them in the same words,
with agent text never becoming any surface's markup."""

from __future__ import annotations

import copy
import re
from datetime import timedelta
from typing import Any

import jinja2
import pytest

from bot.card import Card
from bot.card_sections import Kind, Section
from bot.cli.rendering import render_card
from bot.config import parse_config
from bot.routing import Directory
from bot.visible import one_line
from channels.slack import card as slack_card
from channels.telegram import card as telegram_card
from tests.support.markup import read_html
from tests.support.samples import RECORD_NOW as NOW
from tests.support.samples import TEST_CONFIG, approval_record, cast_vote
from tests.support.slack_rig import texts_in

INJECTION = '<b>bold</b> <a href="https://evil.example">x</a> &amp; <script>alert(1)</script>'


@pytest.fixture
def directory() -> Directory:
    return parse_config(copy.deepcopy(TEST_CONFIG)).directory()


def _quorum(directory: Directory, **changes: Any) -> Card:
    """A request with something in every section: fields, arguments, a reason, a quorum with
    one vote, a hand-over note."""
    approval = approval_record(
        required_approvals=2,
        assignee="carol",
        assigned_note="handed over by Alice Ng",
        tool_args={"charge": "ch_1", "memo": "line one\nline two"},
        votes=(cast_vote("alice", via="slack"),),
        **changes,
    )
    return Card.from_approval(approval, NOW, directory, max_value=None)


def _rejected(directory: Directory) -> Card:
    approval = approval_record(
        state="rejected",
        decided_by="bob",
        decided_at=NOW + timedelta(hours=2),
        decision_note="over budget",
    )
    return Card.from_approval(approval, NOW, directory, max_value=None)


def _decided_quorum(directory: Directory) -> Card:
    """Two of two: Alice approved on the web, then Bob in Slack, which decided it."""
    approval = approval_record(
        required_approvals=2,
        approvers=["alice", "bob"],
        state="approved",
        decided_by="bob",
        decided_at=NOW + timedelta(minutes=90),
        grant_expires_at=NOW + timedelta(days=1),
        votes=(cast_vote("alice"), cast_vote("bob", 90, "slack")),
    )
    return Card.from_approval(approval, NOW, directory, max_value=None)


def _web(card: Card) -> str:
    """The approval page's card, rendered by the template the web surface uses."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("channels.web", "templates"),
        autoescape=jinja2.select_autoescape(default=True),
        undefined=jinja2.StrictUndefined,
    )
    context = {"delegates": [], "allowed": set(), "why_not": None, "choices": [], "alert": None}
    return env.get_template("_card.html").render(card=card, csrf="t", **context)


def _squeezed(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def _shown(card: Card) -> dict[str, str]:
    """What a human reads on each surface, as text, whitespace squeezed."""
    blocks = slack_card.blocks(card)
    slack = "\n".join(texts_in(blocks, "plain_text") + texts_in(blocks, "mrkdwn"))
    return {
        "cli": _squeezed(render_card(card)),
        "slack": _squeezed(slack.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")),
        "telegram": _squeezed(read_html(telegram_card.html(card)).text),
        "web": _squeezed(read_html(_web(card)).text),
    }


# Labels a surface leaves out by design: chat cards show the state as their buttons or outcome,
# and the short hash alone, not the id and the full hash; the web page has the id in its URL.
_LEFT_OUT = {
    "cli": set(),
    "slack": {"State", "Id", "Hash"},
    "telegram": {"State", "Id", "Hash"},
    "web": {"Id", "Hash"},
}
# The web page shows the state as a badge above the title, its value alone.
_UNLABELLED = {"cli": set(), "slack": set(), "telegram": set(), "web": {"State"}}


def test_the_sections_come_in_one_order(directory: Directory) -> None:
    assert [s.kind for s in _quorum(directory).sections] == [
        Kind.TITLE,
        Kind.SUMMARY,
        Kind.WHAT,
        Kind.FIELDS,
        Kind.ARGUMENTS,
        Kind.REASON,
        Kind.PEOPLE,
        Kind.HASH,
    ]
    bare = Card.from_approval(
        approval_record(presentation={"title": "T"}, tool_args={}, reason=None, state="expired"),
        NOW,
        directory,
    )
    assert [s.kind for s in bare.sections] == [
        Kind.TITLE,
        Kind.WHAT,
        Kind.PEOPLE,
        Kind.HASH,
        Kind.OUTCOME,
    ]


def test_the_sections_say_it_in_these_words(directory: Directory) -> None:
    sections = {s.kind: s for s in _quorum(directory).sections}
    assert [i.line for i in sections[Kind.WHAT].items] == [
        "Capability: payments.refund",
        "Tool: stripe.refunds.create",
    ]
    assert sections[Kind.ARGUMENTS].heading == "Arguments"
    assert [i.line for i in sections[Kind.ARGUMENTS].items] == [
        "charge = ch_1",
        "memo = line one\nline two",
    ]
    assert sections[Kind.REASON].heading == "Reason (from the agent, unverified)"
    assert [i.line for i in sections[Kind.PEOPLE].items] == [
        "Requested by Sam Requester (sam)",
        "Assigned to Carol Diaz (carol) (handed over by Alice Ng)",
        "Approvals: 1 of 2 (Alice Ng)",
        "Approved by Alice Ng (alice) at 2026-03-02 09:30 UTC in Slack",
        "Expires in 3 d (2026-03-05 09:00 UTC)",
    ]
    overdue = Card.from_approval(approval_record(), NOW + timedelta(days=4), directory)
    assert [i.line for i in overdue.sections[-2].items][-1] == (
        "Time ran out at 2026-03-05 09:00 UTC; it can no longer be decided"
    )
    outcome = _rejected(directory).sections[-1]
    assert [(line.headline, line.rest) for line in outcome.lines] == [
        ("Rejected", " by Bob Stone (bob) at 2026-03-02 11:00 UTC")
    ]
    assert [i.line for i in outcome.items] == ["Note: over budget"]


def test_a_decided_quorum_names_every_vote_not_only_the_last(directory: Directory) -> None:
    sections = {s.kind: s for s in _decided_quorum(directory).sections}
    assert [i.line for i in sections[Kind.PEOPLE].items][2:4] == [
        "Approved by Alice Ng (alice) at 2026-03-02 09:30 UTC on the web",
        "Approved by Bob Stone (bob) at 2026-03-02 10:30 UTC in Slack",
    ]
    assert [(line.headline, line.rest) for line in sections[Kind.OUTCOME].lines] == [
        ("Approved", " by Bob Stone (bob) at 2026-03-02 10:30 UTC")
    ]


@pytest.mark.parametrize("case", ["pending", "rejected", "decided quorum"])
def test_every_surface_shows_every_section(directory: Directory, case: str) -> None:
    card = {"pending": _quorum, "rejected": _rejected, "decided quorum": _decided_quorum}[case](
        directory
    )
    for surface, text in _shown(card).items():
        for section in card.sections:
            for part in _parts(section, _LEFT_OUT[surface], _UNLABELLED[surface]):
                # A terminal shows a line break inside a value as its escape (bot/visible.py).
                shown = one_line(part) if surface == "cli" else _squeezed(part)
                assert shown.casefold() in text.casefold(), (surface, section.kind, part, text)


def _parts(section: Section, left_out: set[str], unlabelled: set[str]) -> list[str]:
    parts = [section.text] if section.label in left_out else [section.heading, section.text]
    for item in section.items:
        if item.label not in left_out:
            parts += [item.value] if item.label in unlabelled else [item.label, item.value]
    for line in section.lines:
        parts += [line.headline, line.rest.strip()]
    return [p for p in parts if p]


def test_slack_shows_every_vote_of_a_large_quorum_ten_to_a_context_block(
    directory: Directory,
) -> None:
    votes = tuple(cast_vote("alice", i) for i in range(12))  # one name, twelve lines
    card = Card.from_approval(
        approval_record(required_approvals=13, votes=votes), NOW, directory, max_value=None
    )
    blocks = slack_card.blocks(card)
    assert all(len(b["elements"]) <= 10 for b in blocks if b["type"] == "context")
    shown = [t for t in texts_in(blocks, "plain_text") if t.startswith("Approved by")]
    assert len(shown) == 12


def test_agent_text_is_no_markup_on_any_surface(directory: Directory) -> None:
    card = Card.from_approval(
        approval_record(
            presentation={
                "title": INJECTION,
                "summary": INJECTION,
                "fields": [{"label": INJECTION, "value": INJECTION}],
            },
            tool_args={INJECTION: INJECTION},
            reason=INJECTION,
            state="rejected",
            decided_by="bob",
            decision_note=INJECTION,
        ),
        NOW,
        directory,
        max_value=None,
    )
    web = read_html(_web(card))
    card_tags = {"article", "header", "section", "p", "h1", "h2", "dl", "div", "dt", "dd"}
    card_tags |= {"code", "pre", "span", "time", "ul", "li", "strong"}
    assert set(web.tags) <= card_tags
    telegram = read_html(telegram_card.html(card))
    assert set(telegram.tags) <= {"b", "code", "pre", "i"}
    # Read back as text, each is what the agent sent: title, summary, field label and value,
    # argument key and value, reason, note.
    assert web.text.count(INJECTION) == 8
    assert telegram.text.count(INJECTION) == 8
    blocks = slack_card.blocks(card)
    assert not any("<" in t for t in texts_in(blocks, "mrkdwn"))  # never mrkdwn: plain_text
    assert INJECTION in texts_in(blocks, "plain_text")
