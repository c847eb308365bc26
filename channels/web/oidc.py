"""Signing in through an OpenID provider (`[web.oidc]`): the protocol, apart from the pages
(channels/web/oidc_pages.py).

The authorization code flow with PKCE (S256): the browser leaves with a fresh `state`,
`nonce` and code challenge (a `Flow`, which the pages keep in a signed cookie) and comes back
with a code, which this client exchanges at the token endpoint with the client secret. The ID
token is verified with joserfc against the provider's published keys (JWKS): its signature
(asymmetric algorithms only: never `none`, never a MAC keyed with our own secret), `iss`,
`aud` (and `azp`), `exp`, `iat` and the flow's `nonce`. The provider is found by OpenID
Connect Discovery (`/.well-known/openid-configuration`), read with aiohttp's client and kept
for an hour; the keys are read again when a token names a key id we do not have (rotation),
at most once a minute.

The verified claims name a person of the directory: `person_claim` (`email` by default,
matched to the principals' `email`; any other claim to a principal's key). Someone the
directory does not know is refused, and nothing is written: signing in this way stores
nothing, the session lives in its cookie (channels/web/session.py).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote_plus, urlencode, urlsplit

import aiohttp
from joserfc import jws, jwt
from joserfc.errors import (
    BadSignatureError,
    ExpiredTokenError,
    InvalidClaimError,
    JoseError,
    MissingClaimError,
)
from joserfc.jwk import KeySet

from bot.clock import Clock
from bot.errors import SignInRefused
from bot.routing import Directory
from channels.conversation import credentials
from channels.web.config import OidcConfig

log = logging.getLogger("signoff.web")

DISCOVERY = "/.well-known/openid-configuration"
# Signatures only a holder of the provider's private key can make. HS256 and its kin are left
# out on purpose: keyed with the client secret, they would let anyone holding that secret
# (every replica, a leaked config) mint ID tokens.
ALGORITHMS = (
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA",
)  # fmt: skip
LEEWAY = 60  # seconds of difference allowed between our clock and the provider's
_METADATA_TTL = timedelta(hours=1)
_KEYS_REFRESH = timedelta(minutes=1)
_TIMEOUT = aiohttp.ClientTimeout(total=10)
_MAX_DOCUMENT = 512 * 1024  # a discovery document, key set or token answer is a few KB


@dataclass(frozen=True, slots=True)
class Flow:
    """One sign-in between leaving for the provider and coming back: what the callback must
    match (state), what the ID token must carry (nonce), the PKCE verifier, and where to land."""

    state: str
    nonce: str
    verifier: str
    landing: str | None = None

    @classmethod
    def start(cls, landing: str | None) -> Flow:
        return cls(
            secrets.token_urlsafe(32),
            secrets.token_urlsafe(32),
            secrets.token_urlsafe(48),  # 64 characters: RFC 7636 asks for 43 to 128
            landing,
        )

    @property
    def challenge(self) -> str:
        """The S256 code challenge (RFC 7636): base64url of the verifier's SHA-256."""
        digest = hashlib.sha256(self.verifier.encode("ascii")).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


