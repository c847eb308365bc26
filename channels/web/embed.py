"""The embedded approval: `/embed/<token>`, the page a partner's site puts in an iframe.

A token (bot/embed_tokens.py, minted by the agent API) shows one request to one person,
framed by one origin. `GET /embed/{token}` shows the card every surface shows (the web's
`_card.html`, without its forms) and Approve and Reject bound to the hash the page showed;
`POST` to the same address decides that hash through the Operator, as `embed:<person>`, and
spends the token (a refusal or a failure gives it back: only a decision spends it). A GET
never writes; a token unknown, used, expired or sent with another request's form is refused
with its status and stable code before anything is written.

Every answer says who may frame it: `Content-Security-Policy: frame-ancestors` names the
token's parent origin only (while `[web] embed_origins` still allows it), no
`X-Frame-Options`. The page tells its parent what happened by `postMessage`, with the
parent's origin as the target (static/embed.js reads it from the page): `loaded`, `decided`
(with the decision, the state it left and the hash), `error` (with a code), `resize` (its
height). A token never opens a session and no other page reads it.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import aiohttp_jinja2
from aiohttp import web

from bot.api_embed import EMBED, EmbedSettings
from bot.card import card_for
from bot.embed_tokens import (
    EMBED_PATH,
    VIA,
    EmbedOriginRefused,
    EmbedOtherRequest,
    EmbedRefused,
    EmbedToken,
    EmbedTokens,
)
from bot.errors import (
    AlreadyVoted,
    ApprovalExpired,
    InvalidRequest,
    NotPending,
    SignoffError,
)
from bot.model import State
from bot.operator import Actor, decision_text
from channels.conversation import FAILED, refusal_text
from channels.web.site import STATIC, read_form

if TYPE_CHECKING:
    from channels.web.site import Site

log = logging.getLogger("signoff.web")

MAX_NOTE = 2000
# What a browser says of a POST from our own page (the frame) or typed in; another site's
# form is refused before anything is read.
_OWN_SITE = (None, "same-origin", "none")


def add_routes(app: web.Application, site: Site) -> None:
    """The page's routes, and what the agent API's mint reads of this surface (EMBED)."""
    pages = EmbedPages(site)
    app[EMBED] = EmbedSettings(tuple(site.config.embed_origins), site.public_url)
    app.router.add_get(EMBED_PATH + "{token}", pages.show)
    app.router.add_post(EMBED_PATH + "{token}", pages.decide)


class EmbedPages:
    def __init__(self, site: Site) -> None:
        self.site = site
        self.tokens = EmbedTokens(site.store, site.directory, site.clock)
        self.origins = tuple(site.config.embed_origins)

    # -- showing ----------------------------------------------------------------------------

    async def show(self, request: web.Request) -> web.StreamResponse:
        """The card and the buttons; nothing is written."""
        found = await self.tokens.peek(request.match_info["token"])
        refused = self._refusal(found)
        if refused is not None:
            return await self._refused(request, found, refused)
        assert found is not None
        return await self._card_page(request, found)

    async def _card_page(
        self,
        request: web.Request,
        token: EmbedToken,
        *,
        alert: SignoffError | None = None,
        said: str | None = None,
    ) -> web.Response:
        """The request as it is now, with the buttons the person may press; `alert`, a
        refused decision (the page then has its status and tells the parent its code)."""
        now = self.site.clock.now()
        async with self.site.store.read() as tx:
            row = await tx.get_approval(token.approval_id)
        assert row is not None  # a token's request is never deleted (a foreign key holds it)
        card = card_for(self.site.directory, row, now, max_value=None)
        actor = Actor(token.principal, VIA)
        allowed: set[str] = set()
        why_not: str | None = None
        problem: SignoffError | None = alert
        if card.state == State.PENDING and not card.overdue:
            for action in ("reject", "approve"):
                try:
                    await self.site.operator.precheck(row.id, row.hash, actor, action)
                except SignoffError as error:
                    why_not = refusal_text(error, self.site.directory)
                    if action == "reject":  # no standing at all (a delegation ended since)
                        problem = problem or error
                        break
                else:
                    allowed.add(action)
            if any(v.principal == token.principal for v in row.votes):
                allowed.clear()
                why_not = "Your vote is recorded; the request waits for the other approvals."
                problem = problem or AlreadyVoted(why_not)
        elif problem is None:
            # Decided elsewhere, or its time ran out: the card says how; the parent hears why.
            problem = _closed(row.state, card.overdue)
        status = problem.http_status if problem is not None else 200
        context = {
            "card": card,
            "person": self.site.directory.name_of(token.principal),
            "allowed": allowed,
            "why_not": why_not,
            "alert": said,
            "event": "error" if problem is not None else "loaded",
            "code": problem.code if problem is not None else "",
            "max_note": MAX_NOTE,
        }
        return self._page(request, token.parent_origin, context, status=status)

    # -- deciding ---------------------------------------------------------------------------

    async def decide(self, request: web.Request) -> web.StreamResponse:
        token_text = request.match_info["token"]
        found = await self.tokens.peek(token_text)
        if request.headers.get("Sec-Fetch-Site") not in _OWN_SITE:
            # Only the frame's own form posts here: another site's form decides nothing.
            return await self._refused(request, found, _CrossSite())
        refused = self._refusal(found)
        if refused is not None:
            return await self._refused(request, found, refused)
        assert found is not None
        form = await read_form(request)
        action = (form or {}).get("action", "")
        note = (form or {}).get("note", "").strip() or None
        if form is None or action not in ("approve", "reject"):
            return await self._refused(
                request, found, InvalidRequest("This form could not be read; nothing was done.")
            )
        if form.get("approval") != found.approval_id:
            return await self._refused(request, found, EmbedOtherRequest())
        if note is not None and len(note) > MAX_NOTE:
            return await self._refused(
                request, found, InvalidRequest(f"The reason is over {MAX_NOTE} characters.")
            )
        try:
            token = await self.tokens.use(token_text)  # once, whichever replica is first
        except EmbedRefused as error:
            return await self._refused(request, found, error)
        actor = Actor(token.principal, VIA)
        shown = form.get("hash", "").strip()
        try:
            decision = await self.site.operator.decide(
                action,  # type: ignore[arg-type]
                token.approval_id,
                shown,
                actor,
                note=note if action == "reject" else None,
            )
        except SignoffError as error:
            await self.tokens.give_back(token_text)  # nothing was decided with it
            said = await self.site.conversation.recorded(
                token.approval_id, actor.label, action, error
            )
            return await self._card_page(request, token, alert=error, said=said)
        except Exception:
            log.exception("the decision of an embed on %s failed", token.approval_id)
            await self.tokens.give_back(token_text)
            return self._page(
                request,
                token.parent_origin,
                {"message": FAILED, "event": "error", "code": "internal"},
                status=500,
            )
        approval = decision.approval
        log.info(
            "approval %s: %s by %s in an embed framed by %s",
            approval.id,
            decision.event.type,
            token.principal,
            token.parent_origin,
            extra={"approval_id": approval.id, "actor": actor.label},
        )
        context = {
            "card": card_for(self.site.directory, approval, self.site.clock.now(), max_value=None),
            "person": self.site.directory.name_of(token.principal),
            "done": decision_text(approval, decision.event, self.site.directory),
            "event": "decided",
            "decision": action,
            "state": approval.state,
            "shown": shown,
        }
        return self._page(request, token.parent_origin, context)

    # -- refusals and rendering ---------------------------------------------------------------

    def _refusal(self, found: EmbedToken | None) -> EmbedRefused | None:
        refused = self.tokens.refusal(found)
        if refused is None and found is not None and found.parent_origin not in self.origins:
            # The deployment stopped allowing this origin after the token was made.
            return EmbedOriginRefused()
        return refused

    async def _refused(
        self, request: web.Request, found: EmbedToken | None, error: SignoffError
    ) -> web.Response:
        """A page saying why, with the error's status; the parent hears the code. Who may
        frame it: the token's origin while still allowed; for a token nobody knows, any
        allowed origin (only the parent that holds it can be listening)."""
        if found is None:
            parents = self.origins
        elif found.parent_origin in self.origins:
            parents = (found.parent_origin,)
        else:
            parents = ()
        message = error.message
        context = {"message": message, "event": "error", "code": error.code}
        return self._page(request, parents, context, status=error.http_status)

    def _page(
        self,
        request: web.Request,
        parents: str | tuple[str, ...],
        context: dict[str, Any],
        *,
        status: int = 200,
    ) -> web.Response:
        parents = (parents,) if isinstance(parents, str) else parents
        response = aiohttp_jinja2.render_template(
            "embed.html",
            request,
            {"static": STATIC, "parents": json.dumps(list(parents)), **context},
            status=status,
        )
        ancestors = " ".join(parents) if parents else "'none'"
        response.headers.update(
            {
                # The token is in the address: keep it out of caches, indexes and Referer.
                "Cache-Control": "no-store",
                "Referrer-Policy": "no-referrer",
                "X-Robots-Tag": "noindex",
                "X-Content-Type-Options": "nosniff",
                "Content-Security-Policy": (
                    "default-src 'self'; img-src 'self' data:; style-src 'self'; "
                    "script-src 'self'; form-action 'self'; base-uri 'none'; "
                    f"frame-ancestors {ancestors}"
                ),
            }
        )
        return response


class _CrossSite(SignoffError):
    """This form was sent from a page on another site, so nothing was done."""

    code = "cross_site"
    http_status = 403


def _closed(state: str, overdue: bool) -> SignoffError:
    """Why a request the page shows cannot be decided any more, as the parent hears it."""
    if overdue or state == State.EXPIRED:
        return ApprovalExpired("this request's time ran out", state=State.EXPIRED.value)
    return NotPending(state=state)
