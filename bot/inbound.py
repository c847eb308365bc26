"""What the chat surfaces remember about their traffic, for any replica to read back.

A platform that redelivers (Telegram retries an update until it gets a 200) must not cause a
decision twice: each delivery id is recorded once, across replicas. A click or a reply names
a chat message; the card that message showed, and the hash it showed, come from
`card_messages`. A question signoff asked (a reason for a rejection) is remembered so the
answer can be tied to its card.
"""

from __future__ import annotations

from bot.clock import Clock
from store.records import CardMessage, ReplyPrompt
from store.repository import Store


class Inbound:
    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock

    async def first_delivery(self, source: str, delivery_id: str) -> bool:
        """True the first time `delivery_id` arrives from `source`; False for a redelivery."""
        async with self.store.write() as tx:
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
