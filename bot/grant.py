"""Whether a grant still holds when the agent comes back for it.

An approval may be claimed hours or days after a human approved it, by a process that knows
nothing of that moment. Before the call is handed out (and again when its outcome is
reported), it is judged once more, from the database and today's configuration:

- **Integrity**: the stored call (kind, capability, presentation, tool and arguments) still
  hashes to the approval's hash, and that hash is the one every approving human was shown
  (since the last edit: an edit is a new revision, approved anew).
  A row edited outside signoff fails here, whether or not its hash column was edited too.
- **Policy**: a route still matches the request's tenant and capability, it still allows the
  edits a call approved as edited was made with, a standing grant that approved it has not
  been revoked, and everyone whose approval counted (the decider, or each approving voter of
  a quorum, of the revision that was approved; the giver of a standing grant) may still
  decide it under today's config and the delegations active now (see `authority`).

A break-glass approval was never judged by the route's approvers, so its approver is not
re-judged either; a route must still match.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from bot.audit import chain_problem, row_hash
from bot.errors import NoRoute
from bot.model import Kind
from bot.routing import Directory, Route, covers
from bot.standing import revoked_problem
from store.records import Approval, Event
from store.repository import Tx

# The events that record an approving human (a vote short of the quorum, or the decision).
_APPROVING = ("voted", "approved")
# The event of an approver's edit: a new revision of the call, approved by its editor next.
EDITED = "edited"


@dataclass(frozen=True, slots=True)
class Approver:
    """One human whose approval counted, as the trail records them."""

    principal: str
    break_glass: bool


def approvers_of(events: list[Event]) -> list[Approver]:
    """Whose approval counts: those who approved the request's current revision (an edit
    starts the count again, so approvals of an earlier revision no longer count)."""
    return [
        Approver(_principal(e.actor), bool(e.data.get("break_glass")))
        for e in since_last_edit(events)
        if e.type in _APPROVING
    ]


def since_last_edit(events: list[Event]) -> list[Event]:
    """The events from the last `edited` one on (all of them for a request never edited)."""
    for index in range(len(events) - 1, -1, -1):
        if events[index].type == EDITED:
            return events[index:]
    return events


def integrity_problem(row: Approval, events: list[Event]) -> str | None:
    """Why the stored call is not what was approved, or None if it is."""
    broken = chain_problem(row, events)
    if broken is not None:
        return f"its audit trail is broken ({broken})"
    if row_hash(row) != row.hash:
        return (
            "the stored call (tool, arguments or presentation) no longer hashes to the "
            f"approval's hash {row.hash[:12]}: it was altered after it was requested"
        )
    shown = {
        str(e.data["shown_hash"])
        for e in since_last_edit(events)
        if e.type in _APPROVING and "shown_hash" in e.data
    }
    other = sorted(h for h in shown if h != row.hash)
    if other:
        return (
            f"the approval's hash is {row.hash[:12]} but its approvers were shown "
            f"{', '.join(h[:12] for h in other)}: the row was altered after it was approved"
        )
    return None


async def policy_problem(
    tx: Tx, directory: Directory, row: Approval, events: list[Event], now: datetime
) -> str | None:
    """What in today's configuration no longer allows this grant, or None if it still holds."""
    try:
        route = directory.route_of(row)
    except NoRoute:
        return f"no route matches {row.tenant}/{row.capability} any more"
    locked = edits_refused(route, events)
    if locked is not None:
        return locked
    revoked = await revoked_problem(tx, row, now)
    if revoked is not None:
        return revoked
    entitled = await _authority(tx, directory, route, row, events)
    for approver in approvers_of(events):
        if approver.break_glass:
            continue
        who = approver.principal
        if who not in directory.principals:
            return f"{who}, who approved it, is no longer a configured principal"
        if who in entitled:
            continue
        stands_in = [
            d
            for d in await tx.delegations_to(who, now)
            if d.principal in entitled and covers(d, row.capability)
        ]
        if not stands_in:
            return (
                f"{who}, who approved it, may no longer decide {row.capability} under the "
                "current configuration"
            )
    return None


def edits_refused(route: Route, events: list[Event]) -> str | None:
    """Why today's route no longer allows the edits the approved revision was made with."""
    for event in events:
        if event.type == EDITED:
            refused = route.edit_refusal(event.data.get("keys") or [])
            if refused is not None:
                return f"it was approved as edited, and {refused}"
    return None


async def _authority(
    tx: Tx, directory: Directory, route: Route, row: Approval, events: list[Event], depth: int = 0
) -> frozenset[str]:
    """`authority` for `row`; a follow-up of a lapsed lease inherits the authority its
    original has today (so someone it was handed to keeps deciding its re-run)."""
    inherited = None
    if row.kind == Kind.INTERRUPTED_SIDE_EFFECT and depth < 50:
        before = await tx.approval_followed_by(row.id)
        if before is not None:
            earlier = await tx.events_for(before.id)
            inherited = await _authority(tx, directory, route, before, earlier, depth + 1)
    return authority(directory, route, events, inherited)


def authority(
    directory: Directory,
    route: Route,
    events: list[Event],
    inherited: frozenset[str] | None = None,
) -> frozenset[str]:
    """Who may decide the request today, as its trail and today's config say: the people
    among its approvers at creation whom today's route still names (directly or through a
    group, as configured today; `inherited` instead for a follow-up), the principals today's
    escalation chain still sends it to, and whoever it was handed to by someone entitled in
    this same sense, or by break-glass. An approver no longer in the route loses the
    authority, and so does anyone whose authority came only from them."""
    chain = {step.to for step in route.escalation}
    routed = directory.expand([*route.approvers, *chain])
    entitled: set[str] = set()
    for event in events:
        if event.type == "requested":
            if inherited is not None:
                entitled |= inherited
            else:
                entitled |= directory.expand(event.data.get("approvers") or []) & routed
        elif event.type == "escalated" and event.data.get("to") in chain:
            entitled |= directory.members(str(event.data["to"]))
        elif event.type == "delegated":
            giver = _principal(event.actor)
            if event.data.get("break_glass") or giver in entitled:
                entitled |= directory.members(str(event.data.get("to")))
    return frozenset(entitled)


def _principal(actor: str | None) -> str:
    """The principal of an actor label ("slack:alice" -> "alice")."""
    return (actor or "").partition(":")[2]
