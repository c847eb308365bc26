"""Standing grants on Telegram: "Allow the same…" on a card, and `/grants`.

Telegram has no forms, so what the web page's form asks at once is asked here by keyboards
that replace the card's buttons one after the other (as Confirm approve does): how later calls
must match this one (exactly these arguments, numbers up to these, any arguments), then for
how long (each lifetime the route offers, in any run or this run only). Only that last press
decides: it approves with the grant (bot.rich_decisions.approve_and_allow), and the card
changes through the outbox like after any decision. Every press carries the choices made
before it in its callback data (channels/telegram/card.py) and is judged on its own: the
presser is identified as for Approve (channels/telegram/channel.py), on the card the button is on,
with the hash that card showed. A refusal is recorded on the request and said; where the
flow cannot go on, the card's own buttons come back.

`/grants` lists the live grants the sender may revoke (bot/grant_views.py), a Revoke button
each (callback data `s1:x:` and the grant's id in 32 hex digits, 37 bytes); a press revokes
it (bot/standing.revoke, recorded on the approval that gave it) and edits the list.
"""

from __future__ import annotations

import logging
import re
import uuid
from datetime import timedelta

from telegram import (
    CallbackQuery,
    InlineKeyboardMarkup,
    LinkPreviewOptions,
    Message,
    ReplyParameters,
    Update,
)
from telegram.error import TelegramError
from telegram.ext import Application, CallbackQueryHandler, CommandHandler, ContextTypes

from bot import grant_views, standing
from bot.durations import format_duration
from bot.errors import GrantRefused, NotAnApprover, SignoffError
from bot.grant_views import GrantOffer
from bot.operator import Actor, decision_text
from bot.routing import Principal
from bot.standing import GrantScope
from bot.visible import visible
from channels.conversation import Conversation
from channels.telegram import answers as telegram_answers
from channels.telegram.card import Bind, Pressed, allow_data, cancel_data
from channels.telegram.config import TELEGRAM_SERVICE_ACCOUNTS
from channels.telegram.replies import ANONYMOUS, Replies, Rows, keyboard
from store.records import CardMessage

log = logging.getLogger("signoff.telegram")

# What a refusal of any of these presses is recorded as (the web page's word for it too).
ALLOW = "allow"
_REVOKE = "s1:x:"
_REVOKE_DATA = re.compile(rf"^{_REVOKE}([0-9a-f]{{32}})$")
# A list stays well inside Telegram's 4,096 characters: past these, it says how many more.
MAX_LISTED = 10
_LINE = 320
_PER_ROW = 4  # Revoke buttons side by side


