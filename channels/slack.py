"""Slack: approval cards with buttons, decisions from clicks, cards updated in place.

A slack-bolt `AsyncApp` runs inside signoff's own aiohttp server: `POST /slack/events` is
turned into a Bolt request and dispatched (Bolt verifies the signature and the timestamp;
anything else gets 401 and nothing happens). Clicks are acknowledged at once, then the
clicking Slack user is mapped to a configured principal and the Operator decides; every
refusal is answered with an ephemeral message saying exactly why, and recorded in the
approval's audit trail. Cards are posted and updated from the outbox (bot.cards), so Slack
being down delays a card, never loses it.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from typing import Any

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.config import SlackConfig
from bot.errors import (
    ApprovalChanged,
    ApprovalExpired,
    ConfigError,
    DeliveryFailed,
    NotAnApprover,
    NotPending,
    SignoffError,
)
from bot.model import Card
from bot.operator import Actor, Operator
from bot.outbox import RetryLater
from bot.routing import Directory
from channels import slack_card
from channels.base import MessageRef

log = logging.getLogger("signoff.slack")


def credentials(config: SlackConfig, environ: Mapping[str, str] = os.environ) -> tuple[str, str]:
    """The bot token and signing secret from the environment; ConfigError naming whichever
    variable is unset (checked before anything else at startup)."""
    token = environ.get(config.bot_token_env) or ""
    secret = environ.get(config.signing_secret_env) or ""
    missing = [
        var
        for var, value in ((config.bot_token_env, token), (config.signing_secret_env, secret))
        if not value
    ]
    if missing:
        raise ConfigError(
            f"[slack] is configured but ${', $'.join(missing)} not set; set the bot token "
            "and signing secret, or remove [slack]"
        )
    return token, secret


class SlackChannel:
    name = "slack"

    def __init__(
        self,
        config: SlackConfig,
        directory: Directory,
        operator: Operator,
        environ: Mapping[str, str] = os.environ,
    ) -> None:
        token, secret = credentials(config, environ)
        self.directory = directory
        self.operator = operator
        self.client = AsyncWebClient(token=token, base_url=config.api_base_url)
        # Bolt checks the token once (auth.test, cached) and every request's signature.
        self.app = AsyncApp(signing_secret=secret, client=self.client)
        self.app.action(slack_card.APPROVE)(self._on_approve)
        self.app.action(slack_card.REJECT)(self._on_reject)
        self.app.view(slack_card.REJECT_MODAL)(self._on_reject_submitted)

    # -- inbound -------------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.Response:
        """`POST /slack/events`: everything Slack sends, through Bolt."""
        try:
            bolt_request = await to_bolt_request(request)
        except UnicodeDecodeError:
            return web.json_response({"error": "body is not UTF-8"}, status=400)
        return await to_aiohttp_response(await self.app.async_dispatch(bolt_request))

    async def _on_approve(self, ack: Any, body: dict[str, Any]) -> None:
        await ack()
        action = body["actions"][0]
        await self._decide(
            "approve", body["user"]["id"], action.get("value", ""), _channel_of(body), None
        )

    async def _on_reject(self, ack: Any, body: dict[str, Any]) -> None:
        await ack()
        value = body["actions"][0].get("value", "")
        parsed = slack_card.parse_button_value(value)
        channel = _channel_of(body)
        if parsed is None:
            await self._tell(channel, body["user"]["id"], "This button was not made by signoff.")
            return
        view = slack_card.reject_modal(parsed[0], parsed[1], channel or "")
        await self.client.views_open(trigger_id=body["trigger_id"], view=view)

    async def _on_reject_submitted(
        self, ack: Any, body: dict[str, Any], view: dict[str, Any]
    ) -> None:
        await ack()
        try:
            meta = json.loads(view["private_metadata"])
        except (KeyError, ValueError):
            return
        state = view.get("state", {}).get("values", {})
        reason = (
            state.get(slack_card.REASON_BLOCK, {}).get(slack_card.REASON_INPUT, {}).get("value")
        )
        await self._decide(
            "reject",
            body["user"]["id"],
            f"{meta.get('id')}:{meta.get('hash')}",
            meta.get("channel") or None,
            (reason or "").strip() or None,
        )

    async def _decide(
        self, action: str, user_id: str, value: str, channel: str | None, note: str | None
    ) -> None:
        parsed = slack_card.parse_button_value(value)
        if parsed is None:
            await self._tell(channel, user_id, "This button was not made by signoff.")
            return
        approval_id, shown_hash = parsed
        principal = self.directory.principal_for_slack(user_id)
        if principal is None:
            error = NotAnApprover(
                f"Your Slack account ({user_id}) is not linked to a signoff principal, so it "
                'cannot decide; an administrator can add `slack = "' + user_id + '"` to '
                "your [principals.NAME] entry."
            )
            await self.operator.record_refusal(approval_id, f"slack:{user_id}", action, error)
            await self._tell(channel, user_id, error.message)
            return
        actor = Actor(principal.key, "slack")
        try:
            if action == "approve":
                await self.operator.approve_shown(approval_id, shown_hash, actor, note)
            else:
                await self.operator.reject_shown(approval_id, shown_hash, actor, note)
        except SignoffError as error:
            await self.operator.record_refusal(approval_id, actor.label, action, error)
            await self._tell(channel, user_id, self.refusal_text(error))

    def refusal_text(self, error: SignoffError) -> str:
        """What the clicking human reads: exactly why nothing happened."""
        if isinstance(error, ApprovalExpired):
            return f"{error.message[0].upper()}{error.message[1:]}."
        if isinstance(error, NotPending):
            if error.decided_by:
                who = self.directory.describe(error.decided_by).split(" (")[0]
                when = f" at {error.decided_at:%H:%M} UTC" if error.decided_at else ""
                return f"Already {error.state} by {who}{when}."
            return f"This request is already {error.state}."
        if isinstance(error, ApprovalChanged):
            return (
                "This card is out of date: the request changed since it was shown, so nothing "
                "was decided. Review it again."
            )
        if type(error) is NotAnApprover and error.assignee:
            return f"You are not an approver for this request; it is assigned to {error.assignee}."
        return error.message

    async def _tell(self, channel: str | None, user_id: str, text: str) -> None:
        if channel is None:
            log.info("refusal for %s not shown (no channel): %s", user_id, text)
            return
        try:
            await self.client.chat_postEphemeral(
                channel=channel, user=user_id, text=slack_card.escape(text)
            )
        except SlackApiError as exc:
            log.warning("could not tell %s in %s: %s", user_id, channel, exc.response.get("error"))

    # -- outbound (called by the outbox) --------------------------------------------------------

    async def post_card(self, card: Card, target: str) -> MessageRef:
        where = target.partition(":")[2]
        if where.startswith("@"):
            principal = self.directory.principals.get(where[1:])
            if principal is None or principal.slack is None:
                raise DeliveryFailed(f"principal {where[1:]!r} has no Slack user id configured")
            opened = await self._call(self.client.conversations_open, users=principal.slack)
            where = opened["channel"]["id"]
        posted = await self._call(
            self.client.chat_postMessage,
            channel=where,
            text=slack_card.fallback_text(card),
            blocks=slack_card.blocks(card),
        )
        return MessageRef("slack", posted["channel"], posted["ts"])

    async def update_card(self, ref: MessageRef, card: Card) -> None:
        await self._call(
            self.client.chat_update,
            channel=ref.address,
            ts=ref.message_id,
            text=slack_card.fallback_text(card),
            blocks=slack_card.blocks(card),
        )

    async def _call(self, method: Any, **kwargs: Any) -> Any:
        try:
            return await method(**kwargs)
        except SlackApiError as exc:
            if exc.response.status_code == 429:
                retry_after = exc.response.headers.get("Retry-After", "1")
                raise RetryLater(
                    "Slack rate limit", delay=float(retry_after) if retry_after.isdigit() else 1
                ) from exc
            raise DeliveryFailed(f"Slack answered {exc.response.get('error')}") from exc


def _channel_of(body: dict[str, Any]) -> str | None:
    return (body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id")
