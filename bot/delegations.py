"""Delegation as data: "alice is away; bob decides for her until the 24th".

A delegation is a row (principal, delegate, scope glob, window); nothing about it lives in
memory. Eligibility reads the active ones inside each decision's transaction, on the
Operator's clock (bot.routing.check_eligible), so a delegate can answer days later from any
replica, and loses the authority the moment the window closes.

What a delegation causes at its edges runs from the outbox, as jobs due at the window's start
and end (bot.outbox.delegations), so they fire on time from whichever replica is up, and a
crash delays them, never loses them.

A delegation is one hop: bob's own delegate does not inherit alice's requests through it. A
delegation that would close a circle (alice -> bob -> alice, or longer) is refused.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime

from bot import effects
from bot.clock import Clock
from bot.durations import parse_moment
from bot.errors import DelegationLoop, InvalidRequest, NotFound, NotPending
from bot.routing import Directory
from store.records import Delegation
from store.repository import Store

log = logging.getLogger("signoff.delegations")


class Delegations:
    def __init__(self, store: Store, directory: Directory, clock: Clock) -> None:
        self.store = store
        self.directory = directory
        self.clock = clock

    async def create(
        self,
        principal: str,
        to: str,
        *,
        created_by: str,
        starts_at: datetime | None = None,
        ends_at: datetime | None = None,
        scope: str = "*",
        note: str | None = None,
    ) -> Delegation:
        """Record that `to` decides for `principal` from `starts_at` (default now) until
        `ends_at` (default: until revoked), for capabilities matching `scope`."""
        self.directory.principal(principal)
        self.directory.principal(to)
        if principal == to:
            raise InvalidRequest(f"{principal} cannot delegate to themselves")
        scope = scope.strip()
        if not scope or len(scope) > 256:
            raise InvalidRequest("scope must be a capability glob of 1-256 characters")
        now = self.clock.now()
        starts = starts_at or now
        if ends_at is not None and ends_at <= max(starts, now):
            raise InvalidRequest(
                f"the delegation would end ({ends_at:%Y-%m-%d %H:%M} UTC) before it starts or "
                "is already over"
            )
        async with self.store.write() as tx:
            await tx.lock_delegations()  # two replicas must not each close half a circle
            circle = _path(await tx.list_delegations(live_at=now), start=to, goal=principal)
            if circle:
                chain = " -> ".join([principal, *circle])
                raise DelegationLoop(
                    f"delegating {principal} to {to} would make a circle ({chain}); revoke one "
                    "of those delegations first (`signoff delegations list`)"
                )
            delegation = await tx.insert_delegation(
                {
                    "id": str(uuid.uuid4()),
                    "principal": principal,
                    "delegate": to,
                    "scope": scope,
                    "starts_at": starts,
                    "ends_at": ends_at,
                    "note": note,
                    "created_by": created_by,
                    "created_at": now,
                }
            )
            await effects.cause(tx, effects.DelegationEdges(delegation), now=now)
        log.info(
            "delegation %s: %s -> %s (%s) from %s until %s, by %s",
            delegation.id,
            principal,
            to,
            scope,
            starts,
            ends_at or "revoked",
            created_by,
        )
        return delegation

    async def revoke(self, delegation_id: str, *, by: str) -> Delegation:
        now = self.clock.now()
        async with self.store.write() as tx:
            current = await tx.get_delegation(delegation_id)
            if current is not None and current.revoked_at is None and current.ended_by(now):
                raise NotPending(f"delegation {delegation_id} already ended", state="ended")
            revoked = await tx.revoke_delegation(delegation_id, now=now, by=by)
            if revoked is None:
                existing = await tx.get_delegation(delegation_id)
                if existing is None:
                    raise NotFound(f"no delegation with id {delegation_id!r}")
                raise NotPending(f"delegation {delegation_id} was already revoked", state="revoked")
            await effects.cause(tx, effects.DelegationRevoked(delegation_id), now=now)
        log.info("delegation %s revoked by %s", delegation_id, by)
        return revoked

    async def list(self, *, include_past: bool = False) -> list[Delegation]:
        async with self.store.read() as tx:
            return await tx.list_delegations(live_at=None if include_past else self.clock.now())

    async def involving(self, principal: str) -> list[Delegation]:
        """The live delegations `principal` made or received (what chat shows them)."""
        return [d for d in await self.list() if principal in (d.principal, d.delegate)]

    async def revoke_own(self, delegation_id: str, principal: str, *, by: str) -> Delegation:
        """Revoke a live delegation `principal` made; NotFound for any other id, so chat
        users can end their own delegations and learn nothing about anyone else's."""
        async with self.store.read() as tx:
            found = await tx.get_delegation(delegation_id)
        if found is None or found.principal != principal or found.ended_by(self.clock.now()):
            raise NotFound(f"you have no delegation {delegation_id} to revoke")
        return await self.revoke(delegation_id, by=by)

    def describe(self, delegation: Delegation) -> str:
        """One line a human reads: "Bob Stone decides for Alice Ng (payments.*) until ..."."""
        scope = "" if delegation.scope == "*" else f" ({delegation.scope})"
        if delegation.starts_at > self.clock.now():
            scope += f" from {delegation.starts_at:%Y-%m-%d %H:%M} UTC"
        until = (
            f"until {delegation.ends_at:%Y-%m-%d %H:%M} UTC"
            if delegation.ends_at
            else "until revoked"
        )
        who, whom = (
            self.directory.name_of(delegation.delegate),
            self.directory.name_of(delegation.principal),
        )
        return f"{who} decides for {whom}{scope} {until}"


