"""Slack's standing grants: "Allow the same…" beside Approve, and Revoke on the App Home.

- Allow the same… (on a card whose route gives grants, bot/grant_views.offer) opens a modal
  once the Operator's precheck says the person could approve: how long (the lifetimes the
  route offers), only in this run or any, for each argument "equal to" its value here, "at
  most" it (numbers) or any value, an optional use limit and a note. Its submission approves
  what the card showed and gives the grant in one transaction
  (Operator.approve_and_allow, bound to the hash shown); the card is then updated by the
  outbox like after any decision, and the modal says what was allowed.
- The App Home lists the live grants the person gave (every one, for an operator) with a
  Revoke button each (channels.slack.home); pressing it ends the grant (bot.standing.revoke,
  recorded on the approval that gave it as `slack:<principal>`) and republishes the Home.

The clicking Slack user is identified exactly as for Approve (Presses.actor_for), so
an unlinked account or someone not entitled is refused, recorded and told the same way. The
form's own mistakes, and a grant the route refuses, are said in the modal, which stays open;
any other refusal (a card out of date, a request decided meanwhile) closes it and is told
like a refused click.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bot import grant_views, standing
from bot.decisions import decision_text
from bot.durations import duration_text, format_duration, parse_duration
from bot.errors import GrantRefused, InvalidRequest, NotAnApprover, SignoffError
from bot.grant_views import MAX_USES, GrantOffer
from bot.standing import GrantScope
from bot.visible import visible
from channels.slack import card as slack_card
from channels.slack import home as slack_home
from channels.slack.presses import Presses
from store.records import Approval, StandingGrant

if TYPE_CHECKING:
    from slack_bolt.async_app import AsyncApp

log = logging.getLogger("signoff.slack")

ALLOW_MODAL = "signoff_allow_modal"
LIFETIME_BLOCK = "lifetime"
THIS_RUN_BLOCK = "this_run"
USES_BLOCK = "max_uses"
NOTE_BLOCK = "note"
BIND = "bind_"  # one block per argument: bind_0, bind_1, ... (their keys in the metadata)
_ANY = "any"  # an option's value cannot be empty
_OPTION_TEXT = 75  # the longest text of a select's or radio button's option
_MAX_BLOCKS = 100
_MAX_METADATA = 3000
# Where someone reads how to grant what the modal cannot carry.
ELSEWHERE = "approve it without a grant here, or allow the same from the web page or the CLI"
_GRANT_ID = re.compile(r"[0-9a-f-]{36}")


@dataclass
class Read:
    """A submitted modal: the grant asked for, or the errors to show by block."""

    scope: GrantScope | None = None
    note: str | None = None
    errors: dict[str, str] = field(default_factory=dict)


def _plain(text: str, limit: int = 2000) -> dict[str, Any]:
    text = visible(text)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return {"type": "plain_text", "text": text or " ", "emoji": False}


def _option(value: str, text: str) -> dict[str, Any]:
    return {"text": _plain(text, _OPTION_TEXT), "value": value}


def _shown(value: Any) -> str:
    """An argument's value as the web form shows it (JSON: a string in quotes)."""
    return json.dumps(value, ensure_ascii=False)


