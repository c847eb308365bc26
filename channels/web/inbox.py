"""The approver's inbox and the approval's page.

`GET /web/inbox` lists the pending requests the signed-in person may decide (assigned to
them or their group, naming them as an approver, or delegated to them right now), soonest
deadline first, fifty to a page. The database hands over, in deadline order along its index
of pending rows and a bounded batch at a time, only the rows whose assignee or approvers
name the person, someone they stand in for, or one of those people's groups; each is then
judged by the eligibility rule the Operator applies (`Directory.check_eligible`), so the
inbox never lists what a click would refuse for want of standing, and never reads other
people's requests to find out (bot/inbox.py, shared with the Slack App Home).

`GET /web/approvals/{id}` shows the card the chat surfaces show (bot.card), with Approve,
Reject and Delegate forms only when the Operator's precheck says the visitor may decide;
otherwise it says why. The forms carry the hash the page showed, and
`POST /web/approvals/{id}/approve|reject|delegate` decides exactly that through the Operator,
as `web:<principal>`: a page older than the request never decides, and every refusal is
recorded in the request's audit trail and shown in the words Slack and Telegram use
(channels.conversation.refusal_text). A decision redirects to the page with `?done=SEQ`, its
event, which the page words as the chat surfaces do (bot.operator.decision_text). All of it
works with JavaScript off; inbox.js only refreshes the list.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from aiohttp import web

from bot import bulk, inbox
from bot.card import Card, card_for
from bot.errors import (
    InvalidRequest,
    NotFound,
    SignoffError,
    UnknownPrincipal,
)
from bot.model import State
from bot.operator import DECISION_EVENTS, Action, Actor, Decision, decision_text
from bot.routing import Principal, Standing, covers
from channels.conversation import refusal_text
from channels.web import grants as web_grants
from store.records import Approval, Delegation
from store.repository import Tx

if TYPE_CHECKING:
    from channels.web.site import Site, Visitor

PAGE = 50  # requests on one inbox page
_SEQ = re.compile(r"[0-9]{1,12}")  # ?done=: the seq of the decision's event


def add_routes(app: web.Application, channel: Site) -> None:
    pages = InboxPages(channel)
    app.router.add_get("/web/inbox", pages.inbox)
    app.router.add_get("/web/approvals/{id}", pages.approval)
    app.router.add_post("/web/bulk", pages.bulk)
    app.router.add_post(
        "/web/approvals/{id}/{action:approve|reject|delegate|answer|allow}", pages.decide
    )


async def sign_in_text(channel: Site, principal: Principal) -> str:
    """What `/signoff web` (Slack) and `/web` (Telegram) answer a verified person, in their
    private view only: a fresh single-use link to their inbox."""
    token = await channel.links.make(principal.key)
    ttl = channel.config.link_ttl
    return (
        f"Your sign-in link for the signoff inbox, as {principal.name}: "
        f"{channel.links.url(channel.public_url, token)} (it works once, within {ttl}; "
        "do not forward it)"
    )


@dataclass(frozen=True, slots=True)
class InboxItem:
    card: Card
    standing_in_for: str | None  # the name of whom they decide for as a delegate, if so


class InboxPages:
    def __init__(self, channel: Site) -> None:
        self.channel = channel
        self.store = channel.store
        self.directory = channel.directory
        self.operator = channel.operator
        self.conversation = channel.conversation

    # -- the inbox ----------------------------------------------------------------------------

    async def inbox(self, request: web.Request) -> web.StreamResponse:
        visitor = await self.channel.visitor(request)
        if isinstance(visitor, web.StreamResponse):
            return visitor
        now = self.channel.clock.now()
        after = request.query.get("after") or None
        items, more = await self.mine(visitor.principal.key, now, after)
        partial = request.query.get("partial") == "1"
        query = {"partial": "1"} | ({"after": after} if after else {})
        context = {
            "items": items,
            "more": f"/web/inbox?{urlencode({'after': more})}" if more else None,
            "first_page": after is None,
            "refresh": f"/web/inbox?{urlencode(query)}",
        }
        if partial:
            # The script's refresh: it does not count as the person being active, so an open
            # tab does not keep a session alive past its idle timeout.
            return self.channel.page(request, visitor, "web_inbox_list.html", context, keep=False)
        return self.channel.page(request, visitor, "inbox.html", context)

    async def mine(
        self, principal: str, now: datetime, after: str | None = None
    ) -> tuple[list[InboxItem], str | None]:
        """One page of the pending requests `principal` may decide, soonest deadline first,
        after the request `after`; and the id to continue after, if there may be more (the
        same query and rule as the Slack Home: bot.inbox)."""
        found = await inbox.pending_for(
            self.store, self.directory, principal, now, limit=PAGE, after=after
        )
        return [self._item(p.approval, now, p.standing) for p in found.items], found.more

    def _item(self, row: Approval, now: datetime, standing: Standing) -> InboxItem:
        whom = standing.on_behalf_of
        return InboxItem(
            Card.from_approval(row, now, self.directory),
            self.directory.name_of(whom) if whom is not None else None,
        )

    # -- the approval's page ------------------------------------------------------------------

    async def approval(self, request: web.Request) -> web.StreamResponse:
        visitor = await self.channel.visitor(request)
        if isinstance(visitor, web.StreamResponse):
            return visitor
        done = request.query.get("done", "")
        seq = int(done) if _SEQ.fullmatch(done) else None
        return await self.show(request, visitor, request.match_info["id"], done=seq)

    async def show(
        self,
        request: web.Request,
        visitor: Visitor,
        approval_id: str,
        *,
        status: int = 200,
        done: int | None = None,
        alert: str | None = None,
    ) -> web.StreamResponse:
        """The card as it is now, with the forms the visitor may use; `done`, the seq of the
        decision the visitor just took here, says what it did; `alert` says why a decision
        was refused (the page then has that status)."""
        now = self.channel.clock.now()
        actor = self.conversation.actor(visitor.principal)
        status_message: str | None = None
        async with self.store.read() as tx:
            row = await tx.get_approval(approval_id)
            if row is not None and done is not None:
                status_message = await self._done(tx, row, done, actor)
            standing_in: list[Delegation] = []
            voted = False
            if row is not None and row.state == State.PENDING:
                entitled = self.directory.entitled(row)
                standing_in = [
                    d
                    for d in await tx.delegations_from(sorted(entitled), now)
                    if covers(d, row.capability)
                ]
                voted = any(v.principal == visitor.principal.key for v in row.votes)
        if row is None:
            return self.channel.refusal(
                request,
                visitor,
                404,
                f"There is no request with id {approval_id}.",
                title="Not found",
            )
        card = card_for(self.directory, row, now, max_value=None)
        allowed, why_not = await self._allowed(row, card, actor)
        if voted:
            # One vote per person (the Operator refuses a second, approve or reject alike).
            allowed -= {"approve", "reject", "answer", "edit"}
            why_not = "Your vote is recorded; the request waits for the other approvals it needs."
        # "Approve, and allow the same for ...": with Approve, where the route gives grants.
        grant = web_grants.offer(self.directory, row) if "approve" in allowed else None
        if grant is not None:
            allowed.add("allow")
        context: dict[str, Any] = {
            "card": card,
            "origin_id": row.origin_id,
            "delegates": [self.channel.delegations.describe(d) for d in standing_in],
            "allowed": allowed,
            "why_not": why_not,
            "choices": self._choices(row, visitor.principal.key),
            "grant": grant,
            "status_message": status_message,
            "alert": alert,
        }
        return self.channel.page(request, visitor, "approval.html", context, status=status)

    async def _done(self, tx: Tx, row: Approval, seq: int, actor: Actor) -> str | None:
        """What the decision recorded as event `seq` did, in the words every surface uses
        (bot.operator.decision_text): only for a decision this visitor took on this page,
        so nothing in the URL can make the page say anything else."""
        for event in await tx.events_for(row.id):
            if event.seq == seq:
                if event.actor != actor.label or event.type not in DECISION_EVENTS:
                    return None
                return decision_text(row, event, self.directory)
        return None

    async def _allowed(
        self, row: Approval, card: Card, actor: Actor
    ) -> tuple[set[str], str | None]:
        """Which forms to show, asked of the Operator's precheck (advisory: the decision
        judges again); and, if some are withheld, why, in the chat surfaces' words."""
        if card.state != State.PENDING:
            return set(), None
        if card.overdue:
            return set(), "This request's time ran out; it can no longer be decided."
        allowed: set[str] = set()
        why: str | None = None
        # A question is answered, never approved: only whether the visitor may decide it.
        for action in ("reject",) if card.question else ("reject", "approve"):
            try:
                await self.operator.precheck(row.id, row.hash, actor, action)
            except SignoffError as error:
                why = refusal_text(error, self.directory)
                if action == "reject":  # no standing at all: no forms
                    return set(), why
            else:
                allowed.add(action)
        if "reject" in allowed:
            # Who may decide may answer instead (a question is only answered).
            allowed |= {"delegate", "answer"}
        if card.question:
            allowed.discard("approve")
        elif "approve" in allowed and card.editable:
            allowed.add("edit")
        return allowed, why

    def _choices(self, row: Approval, visitor: str) -> list[tuple[str, str]]:
        """Whom the request can be handed to: every other principal but its assignee."""
        return sorted(
            (
                (key, f"{p.name} ({key})")
                for key, p in self.directory.principals.items()
                if key not in (visitor, row.assignee)
            ),
            key=lambda choice: choice[1].casefold(),
        )

    # -- deciding -----------------------------------------------------------------------------

    async def bulk(self, request: web.Request) -> web.StreamResponse:
        """Approve or reject the requests picked in the inbox, each against the hash its
        card showed; a page saying what was decided and what was refused and why (each
        refusal recorded in that request's trail, as a refused click is)."""
        posted = await self.channel.form(request)
        if isinstance(posted, web.StreamResponse):
            return posted
        visitor, form = posted
        action = form.get("action", "")
        # `pick.ID` = the hash that request's card showed: one field per picked request.
        picks = [f"{k[5:]} {v}" for k, v in form.items() if k.startswith("pick.")]
        actor = self.conversation.actor(visitor.principal)
        if action not in ("approve", "reject") or not picks:
            return self.channel.refusal(
                request, visitor, 422, "Pick at least one request, then Approve or Reject."
            )
        try:
            pairs = bulk.read_pairs("\n".join(picks))
        except InvalidRequest as error:
            return self.channel.refusal(request, visitor, 422, error.message)
        note = form.get("note", "").strip() or None
        outcomes = await bulk.decide_each(self.operator, action, pairs, actor, note)  # type: ignore[arg-type]
        rows = []
        for outcome in outcomes:
            if outcome.refused is not None:
                said = await self.conversation.recorded(
                    outcome.approval_id, actor.label, action, outcome.refused
                )
                rows.append((outcome.approval_id, None, said))
            else:
                assert outcome.decision is not None
                row = outcome.decision.approval
                said = decision_text(row, outcome.decision.event, self.directory)
                rows.append((outcome.approval_id, row.presentation.get("title"), said))
        context = {"action": action, "rows": rows}
        return self.channel.page(request, visitor, "bulk_result.html", context)

    async def decide(self, request: web.Request) -> web.StreamResponse:
        posted = await self.channel.form(request)  # signed in, and the CSRF token is right
        if isinstance(posted, web.StreamResponse):
            return posted
        visitor, form = posted
        approval_id, action = request.match_info["id"], request.match_info["action"]
        actor = self.conversation.actor(visitor.principal)
        try:
            decision = await self._decide(action, approval_id, actor, form)  # type: ignore[arg-type]
        except NotFound as error:
            return self.channel.refusal(request, visitor, 404, refusal_text(error, self.directory))
        except SignoffError as error:
            # Recorded in the request's audit trail like a refused click in chat.
            said = await self.conversation.recorded(approval_id, actor.label, action, error)
            return await self.show(
                request, visitor, approval_id, status=error.http_status, alert=said
            )
        # Post/redirect/get: a reload of the result does not post the form again. The URL
        # names the decision's event, which the page words as the chat surfaces do.
        location = f"/web/approvals/{approval_id}?done={decision.event.seq}"
        return web.Response(status=303, headers={"Location": location})

    async def _decide(
        self, action: Action, approval_id: str, actor: Actor, form: Mapping[str, str]
    ) -> Decision:
        """Decide what the page showed (its `hash`, never the current one). Raises the
        Operator's refusal."""
        shown = form.get("hash", "").strip()
        if action == "allow":
            scope = web_grants.scope_from(form)
            decided, _ = await self.operator.approve_and_allow(
                approval_id, shown, actor, scope, form.get("note", "").strip() or None
            )
            return decided
        if action == "answer":
            # A question's option is its button's value; words come from the text field.
            option = form.get("option")
            text = None if option is not None else form.get("answer", "")
            return await self.operator.answer(approval_id, shown, actor, text=text, option=option)
        note = form.get("note", "").strip() or None
        to = form.get("to", "").strip() if action == "delegate" else None
        # The form's own mistakes, in the page's words; the Operator judges the rest.
        if to == "":
            raise InvalidRequest("Choose whom to hand the request to; nothing was changed.")
        if to is not None and to not in self.directory.principals:
            raise UnknownPrincipal(f"There is no principal {to!r}; nothing was changed.")
        return await self.operator.decide(action, approval_id, shown, actor, note=note, to=to)
