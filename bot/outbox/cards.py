"""The outbox handlers that put cards in front of people: `post_card` and `update_card`, and
plain `notice` messages.

They are channel-agnostic: each job names a target ("slack:C0FINANCE", "slack:@alice"), the
channel registered under the target's surface renders and sends it, and the message is
recorded in `card_messages` with the hash it showed, so a click or reply on it later can be
tied to exactly what that human saw. That record is written in the transaction that settles
the job (bot.outbox.runner.Record), not in one of its own. Every transition queues an
`update_card` per recorded message (bot.outbox.jobs), so cards follow the row.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from bot.card import Card, card_for
from bot.clock import Clock
from bot.model import State
from bot.outbox import jobs
from bot.outbox.runner import SKIPPED, Record
from bot.routing import Directory
from bot.target import Target
from store.records import Approval, OutboxJob
from store.repository import Store, Tx

if TYPE_CHECKING:  # bot/ never imports a channel at run time; app.py hands them in
    from channels.base import Channel

log = logging.getLogger("signoff.cards")


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

    def _card(self, approval: Approval) -> Card:
        return card_for(self.directory, approval, self.clock.now())

    async def post(self, job: OutboxJob) -> str | Record | None:
        target = Target.parse(str(job.payload["target"]))
        channel = self._channel(target.surface, f"card to {target}", job.approval_id)
        if channel is None:
            return SKIPPED
        assert job.approval_id is not None
        # Handed over at birth, the job carries its approval as its transaction left it; a
        # transition after the commit is caught by `record` below, as one during the post is
        # (the card goes out, then is brought up to date).
        approval = job.subject
        if approval is None:
            async with self.store.read() as tx:
                approval = await tx.get_approval(job.approval_id)
        if approval is None or (approval.state != State.PENDING and approval.grant_id is None):
            return None  # decided before its card could go out: nothing left to ask
        # A request a standing grant approved at create still posts its card
        # (`notify_grant_uses`): it tells the approvers what was approved in their name.
        ref = await channel.post_card(self._card(approval), target)
        now = self.clock.now()

        async def record(tx: Tx, locked: int | None) -> None:
            # Lock the row before recording the message (unless the batch's settle did): a
            # transition committing meanwhile either came first (its version is newer than
            # the one rendered) or waits and then sees this message and queues its update.
            # (Inserting first would take a key-share lock on the row through the foreign
            # key, and two cards of one approval posted at once would deadlock upgrading it.)
            version = locked if locked is not None else await tx.lock_version(approval.id)
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
            if version is not None and version != approval.version:
                # It moved while the card was on its way: that transition did not know
                # this message, so bring the card up to date now.
                current = await tx.get_approval(approval.id)
                assert current is not None  # its row is locked: it cannot have gone since
                await jobs.enqueue_card_update(tx, current, message.id, now)

        # Written with the job's settle. Within a batch, an approval's row is locked before
        # its card rows (see `update`), in approval order, as on every replica.
        return Record(record, (approval.id, 0), locks=approval.id)

    async def notice(self, job: OutboxJob) -> str | None:
        """A plain message to one person ("slack:@alice"): a delegation starting or ending."""
        target = Target.parse(str(job.payload["target"]))
        channel = self._channel(target.surface, f"notice to {target}", None)
        if channel is None:
            return SKIPPED
        await channel.send_notice(target, str(job.payload["text"]))
        return None

    async def update(self, job: OutboxJob) -> str | Record | None:
        async with self.store.read() as tx:
            found = await tx.card_with_approval(int(job.payload["card_message_id"]))
        if found is None:
            return None
        message, approval = found
        if await self._superseded(job, approval):
            return None
        channel = self._channel(message.channel, f"update of card {message.id}", approval.id)
        if channel is None:
            return SKIPPED
        # The stored row has what a MessageRef holds: channel, address, message_id.
        await channel.update_card(message, self._card(approval))
        now = self.clock.now()

        async def record(tx: Tx, _locked: int | None) -> None:
            await tx.mark_card_rendered(
                message.id, state=approval.state, shown_hash=approval.hash, now=now
            )

        return Record(record, (approval.id, 1))

    async def _superseded(self, job: OutboxJob, approval: Approval) -> bool:
        """Whether a later transition's update of the same card has run or will run: that
        one renders the request as it is when it runs, so this edit would add nothing (a
        request approved, claimed and completed in a moment is one edit, not three). The
        newest update of a card defers to none, so the card always ends on the last state
        (unless that job dies, as it could alone)."""
        version = int(job.payload.get("version", approval.version))
        if version >= approval.version:
            return False  # nothing newer happened: the common case, no query
        async with self.store.read() as tx:
            others = await tx.jobs_of(approval.id, jobs.JobKind.UPDATE_CARD, ("queued", "done"))
        card = job.payload["card_message_id"]
        return any(
            other.payload.get("card_message_id") == card
            and int(other.payload.get("version", 0)) > version
            for other in others
        )

    def _channel(self, surface: str, what: str, approval_id: str | None) -> Channel | None:
        """The channel that delivers on `surface`; None (and a line for the operator, since
        the route or a principal names a surface this deployment does not run) if there is
        none: the job is settled as skipped, which the metrics count apart from done."""
        channel = self.channels.get(surface)
        if channel is None:
            log.warning(
                "no %s channel is configured; %s not sent",
                surface,
                what,
                extra={"approval_id": approval_id},
            )
        return channel
