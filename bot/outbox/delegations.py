"""What a delegation's edges cause, run from the outbox when they are due.

At the window's start, every pending request the principal may decide (as its assignee, an
approver or a member of an approver group) gets a card to the delegate, and both people are
told; at the end, or on revocation, both are told again, and a pending request whose card
says the delegate decides in the principal's place (a request made during the window) loses
that line, or names the delegate of another live delegation covering it, in an audited
`delegation_ended` event that re-renders its cards. The jobs are queued with the delegation
(bot.outbox.jobs.enqueue_delegation), so they fire on time from whichever replica is up.
"""

from __future__ import annotations

import logging

from bot import transitions
from bot.delegations import Delegations
from bot.intake import away_note
from bot.model import State
from bot.outbox import jobs
from bot.routing import covers
from store.records import Delegation, OutboxJob

log = logging.getLogger("signoff.delegations")

_PAGE = 200


class DelegationJobs:
    """The `delegation_started` and `delegation_ended` handlers."""

    def __init__(self, delegations: Delegations) -> None:
        self.delegations = delegations
        self.store = delegations.store
        self.directory = delegations.directory
        self.clock = delegations.clock

    async def on_started(self, job: OutboxJob) -> None:
        """At the window's start: cards for the pending requests, then the notices."""
        delegation = await self._get(job)
        now = self.clock.now()
        if delegation is None or not delegation.active_at(now):
            return  # revoked (or over) before it began: the end job says so
        reposted = 0
        after = ""
        while True:
            async with self.store.write() as tx:
                page = await tx.pending_page(after, _PAGE)
                for approval in page:
                    entitled = self.directory.entitled(approval)
                    if delegation.principal in entitled and covers(delegation, approval.capability):
                        await jobs.enqueue_personal_cards(
                            tx, self.directory, approval, delegation.delegate, now
                        )
                        reposted += 1
            if len(page) < _PAGE:
                break
            after = page[-1].id
        text = self.delegations.describe(delegation)
        if reposted:
            text += f"; {reposted} pending request{'s' if reposted > 1 else ''} sent on"
        await self._tell(delegation, f"Delegation started: {text}.", "started")

    async def on_ended(self, job: OutboxJob) -> None:
        delegation = await self._get(job)
        if delegation is None:
            return
        if job.payload.get("reason") == "ended" and delegation.revoked_at is not None:
            return  # the revocation already said it ended
        how = "revoked" if job.payload.get("reason") == "revoked" else "ended"
        await self._unname(delegation, how)
        who, whom = (self.directory.name_of(k) for k in (delegation.delegate, delegation.principal))
        text = f"Delegation {how}: {who} no longer decides for {whom}."
        await self._tell(delegation, text, how)

    async def _unname(self, delegation: Delegation, how: str) -> int:
        """Pending requests assigned to the principal whose card still says this delegate
        decides as delegate: the line goes (or names another live delegation's delegate),
        through a transition, so every card of the request is updated. Returns how many."""
        note = away_note(self.directory, delegation)
        now = self.clock.now()
        changed: list[transitions.Transition] = []
        after = ""
        while True:
            async with self.store.write() as tx:
                page = await tx.pending_page(after, _PAGE)
                others: list[Delegation] | None = None
                for approval in page:
                    if approval.assignee != delegation.principal or approval.assigned_note != note:
                        continue
                    row = await tx.lock_approval(approval.id)
                    if row is None or row.state != State.PENDING or row.assigned_note != note:
                        continue  # decided or reassigned since the page was read
                    if others is None:
                        live = await tx.delegations_from([delegation.principal], now)
                        others = sorted(
                            (d for d in live if d.id != delegation.id),
                            key=lambda d: (d.starts_at, d.id),
                        )
                    instead = next((d for d in others if covers(d, row.capability)), None)
                    values: dict[str, object] = {
                        "state": State.PENDING.value,
                        "assigned_note": away_note(self.directory, instead) if instead else None,
                    }
                    changed.append(
                        await transitions.apply(
                            tx,
                            self.directory,
                            row,
                            values,
                            "delegation_ended",
                            now=now,
                            actor="signoff:delegation",
                            data={
                                "delegation_id": delegation.id,
                                "delegate": delegation.delegate,
                                "how": how,
                                **({"delegated_to": instead.delegate} if instead else {}),
                            },
                        )
                    )
            if len(page) < _PAGE:
                break
            after = page[-1].id
        for result in changed:
            transitions.logged(result)
        return len(changed)

    async def _get(self, job: OutboxJob) -> Delegation | None:
        async with self.store.read() as tx:
            return await tx.get_delegation(str(job.payload["delegation_id"]))

    async def _tell(self, delegation: Delegation, text: str, what: str) -> None:
        now = self.clock.now()
        async with self.store.write() as tx:
            for who in (delegation.principal, delegation.delegate):
                await jobs.enqueue_notice(
                    tx, self.directory, who, text, now, key=f"{delegation.id}:{what}"
                )
