"""The `[web]` table: read by the declaration (channels/web/surface.py) and by the channel it
builds, so it lives apart from both and imports no Jinja2."""

from __future__ import annotations

import ipaddress
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, model_validator

from bot.config import EnvVar, Strict
from bot.origins import parse_origin
from bot.validation import DurationText, HttpUrl

# A claim's name as providers write them ("email", "groups", "https://example.com/roles").
_CLAIM = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^\s]+$")]
# A scope token (RFC 6749 3.3): printable ASCII but space, '"' and '\\'.
_SCOPE = Annotated[str, Field(pattern=r"^[\x21\x23-\x5b\x5d-\x7e]{1,100}$")]


def _issuer(value: str) -> str:
    """An issuer is an https URL (OpenID Connect Discovery 1.0): its ID tokens are only as
    trustworthy as the connection their keys came over. Plain http is allowed on loopback
    alone, for a provider on the same machine (a test, a local setup)."""
    parts = urlsplit(value)
    if parts.query or parts.fragment:
        raise ValueError("an issuer has no query or fragment")
    if parts.scheme != "https" and not _loopback(parts.hostname or ""):
        raise ValueError(f"the issuer must be an https URL (got {value!r}); http only on loopback")
    return value  # as the provider writes it: ID tokens must name it exactly


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class OidcConfig(Strict):
    """`[web.oidc]`: signing in through the company's OpenID provider, beside the links."""

    # The provider's issuer URL; its /.well-known/openid-configuration is read from it.
    issuer: Annotated[HttpUrl, AfterValidator(_issuer)]
    # This signoff's client at the provider (register {public_url}/web/oidc/callback there).
    client_id: Annotated[str, Field(min_length=1, max_length=500)]
    # The variable holding the client secret.
    client_secret_env: EnvVar = "SIGNOFF_OIDC_CLIENT_SECRET"
    # The scopes asked for; "openid" must be one.
    scopes: Annotated[list[_SCOPE], Field(min_length=1, max_length=20)] = Field(
        default_factory=lambda: ["openid", "email", "profile"]
    )
    # The claim that names the person: "email" is matched to the principals' `email`, any
    # other claim (e.g. "preferred_username") to the principal's key.
    person_claim: _CLAIM = "email"
    # A claim (a string or a list, such as "groups") whose value, or one of whose values, is
    # in operator_values makes the person an operator for this session; unset, only
    # `operator = true` in the principal's entry does.
    operator_claim: _CLAIM | None = None
    operator_values: list[Annotated[str, Field(min_length=1, max_length=500)]] = Field(
        default_factory=list
    )
    # The sign-in button says "Sign in with {name}".
    name: Annotated[str, Field(min_length=1, max_length=60, pattern=r"^[^\r\n]*$")] = (
        "single sign-on"
    )

    @model_validator(mode="after")
    def _consistent(self) -> OidcConfig:
        if "openid" not in self.scopes:
            raise ValueError('scopes must include "openid"')
        if self.operator_claim and not self.operator_values:
            raise ValueError("operator_claim needs operator_values (the values that make one)")
        if self.operator_values and not self.operator_claim:
            raise ValueError("operator_values needs operator_claim (the claim they are read from)")
        return self


# scheme://host[:port], written as a browser writes it (bot.origins.parse_origin).
Origin = Annotated[str, AfterValidator(parse_origin)]


class WebConfig(Strict):
    """The browser surface: an approver inbox and an operator dashboard, signed in by
    single-use links (and, with `[web.oidc]`, through an OpenID provider). Present in the
    config means served."""

    # The variable holding the key that signs session cookies (32 characters or more).
    secret_env: EnvVar = "SIGNOFF_WEB_SECRET"
    # A sign-in link works once, and only this long after it was made.
    link_ttl: DurationText = "15m"
    # A session ends after this long without a request.
    session_idle: DurationText = "8h"
    # Signing in through an OpenID Connect provider (channels/web/oidc.py); unset, links only.
    oidc: OidcConfig | None = None
    # The origins whose pages may frame an approval (/embed/<token>, docs/web.md
    # "Embedding an approval"); none by default, so nothing can be framed.
    embed_origins: list[Origin] = Field(default_factory=list)