# -- the chat command: "delegate bob until 2026-12-24 payments.*" --------------------------------

USAGE = (
    "delegate NAME [from WHEN] [until WHEN] [SCOPE], e.g. `delegate bob until 2026-12-24 "
    "payments.*` (WHEN: a date, a date and time in UTC, or a duration such as 5d)"
)


@dataclass(frozen=True, slots=True)
class DelegateCommand:
    to: str  # as typed: the surface resolves a mention to a principal
    starts_at: datetime | None
    ends_at: datetime | None
    scope: str


def parse_delegate(words: list[str], now: datetime) -> DelegateCommand:
    """The words after `delegate`: NAME, then `from WHEN`, `until WHEN` and a SCOPE glob in
    any order. InvalidRequest with the usage for anything else."""
    if not words:
        raise InvalidRequest(f"whom to? {USAGE}")
    to, rest = words[0], list(words[1:])
    moments: dict[str, datetime] = {}
    scope: str | None = None
    while rest:
        word = rest.pop(0)
        if word.casefold() in ("from", "until") and rest:
            try:
                moments[word.casefold()] = parse_moment(rest.pop(0), now)
            except ValueError as exc:
                raise InvalidRequest(f"{exc}; {USAGE}") from None
        elif scope is None and word.casefold() not in ("from", "until"):
            scope = word
        else:
            raise InvalidRequest(f"did not understand {word!r}; {USAGE}")
    return DelegateCommand(to, moments.get("from"), moments.get("until"), scope or "*")


def _path(live: list[Delegation], *, start: str, goal: str) -> list[str]:
    """A chain of live delegations leading from `start` to `goal` ([start, ..., goal]), or
    [] if there is none."""
    edges: dict[str, set[str]] = {}
    for delegation in live:
        edges.setdefault(delegation.principal, set()).add(delegation.delegate)
    came_from: dict[str, str | None] = {start: None}
    frontier = [start]
    while frontier:
        node = frontier.pop()
        if node == goal:
            path = [node]
            while (previous := came_from[path[-1]]) is not None:
                path.append(previous)
            return path[::-1]
        for follow in sorted(edges.get(node, ())):
            if follow not in came_from:
                came_from[follow] = node
                frontier.append(follow)
    return []
