"""Browser sessions for the web surface: signed cookies, an idle timeout, CSRF tokens.

A session is opened by a sign-in link (bot/signin.py) or by the OpenID provider of
`[web.oidc]` (channels/web/oidc_pages.py) and lives only in its cookie, signed with the
`[web] secret_env` key by itsdangerous, so any replica reads it and none stores it. The
cookie carries the principal and a random session id, and for a session the provider opened,
that it did and whether its claims made the person an operator; it is signed again on every
request, and one not signed within `session_idle` is refused (the idle timeout). Every form
carries a CSRF token: an HMAC of the session id under the same key, which a page from another
site cannot know.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import timedelta

from aiohttp import web
from itsdangerous import BadData, TimestampSigner, URLSafeTimedSerializer

from bot.clock import Clock

COOKIE = "signoff_session"
MIN_SECRET = 32
# A cookie this server signed is a few hundred ASCII characters; anything longer or not ASCII
# was never ours (and itsdangerous would fail to encode one holding undecodable bytes).
_MAX_COOKIE = 4096


@dataclass(frozen=True, slots=True)
class Session:
    principal: str
    sid: str
    csrf: str
    # "link", or "oidc" for a session the OpenID provider opened (sign-out links to its end).
    via: str = "link"
    # The provider's operator claim held for this person when it opened the session.
    operator: bool = False


class _ClockSigner(TimestampSigner):
    """Timestamps from the Operator's clock, so a FakeClock drives the idle timeout."""

    clock: Clock

    def get_timestamp(self) -> int:
        return int(self.clock.now().timestamp())


def timed_serializer(secret: str, salt: str, clock: Clock) -> URLSafeTimedSerializer:
    """A serializer whose signatures carry `clock`'s time (max_age is counted by it); each
    use has a salt of its own, so one kind of cookie never reads as another."""
    signer = type("Signer", (_ClockSigner,), {"clock": clock})
    return URLSafeTimedSerializer(secret, salt=salt, signer=signer)


class Sessions:
    def __init__(self, secret: str, idle: timedelta, clock: Clock, *, secure: bool) -> None:
        self._secret = secret
        self._clock = clock
        self._serializer = self.serializer("signoff-web-session")
        self._key = hashlib.sha256(b"signoff-web-csrf:" + secret.encode()).digest()
        self.idle = idle
        self.secure = secure

    def serializer(self, salt: str) -> URLSafeTimedSerializer:
        """Another kind of signed, timed cookie under the same key (the OIDC flow's)."""
        return timed_serializer(self._secret, salt, self._clock)

    def _csrf(self, sid: str) -> str:
        return hmac.new(self._key, sid.encode(), hashlib.sha256).hexdigest()

    def open(
        self,
        response: web.StreamResponse,
        principal: str,
        *,
        via: str = "link",
        operator: bool = False,
    ) -> Session:
        """A new session for `principal`, set on `response`."""
        sid = secrets.token_urlsafe(16)
        session = Session(principal, sid, self._csrf(sid), via, operator)
        self.keep(response, session)
        return session

    def keep(self, response: web.StreamResponse, session: Session) -> None:
        """(Re)sign the cookie now: the idle timeout counts from the last request."""
        data: dict[str, object] = {"p": session.principal, "s": session.sid}
        if session.via != "link":
            data["v"] = session.via
        if session.operator:
            data["o"] = 1
        response.set_cookie(
            COOKIE,
            self._serializer.dumps(data),
            httponly=True,
            samesite="Lax",
            secure=self.secure,
            path="/",
        )

    def close(self, response: web.StreamResponse) -> None:
        response.del_cookie(COOKIE, path="/")

    def read(self, request: web.Request) -> Session | None:
        """The request's session, or None: no cookie, a forged one, or one idle too long."""
        raw = request.cookies.get(COOKIE)
        if not raw or not raw.isascii() or len(raw) > _MAX_COOKIE:
            return None
        try:
            data = self._serializer.loads(raw, max_age=int(self.idle.total_seconds()))
        except BadData:  # forged, expired, or (signed by us, so never) an unreadable payload
            return None
        if not isinstance(data, dict) or not {"p", "s"} <= data.keys():
            return None
        principal, sid = str(data["p"]), str(data["s"])
        via = "oidc" if data.get("v") == "oidc" else "link"
        return Session(principal, sid, self._csrf(sid), via, data.get("o") == 1)

    def csrf_ok(self, session: Session, offered: str | None) -> bool:
        """Whether `offered` is the session's CSRF token. Compared as bytes: compare_digest
        refuses str holding anything but ASCII, and a form field can hold anything."""
        if not offered:
            return False
        given = offered.encode("utf-8", "surrogateescape")
        return hmac.compare_digest(session.csrf.encode(), given)