class TelegramGrants:
    """The grant flow of one TelegramChannel: made with the channel's replies, conversation
    and PTB application before the channel adds its own handlers (a Revoke press is matched
    first)."""

    def __init__(self, replies: Replies, chat: Conversation, application: Application) -> None:
        self.replies = replies
        self.chat = chat
        self.memory = replies.memory
        self.directory = replies.directory
        application.add_handler(CallbackQueryHandler(self._on_revoke, pattern=_REVOKE_DATA))
        application.add_handler(CommandHandler("grants", self._on_command))

    # -- "Allow the same…" on a card --------------------------------------------------------

    async def pressed(
        self, query: CallbackQuery, card: CardMessage, actor: Actor, pressed: Pressed
    ) -> None:
        """One press of the flow, by `actor` (identified), on `card` (its button matched)."""
        replies, chat = self.replies, self.chat
        approval_id, shown = card.approval_id, card.shown_hash
        try:
            # Refused at the first press rather than after the choices.
            await chat.operator.precheck(approval_id, shown, actor, "approve")
            async with self.memory.store.read() as tx:
                row = await tx.get_approval(approval_id)
            offered = grant_views.offer(self.directory, row) if row is not None else None
            if row is None or offered is None:
                raise GrantRefused(
                    "this request's route gives no standing grant from this card; approve "
                    "it without one"
                )
        except SignoffError as error:
            await self._refused(query, card, actor, error)
            return
        numbers = [a.key for a in offered.arguments if a.number]
        bind: Bind | None = pressed.bind or (None if offered.arguments else "any")
        if bind is None:
            await replies.set_buttons(query, keyboard(bind_keyboard(pressed, offered)))
            await replies.answer(query, bind_prompt(row.tool_name or "", numbers))
            return
        if bind == "at_most" and not numbers:
            await self._stale(query, card)
            return
        if pressed.lifetime is None:
            await replies.set_buttons(query, keyboard(lifetime_keyboard(pressed, bind, offered)))
            await replies.answer(query, LIFETIME_PROMPT)
            return
        if pressed.lifetime not in offered.lifetimes:
            await self._stale(query, card)
            return
        scope = scope_for(offered, bind, pressed.lifetime, this_run=pressed.this_run)
        try:
            decision, grant = await chat.operator.approve_and_allow(
                approval_id, shown, actor, scope
            )
        except SignoffError as error:
            await self._refused(query, card, actor, error)
            return
        done = decision_text(decision.approval, decision.event, self.directory)
        where = " in this run" if grant.run_id else ""
        await replies.answer(
            query,
            f"{done} Later calls like it are approved at once{where} until "
            f"{grant.expires_at:%H:%M} UTC; /grants lists your grants.",
        )

    async def _refused(
        self, query: CallbackQuery, card: CardMessage, actor: Actor, error: SignoffError
    ) -> None:
        """Record and say why; unless it is only this presser who may not (someone else's
        choices may be on the card), put the card's own buttons back."""
        await self.chat.refuse(
            card.approval_id, actor.label, ALLOW, error, self.replies.answerer(query)
        )
        if not isinstance(error, NotAnApprover):
            await self._restore(query, card)

    async def _stale(self, query: CallbackQuery, card: CardMessage) -> None:
        """A choice this card no longer offers (the config changed, or made-up data)."""
        await self._restore(query, card)
        await self.replies.answer(
            query,
            "That choice is not offered on this card (any more), so nothing was decided; press "
            "Allow the same… again.",
            alert=True,
        )

    async def _restore(self, query: CallbackQuery, card: CardMessage) -> None:
        replies = self.replies
        await replies.set_buttons(query, await replies.markup_now(card.approval_id))

    # -- /grants and its Revoke buttons -------------------------------------------------------

    async def _on_command(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.message
        if message is None or message.from_user is None:
            return
        async with self.chat.failures_told(self.replies.replier(message)):
            principal = await self._caller(message.from_user.id, message)
            if principal is None:
                return
            text, markup = await self.listing(principal)
            await self.replies.bot.send_message(
                chat_id=message.chat.id,
                text=text,
                reply_markup=markup,
                reply_parameters=ReplyParameters(
                    message.message_id, allow_sending_without_reply=True
                ),
                link_preview_options=LinkPreviewOptions(is_disabled=True),
                message_thread_id=telegram_answers.topic(message),
            )

    async def _on_revoke(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        query = update.callback_query
        assert query is not None
        async with self.chat.failures_told(self.replies.answerer(query)):
            await self._revoke(query)

    async def _revoke(self, query: CallbackQuery) -> None:
        replies = self.replies
        match = _REVOKE_DATA.fullmatch(query.data or "")
        assert match is not None  # the handler's pattern
        principal = await self._caller(query.from_user.id, query)
        if principal is None:
            return
        try:
            revoked = await standing.revoke(
                self.memory.store,
                self.directory,
                self.memory.clock.now(),
                str(uuid.UUID(hex=match.group(1))),
                principal.key,
                via="telegram",
            )
        except SignoffError as error:
            await replies.answer(query, f"Nothing was revoked: {error.message}", alert=True)
            return
        await replies.answer(query, f"Revoked: {visible(grant_views.describe(revoked))}")
        message = query.message
        if message is None:
            return
        text, markup = await self.listing(principal)
        try:
            await replies.bot.edit_message_text(
                chat_id=message.chat.id,
                message_id=message.message_id,
                text=text,
                reply_markup=markup,
                link_preview_options=LinkPreviewOptions(is_disabled=True),
            )
        except TelegramError as exc:
            if "message is not modified" not in str(exc).casefold():
                log.warning("could not update the list of grants: %s", exc)

    async def _caller(self, user_id: int, where: Message | CallbackQuery) -> Principal | None:
        """The principal behind the account; None once told why there is none (an
        anonymous admin, or an account linked to nobody)."""
        anonymous = user_id in TELEGRAM_SERVICE_ACCOUNTS or (
            isinstance(where, Message) and where.sender_chat is not None
        )
        principal = None if anonymous else self.directory.principal_for("telegram", user_id)
        if principal is None:
            said = ANONYMOUS if anonymous else self.chat.unlinked(user_id, deciding=False)
            if isinstance(where, Message):
                await self.replies.say(where, said)
            else:
                await self.replies.answer(where, said, alert=True)
        return principal

    async def listing(self, principal: Principal) -> tuple[str, InlineKeyboardMarkup | None]:
        """The live grants `principal` may revoke, numbered, with a Revoke button each."""
        now = self.memory.clock.now()
        grants = await grant_views.visible_grants(
            self.memory.store, self.directory, principal.key, now
        )
        if not grants:
            return (
                f"No live standing grants that {principal.name} may revoke. To give one, "
                "press Allow the same… on a request's card.",
                None,
            )
        shown = grants[:MAX_LISTED]
        lines = [f"Standing grants {principal.name} may revoke ({len(grants)}):"]
        lines += [f"{i}. {_clip(visible(grant_views.describe(g)))}" for i, g in enumerate(shown, 1)]
        if len(grants) > len(shown):
            lines.append(
                f"…and {len(grants) - len(shown)} more (revoke one to see the next; "
                "signoff grants list shows all)."
            )
        buttons = [
            (f"Revoke {i}", f"{_REVOKE}{uuid.UUID(g.id).hex}") for i, g in enumerate(shown, 1)
        ]
        rows = [buttons[i : i + _PER_ROW] for i in range(0, len(buttons), _PER_ROW)]
        return "\n".join(lines), keyboard(rows)


# -- the choices, as keyboards --------------------------------------------------------------------

EXACTLY, UP_TO, ANY = "Exactly these arguments", "Amounts up to these", "Any arguments"
LIFETIME_PROMPT = (
    "For how long? Your press approves this request and allows the same until then, or "
    "until you revoke it (/grants)."
)


def bind_prompt(tool: str, numbers: list[str]) -> str:
    """The callback answer to "Allow the same…": what each way of matching means."""
    up_to = f", {', '.join(numbers)} at most as here (the rest exactly)" if numbers else ""
    return f"Later calls of {tool} approved at once: with exactly these arguments{up_to}, or any?"


def bind_keyboard(pressed: Pressed, offered: GrantOffer) -> Rows:
    """How later calls must match this one; "Amounts up to these" only with a number."""
    approval_id, short = pressed.approval_id, pressed.short_hash
    rows: Rows = [[(EXACTLY, allow_data(approval_id, short, "equal"))]]
    if any(a.number for a in offered.arguments):
        rows.append([(UP_TO, allow_data(approval_id, short, "at_most"))])
    rows.append([(ANY, allow_data(approval_id, short, "any"))])
    return [*rows, [("Cancel", cancel_data(pressed))]]


def lifetime_keyboard(pressed: Pressed, bind: Bind, offered: GrantOffer) -> Rows:
    """For how long, each offered lifetime in any run or this run only; each press approves."""
    approval_id, short = pressed.approval_id, pressed.short_hash
    rows: Rows = []
    for lifetime in offered.lifetimes:
        words = format_duration(lifetime)
        rows.append(
            [
                (f"Approve, {words}", allow_data(approval_id, short, bind, lifetime)),
                (
                    f"Approve, {words} in this run",
                    allow_data(approval_id, short, bind, lifetime, this_run=True),
                ),
            ]
        )
    return [*rows, [("Cancel", cancel_data(pressed))]]


def scope_for(
    offered: GrantOffer, bind: Bind, lifetime: timedelta, *, this_run: bool
) -> GrantScope:
    """The grant the choices ask for: every argument equal to its value here, every number
    at most its value here and the rest equal, or any arguments."""
    keys = tuple(a.key for a in offered.arguments)
    numbers = tuple(a.key for a in offered.arguments if a.number)
    equal: tuple[str, ...] = ()
    at_most: tuple[str, ...] = ()
    if bind == "equal":
        equal = keys
    elif bind == "at_most":
        at_most = numbers
        equal = tuple(k for k in keys if k not in numbers)
    return GrantScope(lifetime=lifetime, this_run=this_run, equal=equal, at_most=at_most)


def _clip(text: str, limit: int = _LINE) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
