"""The outbox handlers that put cards in front of people: `post_card` and `update_card`, and
plain `notice` messages.

They are channel-agnostic: each job names a target ("slack:C0FINANCE", "slack:@alice"), the
channel registered under the target's prefix renders and sends it, and the message is
recorded in `card_messages` with the hash it showed, so a click or reply on it later can be
tied to exactly what that human saw. Every transition queues an `update_card` per recorded
message (bot.effects), so cards follow the row.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from bot.clock import Clock
from bot.model import Card, State
from bot.routing import Directory
from store.records import Approval, OutboxJob
from store.repository import Store

if TYPE_CHECKING:  # bot/ never imports a channel at run time; app.py hands them in
    from channels.base import Channel

log = logging.getLogger("signoff.cards")


async def card_for(
    store: Store,
    directory: Directory,
    approval: Approval,
    now: datetime,
    *,
    max_value: int | None = 200,
) -> Card:
    """The Card for `approval` as every surface shows it, with the approvals a quorum has
    gathered so far read from the votes."""
    votes: tuple[str, ...] = ()
    if approval.required_approvals > 1:
        async with store.read() as tx:
            votes = tuple(
                v.principal for v in await tx.votes_for(approval.id) if v.decision == "approve"
            )
    return Card.from_approval(approval, now, directory.describe, max_value, votes=votes)


class CardJobs:
    def __init__(
        self,
        store: Store,
        directory: Directory,
        clock: Clock,
        channels: Mapping[str, Channel],
    ) -> None:
        self.store = store
        self.directory = directory
        self.clock = clock
        self.channels = dict(channels)

    async def card(self, approval: Approval) -> Card:
        return await card_for(self.store, self.directory, approval, self.clock.now())

    async def post(self, job: OutboxJob) -> None:
        target = str(job.payload["target"])
        channel = self.channels.get(target.partition(":")[0])
        if channel is None:
            log.warning(
                "no %s channel is configured; card for approval %s not posted to %s",
                target.partition(":")[0],
                job.approval_id,
                target,
                extra={"approval_id": job.approval_id},
            )
            return
        assert job.approval_id is not None
        async with self.store.read() as tx:
            approval = await tx.get_approval(job.approval_id)
        if approval is None or approval.state != State.PENDING:
            return  # decided before its card could go out: nothing left to ask
        ref = await channel.post_card(await self.card(approval), target)
        now = self.clock.now()
        async with self.store.write() as tx:
            # Lock the row before recording the message: a transition committing meanwhile
            # either came first (its version is newer than the one rendered) or waits and then
            # sees this message and queues its update. (Inserting first would take a key-share
            # lock on the row through the foreign key, and two cards of one approval posted at
            # once would deadlock upgrading it.)
            current = await tx.lock_approval(approval.id)
            message = await tx.insert_card_message(
                {
                    "approval_id": approval.id,
                    "channel": ref.channel,
                    "address": ref.address,
                    "message_id": ref.message_id,
                    "shown_hash": approval.hash,
                    "rendered_state": approval.state,
                    "created_at": now,
                    "updated_at": now,
                }
            )
            if current is not None and current.version != approval.version:
                # It moved while the card was on its way: that transition did not know
                # this message, so bring the card up to date now.
                await tx.enqueue(
                    "update_card",
                    {"card_message_id": message.id, "state": current.state},
                    now=now,
                    approval_id=approval.id,
                    dedupe_key=f"update_card:{message.id}:{current.version}",
                )

    async def notice(self, job: OutboxJob) -> None:
        """A plain message to one person ("slack:@alice"): a delegation starting or ending."""
        target = str(job.payload["target"])
        channel = self.channels.get(target.partition(":")[0])
        if channel is None:
            log.info(
                "no %s channel is configured; notice to %s not sent",
                target.partition(":")[0],
                target,
            )
            return
        await channel.send_notice(target, str(job.payload["text"]))

    async def update(self, job: OutboxJob) -> None:
        async with self.store.read() as tx:
            message = await tx.card_message(int(job.payload["card_message_id"]))
            approval = await tx.get_approval(message.approval_id) if message else None
        if message is None or approval is None:
            return
        channel = self.channels.get(message.channel)
        if channel is None:
            log.warning(
                "no %s channel is configured; card %d not updated", message.channel, message.id
            )
            return
        # The stored row has what a MessageRef holds: channel, address, message_id.
        await channel.update_card(message, await self.card(approval))
        async with self.store.write() as tx:
            await tx.mark_card_rendered(message.id, state=approval.state, now=self.clock.now())