def allow_modal(
    row: Approval, offered: GrantOffer, shown_hash: str, channel_id: str
) -> dict[str, Any] | None:
    """The modal asking what to allow the same for; None if it would not fit in Slack (too
    many arguments for a modal's blocks or its metadata)."""
    keys = [a.key for a in offered.arguments]
    metadata = slack_card.metadata(row.id, shown_hash, channel_id, keys=keys)
    lifetimes = [_option(duration_text(t), format_duration(t)) for t in offered.lifetimes]
    blocks: list[dict[str, Any]] = [
        {
            "type": "section",
            "text": _plain(
                f"Approve “{(row.presentation or {}).get('title', '')}” "
                f"(sha256:{shown_hash[:12]}) and allow later calls of "
                f"{row.tool_name} ({row.tenant}/{row.capability}) within these bounds to be "
                "approved at once in your name, each with its own hash and audit record, "
                "until the grant ends or you revoke it (on this app's Home).",
                3000,
            ),
        },
        {
            "type": "input",
            "block_id": LIFETIME_BLOCK,
            "label": _plain("How long"),
            "element": {
                "type": "static_select",
                "action_id": LIFETIME_BLOCK,
                "options": lifetimes,
                "initial_option": lifetimes[0],
            },
        },
    ]
    for index, argument in enumerate(offered.arguments):
        shown = _shown(argument.value)
        choices = [_option("equal", f"equal to {shown}")]
        if argument.number:
            choices.append(_option("at_most", f"at most {shown}"))
        choices.append(_option(_ANY, "any value"))
        blocks.append(
            {
                "type": "input",
                "block_id": f"{BIND}{index}",
                "label": _plain(argument.key),
                "element": {
                    "type": "radio_buttons",
                    "action_id": "bind",
                    "options": choices,
                    "initial_option": choices[0],
                },
            }
        )
    blocks += [
        {
            "type": "input",
            "block_id": THIS_RUN_BLOCK,
            "optional": True,
            "label": _plain("Run"),
            "element": {
                "type": "checkboxes",
                "action_id": THIS_RUN_BLOCK,
                "options": [_option("1", f"Only in this run ({row.run_id})")],
            },
        },
        {
            "type": "input",
            "block_id": USES_BLOCK,
            "optional": True,
            "label": _plain(f"Uses (an optional limit, 1 to {MAX_USES})"),
            "element": {
                "type": "number_input",
                "action_id": USES_BLOCK,
                "is_decimal_allowed": False,
                "min_value": "1",
                "max_value": str(MAX_USES),
            },
        },
        {
            "type": "input",
            "block_id": NOTE_BLOCK,
            "optional": True,
            "label": _plain("Note (kept in the audit trail)"),
            "element": {
                "type": "plain_text_input",
                "action_id": NOTE_BLOCK,
                "multiline": True,
                "max_length": 2000,
            },
        },
    ]
    if len(blocks) > _MAX_BLOCKS or len(metadata) > _MAX_METADATA:
        return None
    return {
        "type": "modal",
        "callback_id": ALLOW_MODAL,
        "private_metadata": metadata,
        "title": _plain("Allow the same", 24),
        "submit": _plain("Approve and allow", 24),
        "close": _plain("Cancel", 24),
        "blocks": blocks,
    }


def read_scope(values: dict[str, Any], keys: list[str]) -> Read:
    """The grant a submitted modal asks for, or what to say under which input."""
    read = Read()

    def state(block: str) -> dict[str, Any]:
        found = next(iter((values.get(block) or {}).values()), None)
        return found if isinstance(found, dict) else {}

    chosen = (state(LIFETIME_BLOCK).get("selected_option") or {}).get("value")
    try:
        lifetime = parse_duration(str(chosen or ""))
    except ValueError:
        read.errors[LIFETIME_BLOCK] = "Choose how long to allow the same for."
    equal: list[str] = []
    at_most: list[str] = []
    for index, key in enumerate(keys):
        how = (state(f"{BIND}{index}").get("selected_option") or {}).get("value")
        if how == "equal":
            equal.append(key)
        elif how == "at_most":
            at_most.append(key)
        elif how != _ANY:
            read.errors[f"{BIND}{index}"] = "Choose which values of this argument to allow."
    uses_text = str(state(USES_BLOCK).get("value") or "").strip()
    if uses_text and not (uses_text.isdigit() and 1 <= int(uses_text) <= MAX_USES):
        read.errors[USES_BLOCK] = f"The number of uses is a whole number from 1 to {MAX_USES}."
    if read.errors:
        return read
    read.scope = GrantScope(
        lifetime=lifetime,
        this_run=bool(state(THIS_RUN_BLOCK).get("selected_options")),
        equal=tuple(equal),
        at_most=tuple(at_most),
        max_uses=int(uses_text) if uses_text else None,
    )
    read.note = str(state(NOTE_BLOCK).get("value") or "").strip() or None
    return read


def done_modal(done: str, grant: StandingGrant) -> dict[str, Any]:
    """What the modal says once the request is approved and the grant given."""
    return {
        "type": "modal",
        "callback_id": f"{ALLOW_MODAL}_done",
        "title": _plain("Approved", 24),
        "close": _plain("Close", 24),
        "blocks": [
            {"type": "section", "text": _plain(done, 3000)},
            {
                "type": "section",
                "text": _plain(f"Allowed the same: {grant_views.describe(grant)}.", 3000),
            },
            {
                "type": "context",
                "elements": [
                    _plain(f"Revoke it on this app's Home (Standing grants); its id is {grant.id}.")
                ],
            },
        ],
    }


