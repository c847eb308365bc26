"""Slack: approval cards with buttons, decisions from clicks, cards updated in place.

A slack-bolt `AsyncApp` runs inside signoff's own aiohttp server: `POST /slack/events` is
turned into a Bolt request and dispatched (Bolt verifies the signature and the timestamp;
anything else gets 401 and nothing happens). Clicks are acknowledged at once, then the
clicking Slack user is mapped to a configured principal and the Operator decides; every
refusal is answered with an ephemeral message saying exactly why, and recorded in the
approval's audit trail. Cards are posted and updated from the outbox (bot.outbox.cards), so Slack
being down delays a card, never loses it.

"Delegate…" hands one request to another person (a modal with a user picker); "Edit…",
"Answer…" and a question's options are channels.slack.edits_answers'; "Allow the same…" and
the Home's Revoke of a standing grant are channels.slack.grants'; both are handed the
channel's Presses (channels.slack.presses: who pressed, and telling them) and never import
this module. The slash command `/signoff delegate|delegations|revoke` manages standing
delegations.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.request.async_internals import build_async_context
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.card import Card
from bot.chat_memory import ChatMemory
from bot.delegations import USAGE, Delegations
from bot.errors import DeliveryFailed, InvalidRequest, RetryLater, Undeliverable
from bot.operator import Action, Operator
from bot.routing import Directory
from bot.target import Target
from channels import conversation
from channels.answer_cap import CappedResponse
from channels.base import MessageRef
from channels.conversation import Conversation, Surface
from channels.slack import card as slack_card
from channels.slack import home as slack_home
from channels.slack.config import SlackConfig
from channels.slack.edits_answers import EditsAndAnswers
from channels.slack.gate import Passed, SlackGate
from channels.slack.grants import Grants
from channels.slack.presses import Presses
from channels.web import inbox as web_inbox
from store import json_text

if TYPE_CHECKING:
    from channels.web.site import Site as WebSite

log = logging.getLogger("signoff.slack")

COMMAND = "/signoff"
COMMAND_USAGE = "\n".join(
    [
        f"{COMMAND} " + USAGE.replace("`delegate", f"`{COMMAND} delegate"),
        f"{COMMAND} delegations: your delegations (made or received), with their ids",
        f"{COMMAND} revoke ID: end a delegation you made",
    ]
)
WEB_USAGE = f"{COMMAND} web: a sign-in link to your inbox in the browser, shown only to you"
# How Slack writes a user mention in a command's text when the command escapes it.
_MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")
SURFACE = Surface("slack", "Slack", f"{COMMAND} ", quote_ids=True, backticks=True)


def credentials(config: SlackConfig, environ: Mapping[str, str] = os.environ) -> tuple[str, str]:
    """The bot token and signing secret from the environment; ConfigError naming whichever
    variable is unset (checked before anything else at startup)."""
    token, secret = conversation.credentials(
        "slack",
        [config.bot_token_env, config.signing_secret_env],
        "the bot token and signing secret",
        environ,
    )
    return token, secret


ANY_WORKSPACE = (
    "[slack] team_id is not set: any Slack workspace whose app holds this signing secret can "
    "decide here. Set team_id to your workspace's id (T…, or E… for an Enterprise Grid org) "
    "so that requests from any other workspace, or naming none, are refused"
)


def check(config: SlackConfig, environ: Mapping[str, str] = os.environ) -> None:
    """What `serve`, `worker` and `config check` check of [slack] before anything starts: the
    credentials (ConfigError naming what is unset), and a warning when no team_id says which
    workspace may decide."""
    credentials(config, environ)
    if config.team_id is None:
        log.warning(ANY_WORKSPACE)


class SlackChannel:
    name = "slack"

    def __init__(
        self,
        config: SlackConfig,
        directory: Directory,
        operator: Operator,
        delegations: Delegations,
        memory: ChatMemory,
        environ: Mapping[str, str] = os.environ,
        *,
        web: WebSite | None = None,
    ) -> None:
        """`web`, when [web] is configured: cards link to the approval's page, and
        `/signoff web` sends a sign-in link."""
        token, secret = credentials(config, environ)
        self.web = web
        self.gate = SlackGate(secret, memory, config.team_id)
        self.directory = directory
        self.chat = Conversation(SURFACE, directory, operator, delegations)
        # slack-sdk drops the last path segment of a base URL without a trailing slash.
        base_url = config.api_base_url.rstrip("/") + "/"
        # Short calls: a card post (two calls for a DM) must end well inside its outbox lease.
        self.client = AsyncWebClient(token=token, base_url=base_url, timeout=10)
        self._sdk_level_set = False  # `start` set slack-sdk's logger level
        page = web.approval_url if web is not None else None
        self.home = slack_home.SlackHome(self.client, self.chat, delegations, page)
        self.presses = Presses(self.chat, directory, self.client, self.home)

        async def authorize(**_: Any) -> AuthorizeResult:
            # One workspace, one bot token: nothing to look up (Bolt would otherwise call
            # auth.test on the first click and tell the user to reinstall if that failed).
            return AuthorizeResult(enterprise_id=None, team_id=None, bot_token=token)

        # process_before_response: a click is decided (milliseconds) before Slack gets its
        # 200, so a shutdown cannot drop an acknowledged click and a failure is reported.
        self.app = AsyncApp(
            # Named: without a name Bolt calls inspect.stack() to name the app after its
            # caller's file, which reads the source of every frame (0.1 s per app).
            name="signoff",
            signing_secret=secret,
            client=self.client,
            authorize=authorize,
            process_before_response=True,
        )
        self.app.action(slack_card.APPROVE)(self._on_approve)
        self.app.action(slack_card.REJECT)(self._on_reject)
        self.app.action(slack_card.DELEGATE)(self._on_delegate)
        EditsAndAnswers(self.presses).register(self.app)
        Grants(self.presses).register(self.app)
        self.app.view(slack_card.REJECT_MODAL)(self._on_reject_submitted)
        self.app.view(slack_card.DELEGATE_MODAL)(self._on_delegate_submitted)
        self.app.command(COMMAND)(self._on_command)
        self.app.event("app_home_opened")(self._on_home_opened)

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """One long-lived HTTP session for every Web API call, reading answers no further
        than channels.answer_cap's cap (slack-sdk would otherwise open a session per call and
        read each answer whole), its bodies written and read by orjson (store/json_text.py)."""
        self.client.session = aiohttp.ClientSession(
            response_class=CappedResponse, json_serialize=json_text.dumps
        )
        # slack-sdk builds its debug lines (the request's fields and headers, the answer)
        # whenever its logger's own level is at most DEBUG, and an unset level (0) is:
        # about 3 % of a create's CPU with its card, for lines nobody sees. The level the
        # logging setup gives it (serve's, or DEBUG if asked for) is made its own.
        # Given back at `stop`, so a later start reads the logging setup afresh.
        sdk_log = self.client.logger
        if sdk_log.level == logging.NOTSET:
            sdk_log.setLevel(sdk_log.getEffectiveLevel())
            self._sdk_level_set = True

    async def stop(self) -> None:
        if self._sdk_level_set:
            self.client.logger.setLevel(logging.NOTSET)
            self._sdk_level_set = False
        await self.home.close()
        session, self.client.session = self.client.session, None
        if session is not None:
            await session.close()

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/slack/events", self.handle)

    # -- inbound -------------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.Response:
        """`POST /slack/events`: everything Slack sends, checked (channels.slack.gate), then
        through Bolt."""
        checked = await self.gate.check(request)
        if isinstance(checked, web.Response):
            return checked
        return await to_aiohttp_response(
            await self.app.async_dispatch(_bolt_request(request, checked))
        )

    async def _on_approve(self, ack: Any, body: dict[str, Any]) -> None:
        await ack()
        user, channel = body["user"]["id"], _channel_of(body)
        tell = self.presses.teller(channel, user)
        async with self.chat.failures_told(tell):
            value = body["actions"][0].get("value", "")
            checked = await self.presses.actor_for(user, value, "approve", tell)
            if checked is not None:
                actor, (approval_id, shown_hash) = checked
                # Said on the card itself, which the outbox updates like after any transition.
                done = await self.chat.decide("approve", approval_id, shown_hash, actor, tell)
                if done is not None and channel == slack_home.HOME:
                    await self.home.tell(user, done)  # the Home, without it, saying so

    async def _on_reject(self, ack: Any, body: dict[str, Any]) -> None:
        await ack()
        await self._ask(body, "reject", slack_card.reject_modal)

    async def _on_delegate(self, ack: Any, body: dict[str, Any]) -> None:
        await ack()
        await self._ask(body, "delegate", slack_card.delegate_modal)

    async def _ask(
        self, body: dict[str, Any], action: Action, modal: Callable[[str, str, str], dict[str, Any]]
    ) -> None:
        """Open the modal that asks for the rest of a decision, unless the clicking user
        would be refused anyway: then refuse now rather than after they filled it in."""
        user, channel = body["user"]["id"], _channel_of(body)
        tell = self.presses.teller(channel, user)
        async with self.chat.failures_told(tell):
            value = body["actions"][0].get("value", "")
            checked = await self.presses.actor_for(user, value, action, tell)
            if checked is None:
                return
            actor, (approval_id, shown_hash) = checked
            if await self.chat.precheck(approval_id, shown_hash, actor, action, tell):
                view = modal(approval_id, shown_hash, channel or "")
                await self.client.views_open(trigger_id=body["trigger_id"], view=view)

    async def _on_reject_submitted(
        self, ack: Any, body: dict[str, Any], view: dict[str, Any]
    ) -> None:
        await ack()
        reason = _input(view, slack_card.REASON_BLOCK, slack_card.REASON_INPUT, "value")
        await self._submitted(body, view, "reject", (reason or "").strip() or None)

    async def _on_delegate_submitted(
        self, ack: Any, body: dict[str, Any], view: dict[str, Any]
    ) -> None:
        chosen = _input(view, slack_card.DELEGATE_BLOCK, slack_card.DELEGATE_INPUT, "selected_user")
        to = self.directory.principal_for("slack", chosen or "")
        if to is None:  # said in the modal, which stays open for another choice
            await ack(
                response_action="errors",
                errors={
                    slack_card.DELEGATE_BLOCK: (
                        "That person is not linked to a signoff principal, so they cannot "
                        "decide. Choose someone else, or ask an administrator to link them "
                        f'(slack = "{chosen}" in their [principals.NAME] entry).'
                    )
                },
            )
            return
        await ack()
        note = _input(view, slack_card.NOTE_BLOCK, slack_card.NOTE_INPUT, "value") or ""
        await self._submitted(body, view, "delegate", note.strip() or None, to=to.key)

    async def _submitted(
        self,
        body: dict[str, Any],
        view: dict[str, Any],
        action: Action,
        note: str | None,
        *,
        to: str | None = None,
    ) -> None:
        """A modal's answer: decide what its card showed, as the person who submitted it."""
        meta = slack_card.read_metadata(view)
        if meta is None:
            return
        user = body["user"]["id"]
        tell = self.presses.teller(meta.get("channel") or None, user)
        async with self.chat.failures_told(tell):
            value = f"{meta.get('id')}:{meta.get('hash')}"
            checked = await self.presses.actor_for(user, value, action, tell)
            if checked is None:
                return
            actor, (approval_id, shown_hash) = checked
            done = await self.chat.decide(
                action, approval_id, shown_hash, actor, tell, note=note, to=to
            )
            home = meta.get("channel") == slack_home.HOME
            if done is not None and (action == "delegate" or home):
                await tell(done)  # a rejection shows on the card itself (and the Home says so)

    # -- the App Home (channels.slack.home) -----------------------------------------------------

    async def _on_home_opened(self, event: dict[str, Any]) -> None:
        """`app_home_opened` on the Home tab: publish the person's Home (the gate has checked
        the workspace)."""
        user = event.get("user")
        if event.get("tab", "home") != "home" or not isinstance(user, str):
            return  # the Messages tab: nothing to show
        try:
            await self.home.publish(user)
        except Exception:
            log.exception("could not publish the Slack Home of %s", user)

    # -- the slash command ---------------------------------------------------------------------

    async def _on_command(self, ack: Any, command: dict[str, Any]) -> None:
        """`/signoff ...`: answered in the command's response (shown only to the caller)."""
        user = str(command.get("user_id", ""))
        # A mention may carry a display name with spaces: keep only the user id.
        words = _MENTION.sub(r"<@\1>", str(command.get("text") or "")).split()
        verb = words[0].casefold() if words else "help"
        if verb in conversation.COMMANDS:
            answer = await self.chat.command(
                verb,
                self.directory.principal_for("slack", user),
                user,
                [_unescape(word) for word in words[1:]],
                resolve=self._principal_named,
            )
        elif verb == "web" and self.web is not None:
            # Said ephemerally, and never unfurled: a preview fetched by Slack's servers
            # would open (and so use up) the single-use link before the person could.
            answer = await self._sign_in_link(user)
            await ack(
                text=slack_card.escape(answer),
                response_type="ephemeral",
                unfurl_links=False,
                unfurl_media=False,
            )
            return
        else:
            answer = COMMAND_USAGE + (f"\n{WEB_USAGE}" if self.web is not None else "")
        await ack(text=slack_card.escape(answer))

    async def _sign_in_link(self, user_id: str) -> str:
        """`/signoff web`: a fresh sign-in link for the verified person who asked, in the
        command's response, which Slack shows only to them."""
        assert self.web is not None
        principal = self.directory.principal_for("slack", user_id)
        if principal is None:
            return self.chat.unlinked(user_id, deciding=False)
        try:
            return await web_inbox.sign_in_text(self.web, principal)
        except Exception:
            log.exception("could not make a sign-in link for %s", principal.key)
            return conversation.COMMAND_FAILED

    def _principal_named(self, word: str) -> str:
        """The principal key a command names: a Slack mention (of a linked user), or the key
        itself (`bob` or `@bob`)."""
        mention = _MENTION.fullmatch(word)
        if mention is None:
            return word.removeprefix("@")
        principal = self.directory.principal_for("slack", mention.group(1))
        if principal is None:
            raise InvalidRequest(
                f"That Slack user ({mention.group(1)}) is not linked to a signoff principal, so "
                "nobody can delegate to them."
            )
        return principal.key

    # -- outbound (called by the outbox) --------------------------------------------------------

    async def _conversation(self, target: Target) -> str:
        """The channel id to post to: the target's own, or a principal's DM channel."""
        user = self.chat.account_of(target)
        if user is None:
            return target.where
        opened = await self._call(self.client.conversations_open, users=user)
        return str(opened["channel"]["id"])

    async def send_notice(self, target: Target, text: str) -> None:
        where = await self._conversation(target)
        await self._call(self.client.chat_postMessage, channel=where, text=slack_card.escape(text))
        if target.principal is not None:  # a delegation starting or ending, say
            self.home.refresh_principals([target.principal])

    async def send_reply(self, ref: MessageRef, text: str) -> None:
        """Plain text in the card's thread."""
        await self._call(
            self.client.chat_postMessage,
            channel=ref.address,
            thread_ts=ref.message_id,
            text=slack_card.escape(text),
        )

    async def post_card(self, card: Card, target: Target) -> MessageRef:
        where = await self._conversation(target)
        posted = await self._call(
            self.client.chat_postMessage,
            channel=where,
            text=slack_card.fallback_text(card),
            blocks=slack_card.blocks(card, self._page(card)),
        )
        self.home.refresh_approval(card.approval_id)
        return MessageRef("slack", posted["channel"], posted["ts"])

    async def update_card(self, ref: MessageRef, card: Card) -> None:
        await self._call(
            self.client.chat_update,
            channel=ref.address,
            ts=ref.message_id,
            text=slack_card.fallback_text(card),
            blocks=slack_card.blocks(card, self._page(card)),
        )
        self.home.refresh_approval(card.approval_id)

    def _page(self, card: Card) -> str | None:
        """The approval's page on the web surface, if there is one."""
        return self.web.approval_url(card.approval_id) if self.web is not None else None

    async def _call(self, method: Any, **kwargs: Any) -> Any:
        try:
            return await method(**kwargs)
        except SlackApiError as exc:
            if exc.response.status_code == 429:
                retry_after = exc.response.headers.get("Retry-After")
                raise RetryLater.after("Slack rate limit", retry_after) from exc
            error = str(exc.response.get("error"))
            if error in PERMANENT_ERRORS:
                # Asking again gives the same answer until a person acts (invites the bot,
                # fixes the token): the job is dead at once, with Slack's code as its reason.
                raise Undeliverable(f"Slack answered {error}", reason=error) from exc
            raise DeliveryFailed(f"Slack answered {error}") from exc


