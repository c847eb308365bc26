"""The web surface: an approver inbox and an operator dashboard in the browser.

A person signs in with a single-use link (bot/signin.py), or through the OpenID provider of
`[web.oidc]` (channels/web/oidc.py), and gets a signed session cookie
(channels/web/session.py). Pages are Jinja2 templates (channels/web/templates/) rendered by
aiohttp-jinja2, with the stylesheet and one small script in channels/web/static/: no CDN, no
build step. Decisions go through the shared conversation layer and the Operator like every
other surface, so a refusal reads the same here as in Slack or Telegram.

This module holds the channel, signing in and out (a used or expired link is 410 Gone, a
link may land on another of our pages with `?next=`; with `[web.oidc]`, the OpenID
provider's pages of channels/web/oidc_pages.py are registered too), the server's root (a
redirect to the inbox), and the checks every answer under /web and /dashboard gets (a
cross-site POST refused, hardening headers). What every page needs (who is signed in, the
CSRF check, rendering, refusals in words) is channels/web/site.py's. The inbox and card pages are
channels/web/inbox.py; the dashboard is channels/web/dashboard.py; the standing grants page is
channels/web/grant_list.py; each is handed the channel as its Site and never imports this
module.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode, urlsplit

import aiohttp_jinja2
import jinja2
from aiohttp import web
from markupsafe import Markup

from bot.card import Card
from bot.errors import SignInRefused
from bot.signin import LOGIN_PATH
from bot.target import Target
from bot.visible import visible
from channels.base import MessageRef
from channels.web import dashboard as web_dashboard
from channels.web import edits as web_edits
from channels.web import embed as web_embed
from channels.web import grant_list as web_grant_list
from channels.web import inbox as web_inbox
from channels.web import oidc_pages
from channels.web.oidc import OidcClient, oidc_secret
from channels.web.site import (
    CSRF_REFUSED,
    FORM_UNREADABLE,
    INBOX,
    STATIC,
    Site,
    read_form,
    see_other,
)

log = logging.getLogger("signoff.web")


class WebChannel(Site):
    """The `web` channel. As a notify target, `web` means "shown in the inbox": the inbox
    lists every pending request the person may decide, so there is nothing to post. What
    its pages share (the services, who is signed in, rendering) is its Site's."""

    name = "web"

    @functools.cached_property
    def public_origin(self) -> str:
        """The origin a same-site form comes from (the cross-site guard's reference)."""
        return _origin_of(self.public_url)

    # -- the Channel protocol: nothing to post, the inbox shows it ----------------------------

    async def post_card(self, card: Card, target: Target) -> MessageRef:
        return MessageRef("web", "inbox", card.approval_id)

    async def update_card(self, ref: MessageRef, card: Card) -> None:
        return None

    async def send_notice(self, target: Target, text: str) -> None:
        return None

    async def send_reply(self, ref: MessageRef, text: str) -> None:
        return None

    # -- wiring -------------------------------------------------------------------------------

    async def start(self) -> None:
        return None  # nothing held between requests

    async def stop(self) -> None:
        if self.oidc is not None:
            await self.oidc.client.close()

    @functools.cached_property
    def oidc(self) -> oidc_pages.OidcPages | None:
        """The OpenID provider's sign-in pages, when `[web.oidc]` is configured."""
        if self.config.oidc is None:
            return None
        client = OidcClient(
            self.config.oidc,
            oidc_secret(self.config.oidc),
            self.public_url + oidc_pages.CALLBACK,
            self.directory,
            self.clock,
        )
        return oidc_pages.OidcPages(self, client, _landing)

    def add_routes(self, app: web.Application) -> None:
        aiohttp_jinja2.setup(
            app,
            loader=jinja2.PackageLoader("channels.web", "templates"),
            autoescape=jinja2.select_autoescape(default=True),
            undefined=jinja2.StrictUndefined,
            # Whatever a template prints passes here: text with invisible or reordering
            # characters (a title, an argument, an audit event's data) shows them as escapes.
            finalize=_shown,
        )
        app.middlewares.append(self.guard)
        app.on_response_prepare.append(_harden)
        app.router.add_static(STATIC, os.path.join(os.path.dirname(__file__), "static"))
        app.router.add_get(LOGIN_PATH + "{token}", self.login_page)
        app.router.add_post(LOGIN_PATH + "{token}", self.login)
        app.router.add_post("/web/logout", self.logout)
        # The sign-in page offers the provider when there is one (sign_in.html).
        env = aiohttp_jinja2.get_env(app)
        env.globals["oidc_name"] = self.config.oidc.name if self.config.oidc else None
        env.globals["oidc_login"] = oidc_pages.LOGIN
        if self.oidc is not None:
            oidc_pages.add_routes(app, self.oidc)
        app.router.add_get("/web", self.home)
        app.router.add_get("/web/", self.home)
        # The server's root, printed first by `signoff demo`: a browser goes to the inbox
        # (bot/app.py serves a page naming the API and health paths when no surface claims it).
        app.router.add_get("/", self.home)
        web_inbox.add_routes(app, self)
        web_edits.add_routes(app, self)
        web_dashboard.add_routes(app, self)
        web_grant_list.add_routes(app, self)
        web_embed.add_routes(app, self)

    # -- what every request under /web and /dashboard gets -----------------------------------

    @web.middleware
    async def guard(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """Refuse a cross-site POST under /web or /dashboard before its handler reads
        anything: the sign-in POST included, or a page elsewhere could sign a browser in as
        whoever its link belongs to."""
        if request.method not in _SAFE_METHODS and _web_path(request.path):
            problem = cross_site(request, self.public_origin)
            if problem is not None:
                log.warning("cross-site %s %s refused: %s", request.method, request.path, problem)
                return self.refusal(request, None, 403, CROSS_SITE, title="Refused")
        return await handler(request)

    # -- signing in and out -------------------------------------------------------------------

    async def login_page(self, request: web.Request) -> web.StreamResponse:
        """Opening a link only shows a Continue button: link previews and mail scanners fetch
        links with GET, and must not use up a single-use link before the person clicks. A
        small script presses it for a browser with JavaScript on. A link that can no longer
        open a session is refused at once, with the status the POST would answer."""
        token = request.match_info["token"]
        refused = await self.links.refusal(token)
        if refused is not None:
            return self.sign_in_refused(request, refused)
        landing = _landing(request.query.get("next"))
        action = LOGIN_PATH + token + (f"?{urlencode({'next': landing})}" if landing else "")
        where = "the dashboard" if landing and landing.startswith("/dashboard") else "your inbox"
        context = {"action": action, "where": where}
        return self.page(request, None, "sign_in_continue.html", context, keep=False)

    async def login(self, request: web.Request) -> web.StreamResponse:
        try:
            principal = await self.links.use(request.match_info["token"])
        except SignInRefused as exc:
            return self.sign_in_refused(request, exc)
        response = see_other(_landing(request.query.get("next")) or INBOX)
        self.sessions.open(response, principal)
        log.info("web session opened for %s", principal, extra={"principal": principal})
        return response

    def sign_in_refused(self, request: web.Request, refused: SignInRefused) -> web.Response:
        """410 Gone for a real link used up or expired (asking again cannot work), 403 for
        one never issued or whose principal is gone."""
        status = 410 if refused.details.get("gone") else 403
        return self.refusal(request, None, status, refused.message, title="Sign-in refused")

    async def logout(self, request: web.Request) -> web.StreamResponse:
        visitor = await self.visitor(request)
        if isinstance(visitor, web.StreamResponse):
            return visitor
        form = await read_form(request)
        if form is None:
            return self.refusal(request, visitor, 400, FORM_UNREADABLE)
        if not self.sessions.csrf_ok(visitor.session, form.get("csrf")):
            return self.refusal(request, visitor, 403, CSRF_REFUSED)
        # A session the provider opened ends here; the provider's own session (its single
        # sign-on) is the provider's to end, so the page links to its sign-out when it has one.
        provider_sign_out = None
        if visitor.session.via == "oidc" and self.oidc is not None:
            provider_sign_out = await self.oidc.provider_sign_out()
        context = {"provider_sign_out": provider_sign_out}
        response = self.page(request, None, "signed_out.html", context, keep=False)
        self.sessions.close(response)
        return response

    async def home(self, request: web.Request) -> web.StreamResponse:
        return see_other(INBOX)


CROSS_SITE = (
    "This form was sent from a page on another site, so nothing was done. signoff takes forms "
    "only from its own pages; open signoff yourself (or the sign-in link you were sent) and "
    "try again there."
)
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# What a browser says of a request its user started from our own page, or from nowhere (a
# bookmark, the address bar). "same-site" is refused too: a sibling subdomain is another
# party.
_OWN_SITE = frozenset({"same-origin", "none"})


def _shown(value: Any) -> Any:
    """A value as a page prints it: strings through bot.visible (its escapes hold no markup,
    so Markup stays safe), anything else as it is."""
    if isinstance(value, Markup):
        return Markup(visible(str(value)))
    return visible(value) if isinstance(value, str) else value


# Where a sign-in link may land instead of the inbox (`?next=/dashboard`, as the demo prints
# the operator's link): a page of ours, never another site (an open redirect).
_LANDING = re.compile(r"/(web|dashboard)(/(?!\.\.?(/|$))[A-Za-z0-9._~-]+)*/?")


def _landing(wanted: str | None) -> str | None:
    return wanted if wanted and _LANDING.fullmatch(wanted) else None


def _web_path(path: str) -> bool:
    return path in ("/web", "/dashboard") or path.startswith(("/web/", "/dashboard/"))


def _origin_of(url: str) -> str:
    """scheme://host[:port] of a URL, lower-cased, the default port left out, as browsers
    write the Origin header."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # not a URL at all (an Origin header can hold anything)
        return ""
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    default = {"http": 80, "https": 443}.get(scheme)
    return f"{scheme}://{host}" + (f":{port}" if port is not None and port != default else "")


def cross_site(request: web.Request, public_origin: str) -> str | None:
    """Why a state-changing request did not come from one of our own pages, or None.

    A browser says where a POST comes from, and a page on another site can forge neither
    header. `Sec-Fetch-Site` (every current browser) decides when present: `same-origin` or
    `none` passes, anything else is refused. It must decide: our own pages send
    `Referrer-Policy: no-referrer`, under which a browser writes `Origin: null` even on a POST
    to the same origin. Without it, `Origin` must be ours: the configured public URL's, or the
    origin of the Host the request was sent to (a deployment reached under another name, or a
    proxy that passes Host on); `null` is refused (an older browser without Sec-Fetch-Site
    cannot tell our pages' null from another site's). A request with neither header did not
    come from a browser's form on another site (every current browser sends Origin on a
    cross-site POST): a program such as curl, judged by what it carries (the session cookie
    and CSRF token, or the sign-in link).
    """
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None:
        return None if site.lower() in _OWN_SITE else f"Sec-Fetch-Site is {site[:40]!r}"
    origin = request.headers.get("Origin")
    if origin is None:
        return None
    host = request.headers.get("Host", "").lower()
    ours = {public_origin, f"http://{host}", f"https://{host}"} if host else {public_origin}
    if origin.lower() not in ours and _origin_of(origin) not in ours:
        return f"Origin is {origin[:80]!r}"
    return None


async def _harden(request: web.Request, response: web.StreamResponse) -> None:
    """Headers every answer under /web and /dashboard carries, error pages and static files
    included (set as the response is sent, whoever made it): no guessing a content type from
    the bytes, and no Referer leaving with a URL (a sign-in link is one until it is used)."""
    if _web_path(request.path):
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
