"""The outbox handler of `reminder` jobs (queued by the sweeper's reminder clock,
bot.reminders): plain text under one posted card (a Slack thread reply, a Telegram reply) or
to one assignee's direct messages, naming the deadline. Never a card: the request's cards
stay the only place to decide. A request decided before its reminder goes out gets none.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from bot import reminders
from bot.clock import Clock
from bot.model import State
from bot.outbox.runner import SKIPPED
from bot.routing import Directory
from bot.target import Target
from store.records import Approval, CardMessage, OutboxJob
from store.repository import Store

if TYPE_CHECKING:  # bot/ never imports a channel at run time; app.py hands them in
    from channels.base import Channel

log = logging.getLogger("signoff.reminders")


class ReminderJobs:
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

    async def remind(self, job: OutboxJob) -> str | None:
        assert job.approval_id is not None
        message: CardMessage | None = None
        approval: Approval | None
        async with self.store.read() as tx:
            if "card_message_id" in job.payload:
                found = await tx.card_with_approval(int(job.payload["card_message_id"]))
                if found is None:
                    return None  # the card is gone: nothing to reply under
                message, approval = found
            else:
                approval = await tx.get_approval(job.approval_id)
        if approval is None or approval.state != State.PENDING:
            return None  # decided (or expired) before the reminder went out
        now = self.clock.now()
        if message is not None:
            channel = self._channel(message.channel, job.approval_id)
            if channel is None:
                return SKIPPED
            # The stored row has what a MessageRef holds: channel, address, message_id.
            await channel.send_reply(message, reminders.thread_text(self.directory, approval, now))
            return None
        target = Target.parse(str(job.payload["target"]))
        channel = self._channel(target.surface, job.approval_id)
        if channel is None:
            return SKIPPED
        await channel.send_notice(target, reminders.direct_text(approval, now))
        return None

    def _channel(self, surface: str, approval_id: str) -> Channel | None:
        channel = self.channels.get(surface)
        if channel is None:
            log.warning(
                "no %s channel is configured; reminder not sent",
                surface,
                extra={"approval_id": approval_id},
            )
        return channel
