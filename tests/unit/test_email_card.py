"""A card as mail (channels/email/card.py): every section is shown, a kind the module does
not know included (its heading, prose, items and lines), an unknown outcome icon reads as a
bullet, agent text is escaped in HTML and kept to one line in the subject, and the email
surface's config refuses addresses as targets and names that are nobody's mailbox."""

from __future__ import annotations

import copy
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
    assert "Forecast (from the agent, unverified)\ncloudy <b>later</b>\n• Stormy by evening" in text
    assert "  Rain: 40%" in text and "✅ Approved by Alice" in text
    assert "Approve (you confirm on the page): https://s.test/email/links/a" in text
    html = email_card.html(card, links)  # type: ignore[arg-type]
    assert "cloudy &lt;b&gt;later&lt;/b&gt;" in html and "<script>" not in html
    assert "• <strong>Stormy</strong> by evening" in html and "40%" in html
    assert 'href="https://s.test/email/links/r"' in html


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
