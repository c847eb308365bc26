"""A card as mail: the subject, the plain-text part and the HTML part, from the same
sections every surface shows (bot/card_sections.py), with the decision links.

Sections are laid out generically (a heading, the prose, the items as lines, the outcome's
lines), with only the title, the hash and the outcome placed by kind: a section kind added
to the card later is shown in the same words as elsewhere without a change here. Agent text
is escaped in the HTML (Jinja2's autoescape) and kept out of headers' line structure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import jinja2

from bot.card import Card
from bot.card_sections import Kind, Line, Section

# The outcome's colour: a bar beside its line in the HTML part, as the web page shows it. No
# emoji, in either part: a mail client without an emoji font draws them as boxes, and the
# line's own words ("Approved by ...") already say what happened. An icon this module does
# not know yet reads in grey.
COLOURS = {
    "approved": "#1a7f37",
    "answered": "#1a7f37",
    "rejected": "#cf222e",
    "failed": "#cf222e",
    "expired": "#9a6700",
    "unknown": "#9a6700",
    "executing": "#9a6700",
    "cancelled": "#6e7781",
    "superseded": "#6e7781",
}
DEFAULT_COLOUR = "#6e7781"
# A subject line stays readable in a mailbox list: the title is cut past this.
_SUBJECT_TITLE = 120
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]+")

_templates = jinja2.Environment(
    loader=jinja2.PackageLoader("channels.email", "templates"),
    autoescape=True,
    trim_blocks=True,
    lstrip_blocks=True,
    undefined=jinja2.StrictUndefined,
)


@dataclass(frozen=True, slots=True)
class Links:
    """Where the card's controls lead: a decision link per action (absent once it cannot be
    decided by mail), and the request's web page when the web surface is served."""

    approve: str | None = None
    reject: str | None = None
    page: str | None = None


def colour(line: Line) -> str:
    return COLOURS.get(line.icon, DEFAULT_COLOUR)


def outcome_text(line: Line) -> str:
    return f"{line.headline}{line.rest}".strip()


def subject(card: Card) -> str:
    """The card's subject: what is asked, its title and its short hash, on one line."""
    title = _CONTROL.sub(" ", card.title).strip()
    if len(title) > _SUBJECT_TITLE:
        title = title[:_SUBJECT_TITLE] + "…"
    asks = "Question" if card.question else "Approval needed"
    return f"[signoff] {asks}: {title} ({card.short_hash})"


def text(card: Card, links: Links, *, lead: str | None = None) -> str:
    """The plain-text part: `lead` (what a reply is about), the sections, then the links."""
    out: list[str] = [lead, ""] if lead else []
    for section in card.sections:
        out += _section_text(section)
        out.append("")
    out += _links_text(card, links)
    return "\n".join(out).rstrip() + "\n"


def _section_text(section: Section) -> list[str]:
    if section.kind == Kind.TITLE:
        return [section.text, *(item.line for item in section.items)]
    if section.kind == Kind.HASH:
        return [section.text, *(item.line for item in section.items)]
    lines = [section.heading] if section.label else []
    if section.text:
        lines.append(section.text)
    lines += [outcome_text(line) for line in section.lines]
    lines += [("  " if section.label else "") + item.line for item in section.items]
    return lines


def _links_text(card: Card, links: Links) -> list[str]:
    out = []
    if links.approve:
        out.append(f"Approve (you confirm on the page): {links.approve}")
    if links.reject:
        out.append(f"Reject (you give a reason on the page): {links.reject}")
    if links.approve or links.reject:
        out.append("Each link works once, only for you, and only for exactly what this mail shows.")
    if links.page:
        out.append(f"Open in browser: {links.page}")
    return out


def html(card: Card, links: Links, *, lead: str | None = None) -> str:
    """The HTML part: the same sections and links, escaped."""
    return _templates.get_template("mail.html").render(
        card=card, links=links, lead=lead, colour=colour, Kind=Kind
    )


def page(template: str, **context: object) -> str:
    """A page of the decision links (channels/email/pages.py)."""
    return _templates.get_template(template).render(colour=colour, Kind=Kind, **context)