@dataclass(frozen=True, slots=True)
class Metadata:
    """What discovery says of the provider, as far as signing in needs it."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    userinfo_endpoint: str | None
    end_session_endpoint: str | None
    algorithms: tuple[str, ...]
    basic_auth: bool  # client_secret_basic offered (else client_secret_post)


@dataclass(frozen=True, slots=True)
class Identity:
    """Who the provider vouched for, as this signoff knows them."""

    principal: str
    operator: bool  # the operator claim held (the directory's `operator` is read apart)
    subject: str  # the provider's `sub`, for the log
    said: str  # the person claim's value, for the log


def oidc_secret(config: OidcConfig, environ: Mapping[str, str] = os.environ) -> str:
    """The client secret; ConfigError at startup when its variable is unset."""
    [secret] = credentials(
        "web.oidc", [config.client_secret_env], "the OpenID client's secret", environ
    )
    return secret


def refused(message: str, status: int = 403) -> SignInRefused:
    """A refusal the sign-in pages show in words; `status` 502 when the provider failed."""
    return SignInRefused(message, status=status)


class OidcClient:
    """The provider as signoff talks to it: discovery, the authorization URL, the code
    exchange, the ID token's verification and the person it names."""

    def __init__(
        self,
        config: OidcConfig,
        client_secret: str,
        redirect_uri: str,
        directory: Directory,
        clock: Clock,
    ) -> None:
        self.config = config
        self.redirect_uri = redirect_uri
        self.directory = directory
        self.clock = clock
        self._secret = client_secret
        self._http: aiohttp.ClientSession | None = None
        self._metadata: tuple[datetime, Metadata] | None = None
        self._keys: tuple[datetime, KeySet] | None = None

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    # -- talking to the provider --------------------------------------------------------------

    def _client(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(timeout=_TIMEOUT)
        return self._http

    async def _json(self, method: str, url: str, what: str, **kwargs: Any) -> dict[str, Any]:
        """A JSON object from the provider; a refusal (502) naming `what` failed, and why."""
        try:
            async with self._client().request(method, url, **kwargs) as response:
                body = await response.content.read(_MAX_DOCUMENT + 1)
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise self._unreachable(what, f"{type(exc).__name__}: {exc}") from exc
        try:
            data = json.loads(body) if len(body) <= _MAX_DOCUMENT else None
        except ValueError:
            data = None
        if status >= 400 and isinstance(data, dict) and "error" in data:
            # The token endpoint's own refusal (RFC 6749 5.2): a used or expired code.
            detail = str(data.get("error_description") or data["error"])[:300]
            raise refused(
                f"{self.config.name} did not accept this sign-in ({detail}), so no session "
                "was opened. Start again from the sign-in page."
            )
        if status >= 400 or not isinstance(data, dict):
            raise self._unreachable(what, f"HTTP {status}, not a JSON object")
        return data

    def _unreachable(self, what: str, why: str) -> SignInRefused:
        log.warning("OIDC: %s from %s failed: %s", what, self.config.issuer, why)
        return refused(
            f"signoff could not read {what} from {self.config.name} ({self.config.issuer}): "
            f"{why}. No session was opened; try again in a minute, or sign in with a link.",
            status=502,
        )

    async def metadata(self) -> Metadata:
        """The provider's discovery document, read at most once an hour."""
        now = self.clock.now()
        if self._metadata is not None and now - self._metadata[0] < _METADATA_TTL:
            return self._metadata[1]
        url = self.config.issuer.rstrip("/") + DISCOVERY
        doc = await self._json("GET", url, "the discovery document")
        metadata = self._checked(doc)
        self._metadata = (now, metadata)
        return metadata

    def _checked(self, doc: Mapping[str, Any]) -> Metadata:
        if doc.get("issuer") != self.config.issuer:
            # OpenID Connect Discovery 1.0, 4.3: they must be identical, or an attacker's
            # document could point at its own keys.
            raise self._unreachable(
                "the discovery document",
                f"it names the issuer {str(doc.get('issuer'))[:200]!r}, not "
                f"{self.config.issuer!r} as configured",
            )
        endpoints = {}
        for key in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
            endpoints[key] = self._url(doc.get(key), key)
        optional = {
            key: self._url(doc[key], key) if doc.get(key) else None
            for key in ("userinfo_endpoint", "end_session_endpoint")
        }
        offered = doc.get("id_token_signing_alg_values_supported") or ["RS256"]
        algorithms = tuple(a for a in ALGORITHMS if a in offered)
        if not algorithms:
            raise self._unreachable(
                "the discovery document",
                f"it signs ID tokens only with {offered!r}, none of {', '.join(ALGORITHMS)}",
            )
        methods = doc.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
        return Metadata(
            issuer=self.config.issuer,
            authorization_endpoint=endpoints["authorization_endpoint"],
            token_endpoint=endpoints["token_endpoint"],
            jwks_uri=endpoints["jwks_uri"],
            userinfo_endpoint=optional["userinfo_endpoint"],
            end_session_endpoint=optional["end_session_endpoint"],
            algorithms=algorithms,
            basic_auth="client_secret_basic" in methods or "client_secret_post" not in methods,
        )

    def _url(self, value: Any, key: str) -> str:
        """An endpoint: https when the issuer is (a token must not travel in the clear)."""
        if not isinstance(value, str):
            raise self._unreachable("the discovery document", f"{key} is missing")
        scheme = urlsplit(value).scheme
        if scheme not in ("http", "https") or (
            scheme == "http" and urlsplit(self.config.issuer).scheme == "https"
        ):
            raise self._unreachable("the discovery document", f"{key} is not https: {value!r}")
        return value

    async def _key_set(self, metadata: Metadata, kid: str | None) -> KeySet:
        """The provider's keys; read again when the token's key id is not among them."""
        now = self.clock.now()
        if self._keys is not None:
            read_at, keys = self._keys
            known = kid is None or any(k.kid == kid for k in keys.keys)
            if known or now - read_at < _KEYS_REFRESH:
                return keys
        doc = await self._json("GET", metadata.jwks_uri, "the signing keys (JWKS)")
        try:
            keys = KeySet.import_key_set(doc)  # type: ignore[arg-type]
        except (JoseError, ValueError, TypeError, KeyError) as exc:
            raise self._unreachable("the signing keys (JWKS)", str(exc)) from exc
        self._keys = (now, keys)
        return keys

    # -- the flow -----------------------------------------------------------------------------

    async def authorization_url(self, flow: Flow) -> str:
        """Where the browser goes to sign in at the provider."""
        metadata = await self.metadata()
        query = urlencode(
            {
                "response_type": "code",
                "client_id": self.config.client_id,
                "redirect_uri": self.redirect_uri,
                "scope": " ".join(self.config.scopes),
                "state": flow.state,
                "nonce": flow.nonce,
                "code_challenge": flow.challenge,
                "code_challenge_method": "S256",
            }
        )
        sep = "&" if urlsplit(metadata.authorization_endpoint).query else "?"
        return metadata.authorization_endpoint + sep + query

    async def end_session_url(self) -> str | None:
        """The provider's sign-out page for this client, if it offers one (RP-initiated
        logout); None when it does not or cannot be read now."""
        try:
            metadata = await self.metadata()
        except SignInRefused:
            return None
        if metadata.end_session_endpoint is None:
            return None
        sep = "&" if urlsplit(metadata.end_session_endpoint).query else "?"
        return metadata.end_session_endpoint + sep + urlencode({"client_id": self.config.client_id})

    async def sign_in(self, flow: Flow, query: Mapping[str, str]) -> Identity:
        """The person the provider's answer (the callback's query) vouches for; a refusal
        saying why not. Checks, in order: the provider's own error, `state`, `iss` (RFC
        9207, when sent), then the code exchanged and its ID token verified."""
        if "error" in query:
            detail = (query.get("error_description") or query["error"])[:300]
            raise refused(
                f"{self.config.name} did not sign you in ({detail}), so no session was opened."
            )
        if not hmac.compare_digest(
            query.get("state", "").encode("utf-8", "surrogateescape"), flow.state.encode()
        ):
            raise refused(STATE_MISMATCH)
        metadata = await self.metadata()
        if "iss" in query and query["iss"] != metadata.issuer:
            raise refused(
                f"This answer says it comes from {query['iss'][:200]!r}, not from "
                f"{metadata.issuer}, so no session was opened."
            )
        code = query.get("code")
        if not code:
            raise refused("The provider's answer holds no authorization code; start again.")
        tokens = await self._exchange(metadata, code, flow)
        id_token = tokens.get("id_token")
        if not isinstance(id_token, str):
            raise refused(f"{self.config.name} sent no ID token, so no session was opened.")
        claims = await self._verified(metadata, id_token, flow)
        claims = await self._with_userinfo(metadata, claims, tokens.get("access_token"))
        return self._identity(claims)

    async def _exchange(self, metadata: Metadata, code: str, flow: Flow) -> dict[str, Any]:
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self.redirect_uri,
            "code_verifier": flow.verifier,
        }
        headers = {"Accept": "application/json"}
        if metadata.basic_auth:  # RFC 6749 2.3.1: each part form-encoded first
            pair = f"{quote_plus(self.config.client_id)}:{quote_plus(self._secret)}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        else:
            form |= {"client_id": self.config.client_id, "client_secret": self._secret}
        return await self._json(
            "POST", metadata.token_endpoint, "the tokens", data=form, headers=headers
        )

    async def _verified(self, metadata: Metadata, id_token: str, flow: Flow) -> dict[str, Any]:
        """The ID token's claims, once its signature, issuer, audience, times and nonce hold."""
        try:
            header = jws.extract_compact(id_token.encode("ascii")).protected
        except (JoseError, ValueError, UnicodeError) as exc:
            raise refused(f"The ID token is not a signed token ({exc}).") from exc
        keys = await self._key_set(metadata, header.get("kid"))
        name = self.config.name
        try:
            token = jwt.decode(id_token, keys, algorithms=list(metadata.algorithms))
        except BadSignatureError as exc:
            raise refused(
                f"The ID token's signature is not one of {name}'s keys ({metadata.jwks_uri}), "
                "so no session was opened."
            ) from exc
        except (JoseError, ValueError) as exc:
            raise refused(f"The ID token could not be read ({exc}).") from exc
        registry = jwt.JWTClaimsRegistry(
            now=int(self.clock.now().timestamp()),
            leeway=LEEWAY,
            iss={"essential": True, "value": metadata.issuer},
            aud={"essential": True, "value": self.config.client_id},
            sub={"essential": True},
            exp={"essential": True},
            iat={"essential": True},
            nonce={"essential": True, "value": flow.nonce},
        )
        claims = dict(token.claims)
        try:
            registry.validate(claims)
        except ExpiredTokenError as exc:
            raise refused(
                f"The ID token from {name} has expired, so no session was opened. Start "
                "again from the sign-in page (if this repeats, the clocks of signoff and the "
                "provider differ)."
            ) from exc
        except (InvalidClaimError, MissingClaimError) as exc:
            raise refused(self._claim_refusal(getattr(exc, "claim", ""), claims)) from exc
        except JoseError as exc:
            raise refused(f"The ID token could not be verified ({exc}).") from exc
        audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        azp = claims.get("azp")
        if (len(audiences) > 1 or azp is not None) and azp != self.config.client_id:
            raise refused(self._claim_refusal("azp", claims))
        return claims

    def _claim_refusal(self, claim: str, claims: Mapping[str, Any]) -> str:
        said = str(claims.get(claim))[:200]
        words = {
            "iss": f"was issued by {said!r}, not by {self.config.issuer}",
            "aud": f"was made for {said!r}, not for this signoff ({self.config.client_id})",
            "azp": f"was made for {said!r}, not for this signoff ({self.config.client_id})",
            "nonce": "was not made for this sign-in (its nonce is not the one signoff sent)",
            "iat": "says it was issued in the future",
            "nbf": "is not valid yet",
        }.get(claim, f"has a missing or wrong {claim!r} claim")
        return f"The ID token {words}, so no session was opened."

    async def _with_userinfo(
        self, metadata: Metadata, claims: dict[str, Any], access_token: Any
    ) -> dict[str, Any]:
        """The ID token's claims, with the UserInfo endpoint's added when a claim we need is
        not in the token (many providers put `email` and groups only there). UserInfo is
        trusted for the subject of the verified token alone (OIDC Core 5.3.2)."""
        wanted = {self.config.person_claim} | (
            {self.config.operator_claim} if self.config.operator_claim else set()
        )
        if wanted <= claims.keys() or not metadata.userinfo_endpoint:
            return claims
        if not isinstance(access_token, str):
            return claims
        info = await self._json(
            "GET",
            metadata.userinfo_endpoint,
            "the UserInfo claims",
            headers={"Authorization": f"Bearer {access_token}", "Accept": "application/json"},
        )
        if info.get("sub") != claims["sub"]:
            raise refused(
                "The provider's UserInfo answer is about someone else than its ID token, so "
                "no session was opened."
            )
        return {**info, **claims}

    def _identity(self, claims: Mapping[str, Any]) -> Identity:
        """The principal the verified claims name, and whether the operator claim holds."""
        claim = self.config.person_claim
        value = claims.get(claim)
        if not isinstance(value, str) or not value:
            raise refused(
                f"{self.config.name} did not say who you are: the claim {claim!r} is not in "
                f"its answer (ask for the scope that carries it in [web.oidc] scopes), so no "
                "session was opened."
            )
        if claim == "email":
            if claims.get("email_verified") is False:
                raise refused(
                    f"{self.config.name} says the address {value} is not verified, so it "
                    "cannot name you here and no session was opened."
                )
            principal = self.directory.principal_for("email", value.lower())
            where = f'email = "{value.lower()}"'
        else:
            principal = self.directory.principals.get(value)
            where = f"a [principals.{value}] entry"
        if principal is None:
            raise refused(
                f"You signed in at {self.config.name} as {value}, but that is nobody this "
                f"signoff knows, so no session was opened. An operator can add you ({where} "
                "in the configuration's [principals])."
            )
        return Identity(principal.key, self._operator(claims), str(claims["sub"]), value)

    def _operator(self, claims: Mapping[str, Any]) -> bool:
        if not self.config.operator_claim:
            return False
        held = claims.get(self.config.operator_claim)
        values = held if isinstance(held, list) else [held]
        return any(isinstance(v, str) and v in self.config.operator_values for v in values)


STATE_MISMATCH = (
    "This sign-in answer does not belong to a sign-in started in this browser (its state "
    "does not match, or the sign-in took longer than ten minutes), so no session was opened. "
    "Start again from the sign-in page."
)
