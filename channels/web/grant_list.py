"""The standing grants page: GET /web/grants lists the live grants a signed-in person may end
(the ones they gave; an operator sees every one), each with a Revoke button; POST
/web/grants/{id}/revoke ends one (the CSRF token is checked by Site.form). bot/grant_views
says who sees what and bot/standing.revoke judges and writes the revoke, so the page, the CLI,
the Slack App Home and Telegram's /grants agree.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web

from bot import grant_views, standing
from bot.errors import InvalidRequest, NotAnApprover, NotFound
from store.records import StandingGrant

if TYPE_CHECKING:
    from channels.web.site import Site

log = logging.getLogger("signoff.web")

GRANTS = "/web/grants"


def add_routes(app: web.Application, channel: Site) -> None:
    pages = GrantPages(channel)
    app.router.add_get(GRANTS, pages.listing)
    app.router.add_post(GRANTS + "/{id}/revoke", pages.revoke)


@dataclass(frozen=True, slots=True)
class GrantRow:
    """One grant as the page's table shows it."""

    id: str
    described: str  # bot/grant_views.describe: what it allows, by whom, until when, uses
    approval_id: str  # the approval it was given with
    yours: bool  # given by the visitor (an operator also sees everyone else's)


def _row(grant: StandingGrant, principal: str) -> GrantRow:
    return GrantRow(
        id=grant.id,
        described=grant_views.describe(grant),
        approval_id=grant.approval_id,
        yours=grant.granted_by == principal,
    )


class GrantPages:
    def __init__(self, channel: Site) -> None:
        self.channel = channel

    async def listing(self, request: web.Request) -> web.Response:
        visitor = await self.channel.visitor(request)
        if isinstance(visitor, web.Response):
            return visitor
        key = visitor.principal.key
        found = await grant_views.visible_grants(
            self.channel.store,
            self.channel.directory,
            key,
            self.channel.clock.now(),
            operator=visitor.principal.operator,  # the provider's operator claim counts too
        )
        revoked = request.query.get("revoked")
        context = {
            "grants": [_row(g, key) for g in found],
            "operator": visitor.principal.operator,
            "status": f"Standing grant {revoked} is revoked: it approves nothing from now on."
            if revoked
            else None,
        }
        return self.channel.page(request, visitor, "grants.html", context)

    async def revoke(self, request: web.Request) -> web.StreamResponse:
        posted = await self.channel.form(request)
        if isinstance(posted, web.Response):
            return posted
        visitor, _form = posted
        grant_id = request.match_info["id"]
        try:
            grant = await standing.revoke(
                self.channel.store,
                self.channel.directory,
                self.channel.clock.now(),
                grant_id,
                visitor.principal.key,
                via="web",
                operator=visitor.principal.operator,
            )
        except NotFound:
            return self.channel.refusal(
                request, visitor, 404, f"There is no standing grant {grant_id}; nothing changed."
            )
        except NotAnApprover as exc:
            return self.channel.refusal(request, visitor, 403, f"Not revoked: {exc.message}.")
        except InvalidRequest as exc:
            return self.channel.refusal(request, visitor, 409, f"Nothing changed: {exc.message}.")
        log.info(
            "standing grant %s revoked by %s from the web",
            grant.id,
            visitor.principal.key,
            extra={"principal": visitor.principal.key},
        )
        raise web.HTTPSeeOther(f"{GRANTS}?revoked={grant.id}")