class Grants:
    """The handlers, on the channel's Bolt app (`register`)."""

    def __init__(self, presses: Presses) -> None:
        self.presses = presses
        self.chat = presses.chat
        self.directory = presses.directory
        self.operator = presses.chat.operator
        self.store = presses.chat.operator.store

    def register(self, app: AsyncApp) -> None:
        app.action(slack_card.ALLOW)(self._on_allow)
        app.view(ALLOW_MODAL)(self._on_allow_submitted)
        app.action(slack_card.REVOKE_GRANT)(self._on_revoke)

    async def _on_allow(self, ack: Any, body: dict[str, Any]) -> None:
        await ack()
        user, where = body["user"]["id"], slack_home.channel_of(body)
        tell = self.presses.teller(where, user)
        async with self.chat.failures_told(tell):
            value = str(body["actions"][0].get("value", ""))
            checked = await self.presses.actor_for(user, value, "allow", tell)
            if checked is None:
                return
            actor, (approval_id, shown_hash) = checked
            if not await self.chat.precheck(
                approval_id, shown_hash, actor, "approve", tell, recorded_as="allow"
            ):
                return
            async with self.store.read() as tx:
                row = await tx.get_approval(approval_id)
            if row is None:
                return
            offered = grant_views.offer(self.directory, row)
            if offered is None:  # the config changed since the card was posted
                await self.chat.refuse(approval_id, actor.label, "allow", _refusal(self, row), tell)
                return
            view = allow_modal(row, offered, shown_hash, where or "")
            if view is None:
                await tell(f"This call has too many arguments to bind in Slack; {ELSEWHERE}.")
                return
            await self.presses.client.views_open(trigger_id=body["trigger_id"], view=view)

    async def _on_allow_submitted(
        self, ack: Any, body: dict[str, Any], view: dict[str, Any]
    ) -> None:
        """Approve and give the grant; the modal says what was allowed, or why not."""
        meta = slack_card.read_metadata(view)
        user = body["user"]["id"]
        where = (meta or {}).get("channel") or None
        tell = self.presses.teller(where, user)
        async with self.chat.failures_told(tell):
            if meta is None:
                await ack()
                return
            value = f"{meta.get('id')}:{meta.get('hash')}"
            checked = await self.presses.actor_for(user, value, "allow", tell)
            if checked is None:
                await ack()  # closes the modal; the refusal says why
                return
            actor, (approval_id, shown_hash) = checked
            keys = [str(k) for k in meta.get("keys") or []]
            read = read_scope(view.get("state", {}).get("values", {}), keys)
            if read.scope is None:
                await ack(response_action="errors", errors=read.errors)
                return
            try:
                decision, grant = await self.operator.approve_and_allow(
                    approval_id, shown_hash, actor, read.scope, read.note
                )
            except SignoffError as error:
                said = await self.chat.recorded(approval_id, actor.label, "allow", error)
                if isinstance(error, GrantRefused | InvalidRequest):
                    # What this grant may be: the person may choose again, or close.
                    await ack(response_action="errors", errors={LIFETIME_BLOCK: said[:2000]})
                    return
                await ack()
                await tell(said, firmly=isinstance(error, NotAnApprover))
                return
            done = decision_text(decision.approval, decision.event, self.directory)
            await ack(response_action="update", view=done_modal(done, grant))
            if where == slack_home.HOME:
                await tell(done)

    async def _on_revoke(self, ack: Any, body: dict[str, Any]) -> None:
        """Revoke on the Home: end the grant, then republish the Home saying so (or why
        not)."""
        await ack()
        user, where = body["user"]["id"], slack_home.channel_of(body)
        tell = self.presses.teller(where, user)
        async with self.chat.failures_told(tell):
            grant_id = str(body["actions"][0].get("value", ""))
            if not _GRANT_ID.fullmatch(grant_id):
                await tell("This button was not made by signoff.")
                return
            principal = self.directory.principal_for("slack", user)
            if principal is None:
                await tell(self.chat.unlinked(user, deciding=False))
                return
            try:
                revoked = await standing.revoke(
                    self.store,
                    self.directory,
                    self.operator.clock.now(),
                    grant_id,
                    principal.key,
                    via="slack",
                )
            except SignoffError as error:
                await tell(f"Nothing was revoked: {error.message}")
                return
            await tell(f"Revoked: {grant_views.describe(revoked)}.")
            if revoked.granted_by != principal.key:  # an operator's revoke: off the giver's too
                self.presses.home.refresh_principals([revoked.granted_by])


def _refusal(grants: Grants, row: Approval) -> SignoffError:
    """Why the request's route gives no grant from this card now, in bot.standing's words."""
    try:
        route = grants.directory.route_of(row)
        standing.check_scope(route, row, GrantScope(route.max_grant_lifetime))
    except SignoffError as error:
        return error
    return GrantRefused(
        "a standing grant comes with the approval that decides the request; this one would "
        "be a vote towards its quorum (approve without it)"
    )
