"""A card as mail (channels/email/card.py): every section is shown, a kind the module does
not know included (its heading, prose, items and lines), an outcome reads in words with no
emoji (a colour bar in HTML; an unknown icon in grey), agent text is escaped in HTML and kept
to one line in the subject, and the email surface's config refuses addresses as targets and
names that are nobody's mailbox."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass

import pytest

from bot.card_sections import Item, Kind, Line, Section
from bot.config import parse_config
from bot.errors import ConfigError
from channels.email import card as email_card
from channels.email.card import Links
from tests.support.samples import TEST_CONFIG


@dataclass
class StubCard:
    """What the mail rendering reads of a card, with sections of our choosing."""

    sections: tuple[Section, ...]
    title: str = "Refund <script>x</script>\r\nBcc: everyone@example.com"
    question: bool = False
    short_hash: str = "sha256:0123456789ab"


SECTIONS = (
    Section(Kind.TITLE, text="Refund <script>x</script>", items=(Item("State", "pending"),)),
    Section(
        "forecast",  # type: ignore[arg-type]  # a kind added after this module was written
        label="Forecast",
        note="from the agent, unverified",
        text="cloudy <b>later</b>",
        items=(Item("Rain", "40%"),),
        lines=(Line("storm", "Stormy", " by evening"),),
    ),
    Section(Kind.HASH, text="sha256:0123456789ab", items=(Item("Hash", "sha256:" + "0" * 64),)),
    Section(Kind.OUTCOME, lines=(Line("approved", "Approved", " by Alice"),)),
)


def test_an_unknown_section_kind_and_icon_are_shown_generically() -> None:
    card = StubCard(SECTIONS)
    links = Links(approve="https://s.test/email/links/a", reject="https://s.test/email/links/r")
    text = email_card.text(card, links)  # type: ignore[arg-type]
    assert "Forecast (from the agent, unverified)\ncloudy <b>later</b>\nStormy by evening" in text
    assert "  Rain: 40%" in text and "\nApproved by Alice" in text
    assert "Approve (you confirm on the page): https://s.test/email/links/a" in text
    html = email_card.html(card, links)  # type: ignore[arg-type]
    assert "cloudy &lt;b&gt;later&lt;/b&gt;" in html and "<script>" not in html
    assert (
        'border-left:4px solid #6e7781"><strong>Stormy</strong> by evening' in html
        and "40%" in html
    )
    assert 'border-left:4px solid #1a7f37"><strong>Approved</strong> by Alice' in html
    assert 'href="https://s.test/email/links/r"' in html


# What a mail client draws as a box without an emoji font: the emoji blocks, the symbols and
# dingbats (✅ ⛔ ✖ ⚙ ⚠ ❔), the clocks (⌛) and the variation selector that asks for emoji.
_EMOJI = re.compile("[\U0001f000-\U0001faff\u2600-\u27bf\u2b00-\u2bff\u231a-\u23ff\ufe0f]")


@pytest.mark.parametrize("icon", [*email_card.COLOURS, "storm"])
def test_no_mail_says_an_outcome_with_an_emoji(icon: str) -> None:
    outcome = Section(Kind.OUTCOME, lines=(Line(icon, "Decided", " by Alice at 10:00 UTC"),))
    card = StubCard((SECTIONS[0], outcome, SECTIONS[2]))
    links = Links(page="https://s.test/web/approvals/1")
    for part in (
        email_card.text(card, links),  # type: ignore[arg-type]
        email_card.html(card, links),  # type: ignore[arg-type]
        email_card.page("page.html", card=card, message=None, confirm=False, link=None, page=None),
    ):
        assert "Decided" in part and not _EMOJI.findall(part), _EMOJI.findall(part)
    html = email_card.html(card, links)  # type: ignore[arg-type]
    assert f"border-left:4px solid {email_card.colour(outcome.lines[0])}" in html


def test_the_subject_is_one_line_whatever_the_title() -> None:
    subject = email_card.subject(StubCard(SECTIONS))  # type: ignore[arg-type]
    assert "\r" not in subject and "\n" not in subject
    assert subject == (
        "[signoff] Approval needed: Refund <script>x</script> Bcc: everyone@example.com "
        "(sha256:0123456789ab)"
    )


def _config(**changes: object) -> dict[str, object]:
    data = copy.deepcopy(TEST_CONFIG)
    data["email"] = {"host": "smtp.test", "from_address": "signoff@signoff.test"}
    data["principals"]["alice"]["email"] = "alice@example.com"
    data.update(changes)
    return data


@pytest.mark.parametrize(
    ("target", "error"),
    [
        ("email:mallory@evil.test", "notify target 'email:mallory@evil.test': expected"),
        ("email:nobody", "'email:nobody' names no configured principal"),
        ("email:bob", "'email:bob': principals.bob has no email"),
    ],
)
def test_a_target_names_a_principal_with_an_address(target: str, error: str) -> None:
    data = _config()
    data["routes"][0]["notify"] = [target]  # type: ignore[index]
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert error in info.value.message


def test_addresses_are_one_mailbox_each_in_lower_case() -> None:
    data = _config()
    data["principals"]["bob"]["email"] = "Alice@Example.COM"  # type: ignore[index]
    with pytest.raises(ConfigError, match=r"is also principals\.alice\.email"):
        parse_config(data)
    data["principals"]["bob"]["email"] = "Bob Stone <bob@example.com>"  # type: ignore[index]
    with pytest.raises(ConfigError, match=r"principals\.bob\.email"):
        parse_config(data)
    data["routes"][0]["notify"] = ["email:dm", "email:alice", "email:@alice"]  # type: ignore[index]
    del data["principals"]["bob"]["email"]  # type: ignore[attr-defined]
    assert parse_config(data).directory().principals["alice"].account("email") == (
        "alice@example.com"
    )
