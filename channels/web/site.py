"""What every page of the web surface needs, shared by the channel (channels/web/channel.py)
and its pages (inbox.py, edits.py, dashboard.py, grant_list.py): the core services, who is
signed in (`Visitor`), the CSRF-checked form, rendering a page, a refusal in words, and
reading a form. The pages take a `Site` (the channel is one) and never import the channel.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

import aiohttp_jinja2
from aiohttp import web

from bot.clock import Clock
from bot.delegations import Delegations
from bot.durations import parse_duration
from bot.errors import ConfigError
from bot.operator import Operator
from bot.routing import Directory, Principal
from bot.signin import SignInLinks
from channels.conversation import Conversation, Surface, credentials
from channels.web.config import WebConfig
from channels.web.session import MIN_SECRET, Session, Sessions
from store.repository import Store

log = logging.getLogger("signoff.web")

SURFACE = Surface(name="web", title="web", command_prefix="", quote_ids=True, backticks=False)
STATIC = "/web/static"
INBOX = "/web/inbox"


def web_secret(config: WebConfig, environ: Mapping[str, str] = os.environ) -> str:
    """The cookie-signing key; ConfigError at startup if it is unset or short."""
    [secret] = credentials("web", [config.secret_env], "the key that signs sessions", environ)
    if len(secret) < MIN_SECRET:
        raise ConfigError(
            f"${config.secret_env} is {len(secret)} characters; the key that signs web "
            f"sessions needs {MIN_SECRET} or more (e.g. `python -c 'import secrets; "
            "print(secrets.token_urlsafe(32))'`)"
        )
    return secret


@dataclass(frozen=True, slots=True)
class Visitor:
    """Who is signed in on this request."""

    session: Session
    principal: Principal


class Site:
    """The services and page helpers of the web surface (see the module docstring)."""

    def __init__(
        self,
        config: WebConfig,
        public_url: str,
        store: Store,
        directory: Directory,
        clock: Clock,
        operator: Operator,
        delegations: Delegations,
        *,
        environ: Mapping[str, str] = os.environ,
    ) -> None:
        self.config = config
        self.public_url = public_url.rstrip("/")
        self.store = store
        self.directory = directory
        self.clock = clock
        self.operator = operator
        self.delegations = delegations
        self.conversation = Conversation(SURFACE, directory, operator, delegations)
        self.links = SignInLinks(store, directory, clock, parse_duration(config.link_ttl))
        self.sessions = Sessions(
            web_secret(config, environ),
            parse_duration(config.session_idle),
            clock,
            secure=self.public_url.startswith("https://"),
        )

    def approval_url(self, approval_id: str) -> str:
        """The approval's page, for the "Open in browser" link on chat cards."""
        return f"{self.public_url}/web/approvals/{approval_id}"

    async def visitor(self, request: web.Request) -> Visitor | web.Response:
        """Who is signed in, or the page saying how to sign in (401). A session the OpenID
        provider opened with its operator claim makes the person an operator here."""
        session = self.sessions.read(request)
        principal = self.directory.principals.get(session.principal) if session else None
        if session is None or principal is None:
            context = {"here": request.path}  # where the provider's sign-in comes back to
            return self.page(request, None, "sign_in.html", context, status=401, keep=False)
        if session.operator and not principal.operator:
            principal = dataclasses.replace(principal, operator=True)
        return Visitor(session, principal)

    async def form(self, request: web.Request) -> tuple[Visitor, Mapping[str, str]] | web.Response:
        """A POSTed form from a signed-in visitor whose CSRF token is right; else the refusal
        page (a form without the token changes nothing)."""
        visitor = await self.visitor(request)
        if isinstance(visitor, web.Response):
            return visitor
        data = await read_form(request)
        if data is None:
            return self.refusal(request, visitor, 400, FORM_UNREADABLE)
        if not self.sessions.csrf_ok(visitor.session, data.get("csrf")):
            log.warning(
                "web form without a valid CSRF token from %s: %s",
                visitor.principal.key,
                request.path,
            )
            return self.refusal(request, visitor, 403, CSRF_REFUSED)
        return visitor, data

    def page(
        self,
        request: web.Request,
        visitor: Visitor | None,
        template: str,
        context: Mapping[str, Any],
        *,
        status: int = 200,
        keep: bool = True,
    ) -> web.Response:
        """Render a page; a signed-in visitor's session is signed again (idle timeout)."""
        response = aiohttp_jinja2.render_template(
            template,
            request,
            {
                "visitor": visitor,
                "csrf": visitor.session.csrf if visitor else "",
                "static": STATIC,
                **context,
            },
            status=status,
        )
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Content-Security-Policy"] = (
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
            "form-action 'self'; frame-ancestors 'none'"
        )
        if visitor is not None and keep:
            self.sessions.keep(response, visitor.session)
        return response

    def refusal(
        self,
        request: web.Request,
        visitor: Visitor | None,
        status: int,
        message: str,
        *,
        title: str = "Not done",
    ) -> web.Response:
        """A page that says in words what was refused and why; nothing changed."""
        return self.page(
            request, visitor, "refusal.html", {"title": title, "message": message}, status=status
        )


CSRF_REFUSED = (
    "This form did not come from a signoff page you have open (its security token is missing "
    "or wrong), so nothing was done. Reload the page and try again."
)


FORM_UNREADABLE = (
    "This form could not be read (it is not the UTF-8 form a signoff page sends), so nothing "
    "was done. Reload the page and try again."
)
_FORM = "application/x-www-form-urlencoded"
_MAX_FIELDS = 120  # a handful, or the inbox's bulk form: a page of 50 picks and its own fields


async def read_form(request: web.Request) -> dict[str, str] | None:
    """The URL-encoded form a signoff page POSTs (the last value of each field), or None for
    anything else: another content type, a charset other than UTF-8, bytes that are not UTF-8
    once percent-decoded. aiohttp's own reader trusts the declared charset, so a made-up one
    raised LookupError (a 500) and UTF-7 or UTF-16 read a form no page of ours sends."""
    body = await request.read()  # the app's client_max_size bounds it
    if not body:
        return {}
    charset = (request.charset or "utf-8").lower()
    if request.content_type != _FORM or charset not in ("utf-8", "utf8"):
        return None
    try:
        pairs = parse_qsl(
            body.decode("utf-8"),
            keep_blank_values=True,
            encoding="utf-8",
            errors="strict",
            max_num_fields=_MAX_FIELDS,
        )
    except ValueError:  # UnicodeDecodeError included
        return None
    return dict(pairs)


def see_other(location: str) -> web.Response:
    """A 303 to `location` (returned, not raised, so the session cookie can ride on it)."""
    return web.Response(status=303, headers={"Location": location})