PERMANENT_ERRORS = frozenset(
    {
        # The conversation is gone, archived, or the bot is not a member of it.
        "channel_not_found",
        "not_in_channel",
        "is_archived",
        # A DM's other end does not exist.
        "user_not_found",
        # The bot token is wrong, missing, revoked, or belongs to a deleted user or workspace
        # (account_inactive): every call fails until it is fixed.
        "account_inactive",
        "invalid_auth",
        "not_authed",
        "token_revoked",
        # The card's message was deleted: there is nothing left to update.
        "message_not_found",
    }
)
"""Web API `error` codes that no retry can change (the outbox buries the job at once)."""


_channel_of = slack_home.channel_of


def _bolt_request(request: web.Request, checked: Passed) -> AsyncBoltRequest:
    """Bolt's request for one the gate passed, holding the body as the gate parsed it.

    Bolt would parse the text again, by its own rules (a form whose text starts with "{" as
    JSON): it is made with an empty body and given the gate's text (which Bolt's own
    signature check reads) and parse. The text is the gate's too: UTF-8 whatever charset the
    Content-Type names (Bolt's adapter reads by that charset, and a made-up one raised
    LookupError)."""
    made = AsyncBoltRequest(
        body="",
        query=request.query_string,
        headers=request.headers,  # type: ignore[arg-type]
    )
    made.raw_body, made.body = checked.text, checked.body
    made.context = build_async_context(made.context, checked.body)
    return made


def _input(view: dict[str, Any], block: str, action: str, key: str) -> Any:
    """One input's submitted value (`value`, `selected_user`, ...); None if absent."""
    values = view.get("state", {}).get("values", {})
    return values.get(block, {}).get(action, {}).get(key)


def _unescape(word: str) -> str:
    """Undo Slack's escaping of what the user typed (`&`, `<`, `>`), so it is echoed as typed."""
    return word.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
