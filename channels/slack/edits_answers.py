"""Slack's decisions beyond Approve and Reject: Edit… (approve as edited), Answer… and a
question's options.

- Edit… opens the editor (channels.slack.edit) once the Operator's precheck says the person
  could approve; its submission is judged by bot.edits and answered in the modal itself
  (field errors, or the confirmation); the confirmation's submit approves the revision.
- Answer… opens a modal for words to the agent (a tool call then never runs; a question is
  answered); a question's option button answers with that option at once.

Every one of them is bound to the hash of the card pressed, like Approve: a card older than
the request decides nothing, and a refusal is recorded and told as for any press.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from bot.edits import revise
from bot.errors import EditRefused, InvalidRequest, NoRoute, SignoffError
from bot.operator import MAX_ANSWER
from bot.routing import Route
from channels.conversation import refusal_text
from channels.slack import card as slack_card
from channels.slack import edit as slack_edit
from channels.slack import home as slack_home
from channels.slack.presses import Presses
from store.records import Approval

if TYPE_CHECKING:
    from slack_bolt.async_app import AsyncApp

log = logging.getLogger("signoff.slack")

ANSWER_MODAL = "signoff_answer_modal"
ANSWER_BLOCK = "answer"
_SLACK_INPUT = 3000  # the longest plain_text_input Slack takes


def answer_modal(approval_id: str, shown_hash: str, channel_id: str, question: bool) -> dict:
    """The modal asking for an answer in words."""
    label = (
        "Your answer (sent to the agent)"
        if question
        else "Your answer: the call does not run, and the agent reads this instead"
    )
    return {
        "type": "modal",
        "callback_id": ANSWER_MODAL,
        "private_metadata": slack_card.metadata(approval_id, shown_hash, channel_id),
        "title": slack_edit._plain("Answer" if question else "Answer instead", 24),
        "submit": slack_edit._plain("Answer", 24),
        "close": slack_edit._plain("Cancel", 24),
        "blocks": [
            {
                "type": "input",
                "block_id": ANSWER_BLOCK,
                "label": slack_edit._plain(label),
                "element": {
                    "type": "plain_text_input",
                    "action_id": slack_edit.VALUE,
                    "multiline": True,
                    "max_length": min(MAX_ANSWER, _SLACK_INPUT),
                },
            }
        ],
    }


class EditsAndAnswers:
    """The handlers, on the channel's Bolt app (`register`)."""

    def __init__(self, presses: Presses) -> None:
        self.presses = presses
        self.chat = presses.chat
        self.directory = presses.directory
        self.store = presses.chat.operator.store

    def register(self, app: AsyncApp) -> None:
        app.action(slack_card.EDIT)(self._on_edit)
        app.action(slack_card.ANSWER)(self._on_answer)
        app.action(slack_card.OPTION_ACTION)(self._on_option)
        app.view(slack_edit.EDIT_MODAL)(self._on_edit_submitted)
        app.view(slack_edit.CONFIRM_MODAL)(self._on_confirmed)
        app.view(ANSWER_MODAL)(self._on_answer_submitted)

    async def _row(self, approval_id: str) -> Approval | None:
        async with self.store.read() as tx:
            return await tx.get_approval(approval_id)

    def _route(self, row: Approval) -> Route | None:
        try:
            return self.directory.route_of(row)
        except NoRoute:
            return None

    # -- presses -------------------------------------------------------------------------------

    async def _on_edit(self, ack: Any, body: dict[str, Any]) -> None:
        await ack()
        user, where = body["user"]["id"], slack_home.channel_of(body)
        tell = self.presses.teller(where, user)
        async with self.chat.failures_told(tell):
            checked = await self.presses.actor_for(user, _value(body), "approve", tell)
            if checked is None:
                return
            actor, (approval_id, shown_hash) = checked
            if not await self.chat.precheck(approval_id, shown_hash, actor, "approve", tell):
                return
            row = await self._row(approval_id)
            route = self._route(row) if row is not None else None
            if row is None or route is None:
                return
            refused = None if route.edits != "none" else route.edit_refusal(())
            if refused is not None:
                await self.chat.refuse(
                    approval_id, actor.label, "approve", EditRefused(refused), tell
                )
                return
            too_big = slack_edit.too_big(row)
            if too_big is not None:
                await tell(too_big)
                return
            view = slack_edit.edit_modal(
                row, route, slack_card.metadata(approval_id, shown_hash, where or "")
            )
            if not slack_edit.has_inputs(view):
                await tell(
                    f"No argument of this call can be edited in Slack; {slack_edit.ELSEWHERE}."
                )
                return
            await self.presses.client.views_open(trigger_id=body["trigger_id"], view=view)

    async def _on_answer(self, ack: Any, body: dict[str, Any]) -> None:
        await ack()
        user, where = body["user"]["id"], slack_home.channel_of(body)
        tell = self.presses.teller(where, user)
        async with self.chat.failures_told(tell):
            checked = await self.presses.actor_for(user, _value(body), "answer", tell)
            if checked is None:
                return
            actor, (approval_id, shown_hash) = checked
            # Who may reject may answer instead: refused now rather than after typing.
            if await self.chat.precheck(
                approval_id, shown_hash, actor, "reject", tell, recorded_as="answer"
            ):
                row = await self._row(approval_id)
                question = row is not None and row.kind == "question"
                view = answer_modal(approval_id, shown_hash, where or "", question)
                await self.presses.client.views_open(trigger_id=body["trigger_id"], view=view)

    async def _on_option(self, ack: Any, body: dict[str, Any]) -> None:
        await ack()
        user, where = body["user"]["id"], slack_home.channel_of(body)
        tell = self.presses.teller(where, user)
        async with self.chat.failures_told(tell):
            action = body["actions"][0]
            checked = await self.presses.actor_for(user, action.get("value", ""), "answer", tell)
            if checked is None:
                return
            actor, (approval_id, shown_hash) = checked
            matched = slack_card.OPTION_ACTION.fullmatch(str(action.get("action_id", "")))
            row = await self._row(approval_id)
            options = list(((row.question or {}) if row is not None else {}).get("options") or [])
            index = int(matched.group(1)) if matched else len(options)
            # The option by its place on the card shown: the shown hash covers the options, so
            # a card older than the question decides nothing (the Operator refuses it).
            if index >= len(options):
                await tell("This button was not made by signoff.")
                return
            done = await self.chat.answer(
                approval_id, shown_hash, actor, tell, option=str(options[index])
            )
            if done is not None and where == slack_home.HOME:
                await self.presses.home.tell(user, done)

    # -- submissions ---------------------------------------------------------------------------

    async def _on_edit_submitted(
        self, ack: Any, body: dict[str, Any], view: dict[str, Any]
    ) -> None:
        """Judge the edit and answer in the modal: errors by field, or the confirmation."""
        meta = slack_card.read_metadata(view)
        user = body["user"]["id"]
        tell = self.presses.teller((meta or {}).get("channel") or None, user)
        async with self.chat.failures_told(tell):
            if meta is None:
                await ack()
                return
            value = f"{meta.get('id')}:{meta.get('hash')}"
            checked = await self.presses.actor_for(user, value, "approve", tell)
            if checked is None:
                await ack()
                return
            actor, (approval_id, shown_hash) = checked
            row = await self._row(approval_id)
            route = self._route(row) if row is not None else None
            if row is None or route is None or row.hash != shown_hash:
                await ack()  # closes the editor; the refusal says why
                await self.chat.precheck(approval_id, shown_hash, actor, "approve", tell)
                return
            read = slack_edit.read_edit(row, route, view.get("state", {}).get("values", {}))
            if read.errors:
                await ack(response_action="errors", errors=read.errors)
                return
            try:
                revision = revise(row, read.arguments, route)
            except SignoffError as error:
                field = _field(error, row, route, read.arguments)
                words = refusal_text(error, self.directory)
                block = slack_edit.error_block(row, view, field)
                await ack(response_action="errors", errors={block: words[:2000]})
                return
            changes = slack_edit.delta(row, revision)
            metadata = slack_card.metadata(
                approval_id, shown_hash, meta.get("channel") or "", edited=revision.hash, **changes
            )
            if len(metadata) > slack_edit.MAX_METADATA:
                words = f"This edit is too large to carry through Slack; {slack_edit.ELSEWHERE}."
                await ack(
                    response_action="errors",
                    errors={slack_edit.error_block(row, view, None): words},
                )
                return
            confirm = slack_edit.confirm_view(row, revision, metadata)
            await ack(response_action="update", view=confirm)

    async def _on_confirmed(self, ack: Any, body: dict[str, Any], view: dict[str, Any]) -> None:
        """Approve as edited: the call shown with the confirmed changes, and both hashes."""
        await ack()
        meta = slack_card.read_metadata(view)
        if meta is None:
            return
        user = body["user"]["id"]
        where = meta.get("channel") or None
        tell = self.presses.teller(where, user)
        async with self.chat.failures_told(tell):
            value = f"{meta.get('id')}:{meta.get('hash')}"
            checked = await self.presses.actor_for(user, value, "approve", tell)
            if checked is None:
                return
            actor, (approval_id, shown_hash) = checked
            row = await self._row(approval_id)
            # The Operator holds the call to the shown hash and the result to the edited one.
            shown = (row.tool_args or {}) if row is not None else {}
            arguments = slack_edit.applied(shown, meta)
            note = slack_edit._value(view.get("state", {}).get("values", {}), "note", "value")
            done = await self.chat.approve_edited(
                approval_id,
                shown_hash,
                arguments,
                str(meta.get("edited") or ""),
                actor,
                tell,
                note=(note or "").strip() or None,
            )
            if done is not None and where == slack_home.HOME:
                await tell(done)

    async def _on_answer_submitted(
        self, ack: Any, body: dict[str, Any], view: dict[str, Any]
    ) -> None:
        values = view.get("state", {}).get("values", {})
        text = (slack_edit._value(values, ANSWER_BLOCK, "value") or "").strip()
        if not text:  # said in the modal, which stays open
            await ack(
                response_action="errors",
                errors={ANSWER_BLOCK: "The answer is empty: write what the agent should read."},
            )
            return
        await ack()
        meta = slack_card.read_metadata(view)
        if meta is None:
            return
        user = body["user"]["id"]
        where = meta.get("channel") or None
        tell = self.presses.teller(where, user)
        async with self.chat.failures_told(tell):
            value = f"{meta.get('id')}:{meta.get('hash')}"
            checked = await self.presses.actor_for(user, value, "answer", tell)
            if checked is None:
                return
            actor, (approval_id, shown_hash) = checked
            done = await self.chat.answer(approval_id, shown_hash, actor, tell, text=text)
            if done is not None and where == slack_home.HOME:
                await tell(done)


def _field(
    error: SignoffError, row: Approval, route: Route, arguments: dict[str, Any]
) -> str | None:
    """The argument a refusal names: the schema's first field, or a key added that the
    route locks (the editor offers only the keys it lets change)."""
    if isinstance(error, InvalidRequest) and error.fields:
        return str(error.fields[0].get("field"))
    if isinstance(error, EditRefused):
        added = sorted(arguments.keys() - (row.tool_args or {}).keys())
        return next((key for key in added if route.edit_refusal([key]) is not None), None)
    return None


def _value(body: dict[str, Any]) -> str:
    return str(body["actions"][0].get("value", ""))
