"""The pages a mailed card's links open: `GET /email/links/{token}` shows the card and asks
for a confirmation, and only `POST` to the same address decides.

Mail scanners and link previews follow GETs, so a GET never decides, never uses the link
and writes nothing (not even a refusal). The POST uses the link (once, before the deadline:
bot/email_links.py) and decides through the shared conversation layer and the
Operator, as the principal the mail was sent to, so a refusal is recorded and worded as on
every surface. A browser signed in to the web surface as someone else is refused: the link
is not theirs to use.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from aiohttp import web

from bot.card import Card, card_for
from bot.email_links import LINK_PATH, Link
from bot.errors import SignoffError
from bot.operator import Actor
from channels.conversation import FAILED, Conversation, refusal_text
from channels.email import card as email_card

if TYPE_CHECKING:
    from bot.clock import Clock
    from bot.email_links import DecisionLinks
    from bot.routing import Directory
    from channels.web.site import Site as WebSite
    from store.repository import Store

log = logging.getLogger("signoff.email")

# The longest reason a reject page takes (the form says so too).
MAX_REASON = 2000
_HEADERS = {
    # The token is in the address: keep it out of caches, search engines and Referer.
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Robots-Tag": "noindex",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
}
# What a browser says of a POST from our own page (or typed in); any other site's is refused.
_OWN_SITE = (None, "same-origin", "none")


def add_routes(app: web.Application, pages: Pages) -> None:
    app.router.add_get(LINK_PATH + "{token}", pages.show)
    app.router.add_post(LINK_PATH + "{token}", pages.decide)


class Pages:
    """The link pages of one email channel, from what they read: its decision links, its
    conversation (and through it the Operator), the store, directory and clock, and the web
    surface if there is one (its sessions, and the approval's page)."""

    def __init__(
        self,
        links: DecisionLinks,
        conversation: Conversation,
        store: Store,
        directory: Directory,
        clock: Clock,
        web: WebSite | None,
    ) -> None:
        self.links = links
        self.conversation = conversation
        self.operator = conversation.operator
        self.store = store
        self.directory = directory
        self.clock = clock
        self.web = web

    async def show(self, request: web.Request) -> web.Response:
        """The card and the confirmation; nothing is written."""
        token = request.match_info["token"]
        link = await self.links.peek(token)
        refused = self._unusable(link) or self._not_theirs(request, link)
        if refused is not None:
            return await self._page(link, refused[1], status=refused[0])
        assert link is not None
        try:
            await self.operator.precheck(
                link.approval_id, link.shown_hash, self._actor(link), link.action
            )
        except SignoffError as error:
            return await self._page(link, refusal_text(error, self.directory), 409)
        return await self._page(link, None, 200, confirm=True)

    async def decide(self, request: web.Request) -> web.Response:
        token = request.match_info["token"]
        link = await self.links.peek(token)
        if request.headers.get("Sec-Fetch-Site") not in _OWN_SITE:
            # Only our confirmation page posts here: another site's form decides nothing.
            return await self._page(link, "This form was sent from another site.", 403)
        refused = self._not_theirs(request, link)
        if refused is not None:
            return await self._page(link, refused[1], status=refused[0])
        form = await request.post()
        reason = str(form.get("reason") or "").strip() or None
        if reason is not None and len(reason) > MAX_REASON:
            return await self._page(
                link, f"The reason is longer than {MAX_REASON} characters; shorten it.", 400
            )
        used = await self.links.use(token)
        if used is None:
            # Someone (another tab, another replica) used it first, or it is past its time.
            fresh = await self.links.peek(token)
            why = self._unusable(fresh) or (410, _USED)
            return await self._page(fresh, why[1], status=why[0])
        told: list[str] = []

        async def tell(text: str, *, firmly: bool = False) -> None:
            told.append(text)

        try:
            done = await self.conversation.decide(
                used.action,
                used.approval_id,
                used.shown_hash,
                self._actor(used),
                tell,
                note=reason if used.action == "reject" else None,
            )
        except Exception:
            # Nothing was decided: the link is not spent.
            log.exception("the decision of an email link on %s failed", used.approval_id)
            await self.links.give_back(token)
            return await self._page(used, FAILED, 500)
        if done is None:
            return await self._page(used, " ".join(told), 409)
        return await self._page(used, done, 200, decided=True)

    def _actor(self, link: Link) -> Actor:
        return Actor(link.principal, "email")

    def _unusable(self, link: Link | None) -> tuple[int, str] | None:
        """Why this link cannot decide whatever the request's state; None if it still can."""
        if link is None:
            return 404, "This link is not valid. Use the links of the latest mail about it."
        if link.used_at is not None:
            return 410, _USED
        if link.expires_at <= self.clock.now():
            return 410, "This link has expired: the request's time ran out."
        return None

    def _not_theirs(self, request: web.Request, link: Link | None) -> tuple[int, str] | None:
        """A browser signed in to the web as another principal is not the mail's addressee."""
        web_channel = self.web
        if link is None or web_channel is None:
            return None
        session = web_channel.sessions.read(request)
        if session is None or session.principal == link.principal:
            return None
        return 403, (
            f"This link was mailed to {self.directory.name_of(link.principal)}, but "
            f"this browser is signed in as {self.directory.name_of(session.principal)}"
            "; it cannot decide for them. Nothing was decided."
        )

    async def _page(
        self,
        link: Link | None,
        message: str | None,
        status: int,
        *,
        confirm: bool = False,
        decided: bool = False,
    ) -> web.Response:
        card = await self._card(link) if link is not None else None
        body = email_card.page(
            "page.html",
            card=card,
            link=link,
            message=message,
            confirm=confirm,
            decided=decided,
            max_reason=MAX_REASON,
            page=self.web.approval_url(link.approval_id) if self.web and link else None,
        )
        return web.Response(text=body, status=status, content_type="text/html", headers=_HEADERS)

    async def _card(self, link: Link) -> Card | None:
        async with self.store.read() as tx:
            approval = await tx.get_approval(link.approval_id)
        if approval is None:
            return None
        return card_for(self.directory, approval, self.clock.now(), max_value=None)


_USED = (
    "This link was already used: each link of a mail decides once. The request as it stands "
    "is below."
)
