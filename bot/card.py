"""The Card: what a human is shown of an approval, before any surface renders it.

Every surface (the CLI, Slack, Telegram, the web page) shows the same Card as the same
sections (bot/card_sections.py), so they show the same fields, the same hash and, once the
request is decided, the same outcome in the same words; only the markup differs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from bot import card_sections, grant_views
from bot.card_fields import CardFields, CardVote
from bot.card_sections import Section
from bot.durations import format_duration
from bot.edits import differences
from bot.errors import NoRoute
from bot.model import Kind, State
from bot.routing import Directory
from bot.visible import visible
from store.records import Approval


def card_votes(approval: Approval, directory: Directory | None = None) -> tuple[CardVote, ...]:
    """The votes `approval` carries (N-of-M), oldest first, named through `directory`."""
    describe = directory.describe if directory is not None else str
    return tuple(
        CardVote(
            describe(v.principal)
            + (f" for {describe(v.as_delegate_of)}" if v.as_delegate_of else ""),
            v.decision,
            v.at,
            v.via,
            _where(v.via, directory),
        )
        for v in approval.votes
    )


def _where(via: str | None, directory: Directory | None) -> str:
    """Where a vote was cast, as it reads after the time ("... at 10:00 UTC in Slack"): the
    surface's own words (its declaration's, which the directory carries), the CLI's, or the
    bare name of one no longer served."""
    if not via:
        return ""
    if via == "cli":
        return "from the CLI"
    words = directory.surface_words.get(via) if directory is not None else None
    return words or f"via {via}"


@dataclass(frozen=True, slots=True)
class Card(CardFields):
    """What a human is shown, before any surface renders it (the fields: CardFields), with
    its layout (bot/card_sections.py), which every surface shows."""

    @property
    def vote_lines(self) -> tuple[str, ...]:
        """Each vote in the card's words, for a list that shows them as lines."""
        return tuple(card_sections.vote_item(vote).line for vote in self.votes)

    @property
    def sections(self) -> tuple[Section, ...]:
        """The card as every surface lays it out (bot/card_sections.py)."""
        return card_sections.sections(self)

    @classmethod
    def from_approval(
        cls,
        approval: Approval,
        now: datetime,
        directory: Directory | None = None,
        max_value: int | None = 200,
    ) -> Card:
        """`directory` names principals and groups ("Alice Ng (alice)"; without one, the
        keys). `max_value` cuts long values for surfaces with little room (None: show
        everything). A quorum's votes are the ones the approval carries (the store reads
        them with it)."""
        describe = directory.describe if directory is not None else str
        name_of = directory.name_of if directory is not None else str
        presentation = approval.presentation if isinstance(approval.presentation, dict) else {}
        fields = tuple(
            (visible(f.get("label", "")), visible(_truncate(f.get("value"), max_value)))
            for f in presentation.get("fields") or []
            if isinstance(f, dict)
        )
        arguments = tuple(
            (visible(key), visible(_truncate(value, max_value)))
            for key, value in (approval.tool_args or {}).items()
        )
        summary = presentation.get("summary")
        pending = approval.state == State.PENDING
        overdue = pending and now >= approval.expires_at
        return cls(
            approval_id=approval.id,
            title=visible(presentation.get("title") or approval.capability),
            summary=visible(summary) if summary is not None else None,
            capability=visible(approval.capability),
            tool_name=visible(approval.tool_name),
            fields=fields,
            arguments=arguments,
            reason=visible(approval.reason) if approval.reason is not None else None,
            requested_by=visible(describe(approval.requested_by))
            if approval.requested_by
            else None,
            assignee=describe(approval.assignee),
            state=approval.state,
            expires_at=approval.expires_at,
            expires_in=format_duration(approval.expires_at - now)
            if pending and not overdue
            else None,
            overdue=overdue,
            decided_by=describe(approval.decided_by) if approval.decided_by else None,
            decided_at=approval.decided_at,
            decision_note=visible(approval.decision_note) if approval.decision_note else None,
            hash=approval.hash,
            approved=approval.grant_expires_at is not None,
            claimed_at=approval.claimed_at,
            executed_at=approval.executed_at,
            assigned_note=visible(approval.assigned_note) if approval.assigned_note else None,
            approvals_so_far=tuple(
                name_of(v.principal) for v in approval.votes if v.decision == "approve"
            ),
            required_approvals=approval.required_approvals,
            votes=card_votes(approval, directory),
            question=approval.kind == Kind.QUESTION,
            options=tuple(visible(o) for o in (approval.question or {}).get("options") or ()),
            answer=_answer_text(approval.answer),
            original_hash=approval.original_hash,
            changes=_changes(approval, max_value),
            by_grant=approval.grant_id,
        )


def _answer_text(answer: Any) -> str | None:
    if not isinstance(answer, dict):
        return None
    given = answer.get("option", answer.get("text"))
    return visible(given) if isinstance(given, str) else None


def _changes(approval: Approval, limit: int | None) -> tuple[tuple[str, str], ...]:
    """What an approver's edit changed, key by key: "120 → 100", "added: ...", "removed (was
    ...)". Every changed, added and removed key, against the call the agent asked for."""
    if approval.original_hash is None:
        return ()
    shown = []
    for change in differences(approval.original_args or {}, approval.tool_args or {}):
        kept = change.record()
        before = visible(_truncate(kept.get("before"), limit))
        after = visible(_truncate(kept.get("after"), limit))
        words = {
            "changed": f"{before} → {after}",
            "added": f"added: {after}",
            "removed": f"removed (was {before})",
        }[change.kind]
        shown.append((visible(change.key), words))
    return tuple(shown)


def _truncate(value: Any, limit: int | None) -> str:
    """Long values are cut with their full size shown, so a human knows there is more."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if limit is None or len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} chars)"


def card_for(
    directory: Directory,
    approval: Approval,
    now: datetime,
    *,
    max_value: int | None = 200,
) -> Card:
    """The Card for `approval` as every surface shows it (a quorum's votes come with the
    approval), with the confirmation its route asks for."""
    card = Card.from_approval(approval, now, directory, max_value)
    return replace(
        card,
        confirm=confirms(directory, approval),
        editable=editable(directory, approval),
        grantable=grantable(directory, approval),
    )


def grantable(directory: Directory, approval: Approval) -> bool:
    """Whether a card of `approval` offers "Approve, and allow the same for …" (as the config
    says now; the decision re-checks the grant in bot/standing.check_scope)."""
    return approval.state == State.PENDING and grant_views.offer(directory, approval) is not None


def editable(directory: Directory, approval: Approval) -> bool:
    """Whether approvers may edit `approval`'s call before approving (its route's `edits`, as
    the config says now; the edit itself is judged again by bot.edits)."""
    if approval.kind != Kind.TOOL_CALL or approval.state != State.PENDING:
        return False
    try:
        return directory.route_of(approval).edits != "none"
    except NoRoute:
        return False


def confirms(directory: Directory, approval: Approval) -> bool:
    """Whether the route of `approval` asks for a confirmation before Approve decides (as the
    config says now: a card posted before `confirm = true` was set asks too)."""
    try:
        return directory.route_of(approval).confirm
    except NoRoute:  # the route was removed from the config since the request came
        return False
