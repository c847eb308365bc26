"""What a delegation's edges cause, run from the outbox when they are due.

At the window's start, every pending request the principal may decide (as its assignee, an
approver or a member of an approver group) gets a card to the delegate, and both people are
told; at the end, or on revocation, both are told again. The jobs are queued with the
delegation (bot.outbox.jobs.enqueue_delegation), so they fire on time from whichever replica
is up.
"""

from __future__ import annotations

from bot.delegations import Delegations
from bot.outbox import jobs
from bot.routing import covers
from store.records import Delegation, OutboxJob

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
        who, whom = (self.directory.name_of(k) for k in (delegation.delegate, delegation.principal))
        text = f"Delegation {how}: {who} no longer decides for {whom}."
        await self._tell(delegation, text, how)

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
