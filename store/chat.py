"""The chat surfaces' statements: `card_messages` (each posted card and the hash it
showed), `reply_prompts` (the questions asked under a card) and `inbound_deliveries` (each
inbound update handled once).

A family of `Tx` (store/repository.py).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, delete, select, update
from sqlalchemy.engine import Dialect

from store.fast_path import DriverStatement
from store.fast_path import run as driver_run
from store.records import Approval, CardMessage, ReplyPrompt
from store.schema import approvals, card_messages, inbound_deliveries, reply_prompts
from store.statements import Statements, insert_for
from store.votes import with_votes

_CARD_COLUMNS = [c.name for c in card_messages.c]

_CARD_MESSAGE_AT = select(card_messages).where(
    card_messages.c.channel == bindparam("channel"),
    card_messages.c.address == bindparam("address"),
    card_messages.c.message_id == bindparam("message_id"),
)
_CARD_MESSAGES_FOR = (
    select(card_messages)
    .where(card_messages.c.approval_id == bindparam("approval_id"))
    .order_by(card_messages.c.id)
)
_CARD_MESSAGE = select(card_messages).where(card_messages.c.id == bindparam("id"))
# A card and the request it shows, in one statement (a card update's read). The card's
# columns are labelled: both tables have an id and timestamps.
_CARD_WITH_APPROVAL = (
    select(*(c.label(f"card_{c.name}") for c in card_messages.c), approvals)
    .join_from(card_messages, approvals, approvals.c.id == card_messages.c.approval_id)
    .where(card_messages.c.id == bindparam("id"))
)
_MARK_CARD_RENDERED = (
    update(card_messages)
    .where(card_messages.c.id == bindparam("w_id"))
    .values(
        rendered_state=bindparam("v_state", type_=card_messages.c.rendered_state.type),
        shown_hash=bindparam("v_hash", type_=card_messages.c.shown_hash.type),
        updated_at=bindparam("v_at", type_=card_messages.c.updated_at.type),
    )
)


@functools.cache
def _insert_card_message(dialect: str) -> Any:
    return (
        insert_for(dialect, card_messages)
        .on_conflict_do_nothing(index_elements=["channel", "address", "message_id"])
        .returning(card_messages)
    )


@functools.cache
def _record_delivery(dialect: str) -> Any:
    return (
        insert_for(dialect, inbound_deliveries)
        .on_conflict_do_nothing(index_elements=["source", "delivery_id"])
        .returning(inbound_deliveries.c.delivery_id)
    )


@functools.cache
def _driver_record_delivery(dialect: Dialect) -> DriverStatement:
    # Every signed Slack request and Telegram update writes one: the replay guard.
    keys = ("source", "delivery_id", "received_at")
    returns = [inbound_deliveries.c.delivery_id]
    return DriverStatement(_record_delivery(dialect.name), dialect, keys=keys, returns=returns)


class ChatStatements(Statements):
    """Card messages, reply prompts and inbound deliveries."""

    async def card_messages_for(self, approval_id: str) -> list[CardMessage]:
        """Every chat message that shows this approval (each needs updating on a transition)."""
        rows = await self._rows(_CARD_MESSAGES_FOR, {"approval_id": approval_id})
        return [CardMessage.from_row(r) for r in rows]

    async def insert_card_message(self, values: Mapping[str, Any]) -> CardMessage:
        """Record a posted card; posting the same message twice records it once."""
        rows = await self._insert_rows(_insert_card_message(self._dialect), values)
        if rows:
            return CardMessage.from_row(rows[0])
        existing = await self.card_message_at(
            values["channel"], values["address"], values["message_id"]
        )
        assert existing is not None  # the conflict that skipped our insert is this row
        return existing

    async def card_message(self, card_message_id: int) -> CardMessage | None:
        rows = await self._rows(_CARD_MESSAGE, {"id": card_message_id})
        return CardMessage.from_row(rows[0]) if rows else None

    async def card_with_approval(self, card_message_id: int) -> tuple[CardMessage, Approval] | None:
        """A posted card and the approval it shows, as they are now; None if either is
        gone."""
        rows = await self._rows(_CARD_WITH_APPROVAL, {"id": card_message_id})
        if not rows:
            return None
        row = rows[0]
        card = CardMessage.from_row({name: row[f"card_{name}"] for name in _CARD_COLUMNS})
        approval = await with_votes(self, Approval.from_row(row))
        assert approval is not None
        return card, approval

    async def card_message_at(
        self, channel: str, address: str, message_id: str
    ) -> CardMessage | None:
        """The card shown by one chat message (a click or reply names the message)."""
        where = {"channel": channel, "address": address, "message_id": message_id}
        rows = await self._rows(_CARD_MESSAGE_AT, where)
        return CardMessage.from_row(rows[0]) if rows else None

    async def mark_card_rendered(
        self, card_message_id: int, *, state: str, shown_hash: str, now: datetime
    ) -> None:
        """The card now shows `state` and `shown_hash` (a new hash after an edit that left
        the request pending: a click on the card then decides what it shows)."""
        params = {"w_id": card_message_id, "v_state": state, "v_hash": shown_hash, "v_at": now}
        await self._rows(_MARK_CARD_RENDERED, params)

    async def move_card_messages(self, channel: str, old_address: str, new_address: str) -> int:
        """Say that every card (and question) in `old_address` is now in `new_address`: a
        Telegram group upgraded to a supergroup keeps its messages and their ids under a new
        chat id. Returns how many cards moved."""
        moved = await self.conn.execute(
            update(card_messages)
            .where(card_messages.c.channel == channel, card_messages.c.address == old_address)
            .values(address=new_address)
            .returning(card_messages.c.id)
        )
        await self.conn.execute(
            update(reply_prompts)
            .where(reply_prompts.c.channel == channel, reply_prompts.c.address == old_address)
            .values(address=new_address)
        )
        return len(moved.all())

    async def insert_prompt(self, values: Mapping[str, Any]) -> None:
        await self.conn.execute(reply_prompts.insert().values(**values))

    async def prompt_at(self, channel: str, address: str, message_id: str) -> ReplyPrompt | None:
        """The question a chat message asked, if it is one of ours."""
        row = await self._one(
            select(reply_prompts).where(
                reply_prompts.c.channel == channel,
                reply_prompts.c.address == address,
                reply_prompts.c.message_id == message_id,
            ),
            {},
        )
        return ReplyPrompt.from_row(row) if row else None

    async def record_delivery(self, source: str, delivery_id: str, now: datetime) -> bool:
        """Remember an inbound delivery (a Telegram update id); False if it was seen before,
        by this replica or another."""
        values = {"source": source, "delivery_id": delivery_id, "received_at": now}
        driver = await self._driver()
        if driver is None:
            return await self._one(_record_delivery(self._dialect), values) is not None
        statement = _driver_record_delivery(self.conn.dialect)
        return bool(await driver_run(driver, self._dialect, statement, values))

    async def prune_deliveries(self, received_before: datetime) -> int:
        """Forget deliveries old enough that the platform no longer redelivers them, and the
        prompts asked as long ago."""
        await self.conn.execute(
            delete(reply_prompts).where(reply_prompts.c.created_at < received_before)
        )
        result = await self.conn.execute(
            delete(inbound_deliveries).where(inbound_deliveries.c.received_at < received_before)
        )
        return int(result.rowcount or 0)
