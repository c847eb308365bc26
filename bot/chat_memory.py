"""What the chat surfaces remember about their traffic, for any replica to read back.

A platform that redelivers (Telegram retries an update until it gets a 200) must not cause a
decision twice: each delivery id is recorded once, across replicas. A click or a reply names
a chat message; the card that message showed, and the hash it showed, come from
`card_messages`. A question signoff asked (a reason for a rejection) is remembered so the
answer can be tied to its card.

What a chat surface reports about its cards is written here too, never by the channel: a
card message found without its record (adopted), cards that moved with their chat, and
cards the platform refused until the person opened the chat (requeued).
"""

from __future__ import annotations

import logging

from bot import effects
from bot.clock import Clock
from bot.model import State
from store.records import CardMessage, ReplyPrompt
from store.repository import Store

log = logging.getLogger(__name__)

# Dead jobs looked through for cards waiting on someone opening the chat.
DEAD_SCAN = 1000


class ChatMemory:
    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock

    async def first_delivery(self, source: str, delivery_id: str) -> bool:
        """True the first time `delivery_id` arrives from `source`; False for a redelivery."""
        async with self.store.write_alone() as tx:
            return await tx.record_delivery(source, delivery_id, self.clock.now())

    async def card_at(self, channel: str, address: str, message_id: str) -> CardMessage | None:
        async with self.store.read() as tx:
            return await tx.card_message_at(channel, address, message_id)

    async def ask(
        self,
        channel: str,
        address: str,
        message_id: str,
        card: CardMessage,
        asked: str,
        action: str,
    ) -> None:
        """Remember that message `message_id` asked `asked` for input to `action` on `card`."""
        async with self.store.write() as tx:
            await tx.insert_prompt(
                {
                    "channel": channel,
                    "address": address,
                    "message_id": message_id,
                    "card_message_id": card.id,
                    "asked": asked,
                    "action": action,
                    "created_at": self.clock.now(),
                }
            )

    async def prompt_at(
        self, channel: str, address: str, message_id: str
    ) -> tuple[ReplyPrompt, CardMessage] | None:
        """The question a message asked and the card it is about; None if it asked nothing."""
        async with self.store.read() as tx:
            prompt = await tx.prompt_at(channel, address, message_id)
            card = await tx.card_message(prompt.card_message_id) if prompt else None
        return (prompt, card) if prompt and card else None

    async def adopt_card(
        self, channel: str, address: str, message_id: str, approval_id: str, short_hash: str
    ) -> CardMessage | None:
        """Record a card message the channel found without its record (posted just before a
        crash, before the record was written) as `approval_id`'s, if that approval's hash
        starts with `short_hash` (what the card showed); an approval decided meanwhile gets
        the card updated to its outcome. None if no such approval: the channel refuses."""
        now = self.clock.now()
        async with self.store.write() as tx:
            approval = await tx.lock_approval(approval_id)
            if approval is None or not approval.hash.startswith(short_hash):
                return None
            card = await tx.insert_card_message(
                {
                    "approval_id": approval.id,
                    "channel": channel,
                    "address": address,
                    "message_id": message_id,
                    "shown_hash": approval.hash,
                    "rendered_state": State.PENDING,  # it has buttons
                    "created_at": now,
                    "updated_at": now,
                }
            )
            if approval.state != State.PENDING:
                await effects.cause(tx, effects.CardUpdate(approval, card.id), now=now)
        return card

    async def move_cards(self, channel: str, old: str, new: str) -> int:
        """The chat at `old` is now `new` (a Telegram group upgraded to a supergroup): its
        card records follow, so presses there find them; how many moved."""
        async with self.store.write() as tx:
            return await tx.move_card_messages(channel, old, new)

    async def requeue_refused_cards(self, target: str, refused_because: str) -> int:
        """Queue again the dead card posts to `target` whose last error contains
        `refused_because` (the platform's words for "the bot may not write first"), for
        requests still pending: the person has now opened the chat. How many."""
        requeued = 0
        async with self.store.write() as tx:
            for job in await tx.list_jobs(states=["dead"], limit=DEAD_SCAN):
                if (
                    job.kind == "post_card"
                    and job.payload.get("target") == target
                    and refused_because in (job.last_error or "").casefold()
                    and job.approval_id is not None
                ):
                    approval = await tx.get_approval(job.approval_id)
                    if approval is not None and approval.state == State.PENDING:
                        await tx.requeue_job(job.id, now=self.clock.now())
                        requeued += 1
                        log.info(
                            "card for %s requeued: they opened the chat",
                            target,
                            extra={"approval_id": job.approval_id, "job_id": job.id},
                        )
        return requeued
