"""The approval page's "Approve, and allow the same for …": what the form offers (lifetimes
within the route's `max_grant_lifetime`, the arguments it may bind: equal to their value here,
or a number at most it) and the GrantScope a posted form asks for. bot/standing.py judges it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from bot.durations import format_duration, parse_duration
from bot.errors import InvalidRequest, SignoffError
from bot.routing import Directory
from bot.standing import GrantScope
from store.records import Approval

_LIFETIMES = (timedelta(hours=1), timedelta(hours=8))
MAX_USES = 1000


def offer(directory: Directory, row: Approval) -> dict[str, Any] | None:
    """What the form shows for `row`, or None where its route gives no grants (or this
    approval would be a vote short of its quorum, which gives none)."""
    try:
        route = directory.route_of(row)
    except SignoffError:
        return None
    approving = sum(1 for v in row.votes if v.decision == "approve")
    if not route.grants or row.required_approvals - approving != 1:
        return None
    longest = route.max_grant_lifetime
    lifetimes = sorted({t for t in _LIFETIMES if t < longest} | {longest})
    arguments = []
    for key, value in (row.tool_args or {}).items():
        number = isinstance(value, int | float) and not isinstance(value, bool)
        arguments.append({"key": key, "value": value, "number": number})
    return {
        "lifetimes": [(_text(t), format_duration(t)) for t in lifetimes],
        "arguments": arguments,
    }


def _text(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    return f"{seconds // 60}m" if seconds % 3600 else f"{seconds // 3600}h"


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
