"""The approval page's "Approve, and allow the same for …": what the form offers (lifetimes
within the route's `max_grant_lifetime`, the arguments it may bind: equal to their value here,
or a number at most it) and the GrantScope a posted form asks for. bot/grant_views.py says what
is offered, bot/standing.py judges it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bot import grant_views
from bot.durations import duration_text, format_duration, parse_duration
from bot.errors import InvalidRequest
from bot.grant_views import MAX_USES
from bot.routing import Directory
from bot.standing import GrantScope
from store.records import Approval


def offer(directory: Directory, row: Approval) -> dict[str, Any] | None:
    """What the form shows for `row` (bot/grant_views.offer, in the template's shape)."""
    offered = grant_views.offer(directory, row)
    if offered is None:
        return None
    return {
        "lifetimes": [(duration_text(t), format_duration(t)) for t in offered.lifetimes],
        "arguments": [
            {"key": a.key, "value": a.value, "number": a.number} for a in offered.arguments
        ],
    }


def scope_from(form: Mapping[str, str]) -> GrantScope:
    """The grant a posted form asks for; InvalidRequest in the form's words."""
    try:
        lifetime = parse_duration(form.get("lifetime", ""))
    except ValueError:
        raise InvalidRequest(
            "Choose how long to allow the same for; nothing was approved."
        ) from None
    uses_text = form.get("max_uses", "").strip()
    if uses_text and not (uses_text.isdigit() and 1 <= int(uses_text) <= MAX_USES):
        raise InvalidRequest(f"The number of uses is a whole number from 1 to {MAX_USES}.")
    # `bind.KEY`: "equal", "at_most", or "" (any value): each argument the form showed.
    bound = [(name[5:], how) for name, how in form.items() if name.startswith("bind.")]
    return GrantScope(
        lifetime=lifetime,
        this_run=form.get("this_run") == "1",
        equal=tuple(key for key, how in bound if how == "equal"),
        at_most=tuple(key for key, how in bound if how == "at_most"),
        max_uses=int(uses_text) if uses_text else None,
    )
