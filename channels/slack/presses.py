"""Who pressed a button or submitted a modal, and telling them: what every Slack handler
starts with, the channel's own (Approve, Reject, Delegate…) and its parts' (Edit…, Answer…,
Allow the same…, Revoke), so the parts take a `Presses` and never the channel."""

from __future__ import annotations

import logging

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.operator import Actor
from bot.routing import Directory
from channels import conversation
from channels.conversation import Conversation
from channels.slack import card as slack_card
from channels.slack import home as slack_home

log = logging.getLogger("signoff.slack")


class Presses:
    """The channel's conversation, directory, Web API client and App Home, and what a handler
    does with them before and after deciding."""

    def __init__(
        self,
        chat: Conversation,
        directory: Directory,
        client: AsyncWebClient,
        home: slack_home.SlackHome,
    ) -> None:
        self.chat = chat
        self.directory = directory
        self.client = client
        self.home = home

    async def actor_for(
        self, user_id: str, value: str, action: str, tell: conversation.Tell
    ) -> tuple[Actor, tuple[str, str]] | None:
        """The verified principal behind a click and what its button carried (`action`, as
        the audit trail names a refusal). A click from a Slack user who is no principal is
        refused (and audited) here."""
        parsed = slack_card.parse_button_value(value)
        if parsed is None:
            await tell("This button was not made by signoff.")
            return None
        principal = self.directory.principal_for("slack", user_id)
        actor = await self.chat.identify(principal, user_id, parsed[0], action)
        if actor is None:
            await tell(self.chat.unlinked(user_id))
            return None
        return actor, parsed

    def teller(self, channel: str | None, user_id: str) -> conversation.Tell:
        """Tell one user something only they see, in the channel they clicked in."""

        async def tell(text: str, *, firmly: bool = False) -> None:
            if channel == slack_home.HOME:  # a press on the Home tab: said at its top
                await self.home.tell(user_id, text)
                return
            if channel is None:
                log.info("message for %s not shown (no channel): %s", user_id, text)
                return
            try:
                await self.client.chat_postEphemeral(
                    channel=channel, user=user_id, text=slack_card.escape(text)
                )
            except SlackApiError as exc:
                error = exc.response.get("error")
                log.warning("could not tell %s in %s: %s", user_id, channel, error)

        return tell
