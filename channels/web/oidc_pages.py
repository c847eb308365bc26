"""The sign-in pages of `[web.oidc]`: leaving for the OpenID provider and coming back.

GET /web/oidc/login starts a sign-in (channels/web/oidc.py's `Flow`): its state, nonce, PKCE
verifier and landing page go into a cookie of their own, signed with the sessions' key, that
lives ten minutes and is sent only to /web/oidc/ (SameSite=Lax: the provider's redirect back
is a top-level GET, which carries it; a cross-site POST would not). The browser is sent to
the provider. GET /web/oidc/callback is where it comes back (the redirect URI to register):
the answer must match that cookie's flow, and its ID token verify, before a session is
opened; the flow cookie is spent either way. Every refusal is a page in words (403, or 502
when the provider could not be read), and nothing is written: neither path touches the
database.

Leaving by GET is safe: a page elsewhere can start a sign-in, but only the person at the
provider decides whom it signs in, and the state ties the answer to this browser's own start,
so nobody can sign a browser in as someone else (login CSRF).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta

from aiohttp import web
from itsdangerous import BadData

from bot.errors import SignInRefused
from channels.web.oidc import STATE_MISMATCH, Flow, OidcClient
from channels.web.site import INBOX, Site, see_other

log = logging.getLogger("signoff.web")

LOGIN = "/web/oidc/login"
CALLBACK = "/web/oidc/callback"
FLOW_COOKIE = "signoff_oidc"
FLOW_TTL = timedelta(minutes=10)
_FLOW_PATH = "/web/oidc/"
_MAX_COOKIE = 2048


class OidcPages:
    def __init__(
        self, site: Site, client: OidcClient, landing: Callable[[str | None], str | None]
    ) -> None:
        self.site = site
        self.client = client
        self.landing = landing
        self._flows = site.sessions.serializer("signoff-web-oidc-flow")

    async def login(self, request: web.Request) -> web.StreamResponse:
        """Off to the provider, with a fresh flow remembered in this browser."""
        flow = Flow.start(self.landing(request.query.get("next")))
        try:
            url = await self.client.authorization_url(flow)
        except SignInRefused as exc:
            return self.refused(request, exc)
        response = see_other(url)
        response.set_cookie(
            FLOW_COOKIE,
            self._flows.dumps([flow.state, flow.nonce, flow.verifier, flow.landing]),
            max_age=int(FLOW_TTL.total_seconds()),
            httponly=True,
            samesite="Lax",
            secure=self.site.sessions.secure,
            path=_FLOW_PATH,
        )
        return response

    async def callback(self, request: web.Request) -> web.StreamResponse:
        """Back from the provider: a session for the person its verified ID token names, or
        the page saying why not."""
        flow = self._flow(request)
        try:
            if flow is None:
                raise SignInRefused(STATE_MISMATCH, status=403)
            identity = await self.client.sign_in(flow, request.query)
        except SignInRefused as exc:
            log.warning("OIDC sign-in refused: %s", exc.message)
            response = self.refused(request, exc)
        else:
            response = see_other(flow.landing or INBOX)
            self.site.sessions.open(
                response, identity.principal, via="oidc", operator=identity.operator
            )
            log.info(
                "web session opened for %s by %s (sub %s, %s)%s",
                identity.principal,
                self.client.config.issuer,
                identity.subject,
                identity.said,
                " as an operator by its claim" if identity.operator else "",
                extra={"principal": identity.principal},
            )
        response.del_cookie(FLOW_COOKIE, path=_FLOW_PATH)  # spent, whatever happened
        return response

    def _flow(self, request: web.Request) -> Flow | None:
        """The flow this browser started, or None: none, forged, or older than FLOW_TTL."""
        raw = request.cookies.get(FLOW_COOKIE)
        if not raw or not raw.isascii() or len(raw) > _MAX_COOKIE:
            return None
        try:
            data = self._flows.loads(raw, max_age=int(FLOW_TTL.total_seconds()))
        except BadData:
            return None
        if not (isinstance(data, list) and len(data) == 4):
            return None
        state, nonce, verifier, landing = data
        return Flow(str(state), str(nonce), str(verifier), self.landing(landing))

    def refused(self, request: web.Request, refusal: SignInRefused) -> web.Response:
        status = int(refusal.details.get("status", 403))
        return self.site.page(
            request,
            None,
            "oidc_refused.html",
            {"message": refusal.message, "provider": self.client.config.name, "login": LOGIN},
            status=status,
            keep=False,
        )

    async def provider_sign_out(self) -> str | None:
        """The provider's own sign-out page, for the signed-out page to link to."""
        return await self.client.end_session_url()


def add_routes(app: web.Application, pages: OidcPages) -> None:
    app.router.add_get(LOGIN, pages.login)
    app.router.add_get(CALLBACK, pages.callback)
