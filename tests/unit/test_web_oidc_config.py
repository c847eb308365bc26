"""`[web.oidc]` as the config reads it (channels/web/config.py) and the startup check
(channels/web/surface.py): what is refused before anything runs, in words. The flow itself
runs against a real provider: tests/integration/web/test_web_oidc.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from bot.config import parse_config
from bot.errors import ConfigError
from bot.surfaces import StartupCheck
from channels.web.config import OidcConfig
from channels.web.oidc import Flow
from channels.web.surface import SURFACE
from tests.support.samples import TEST_CONFIG

OPTIONS = StartupCheck(polling=False, database_url="sqlite+aiosqlite:///x.db")


def _parsed(**oidc: Any) -> OidcConfig:
    config = copy.deepcopy(TEST_CONFIG)
    config["web"] = {"oidc": {"issuer": "https://idp.example.com", "client_id": "s", **oidc}}
    table = parse_config(config).web  # type: ignore[attr-defined]
    assert table is not None and table.oidc is not None
    return table.oidc


def test_the_defaults() -> None:
    oidc = _parsed()
    assert (oidc.scopes, oidc.person_claim, oidc.operator_claim) == (
        ["openid", "email", "profile"],
        "email",
        None,
    )
    assert oidc.client_secret_env == "SIGNOFF_OIDC_CLIENT_SECRET"


@pytest.mark.parametrize(
    "issuer",
    ["https://idp.example.com/realms/main", "https://idp.example.com/", "http://127.0.0.1:9000"],
)
def test_an_issuer_is_kept_as_written(issuer: str) -> None:
    assert _parsed(issuer=issuer).issuer == issuer  # a trailing slash is part of it


@pytest.mark.parametrize(
    ("oidc", "says"),
    [
        ({"issuer": "http://idp.example.com"}, "the issuer must be an https URL"),
        ({"issuer": "https://idp.example.com/?tenant=x"}, "an issuer has no query"),
        ({"scopes": ["email"]}, 'scopes must include "openid"'),
        ({"operator_claim": "groups"}, "operator_claim needs operator_values"),
        ({"operator_values": ["ops"]}, "operator_values needs operator_claim"),
        ({"scopes": ["openid", "two words"]}, "scopes"),
        ({"client_secret": "inline"}, "client_secret"),  # secrets live in the environment
    ],
)
def test_refused_in_words(oidc: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError, match=r"web\.oidc") as refused:
        _parsed(**oidc)
    assert says in str(refused.value)


def test_serve_refuses_to_start_without_the_client_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = copy.deepcopy(TEST_CONFIG)
    config["web"] = {"oidc": {"issuer": "https://idp.example.com", "client_id": "s"}}
    table = parse_config(config).web  # type: ignore[attr-defined]
    monkeypatch.setenv("SIGNOFF_WEB_SECRET", "k" * 40)
    monkeypatch.delenv("SIGNOFF_OIDC_CLIENT_SECRET", raising=False)
    with pytest.raises(ConfigError, match=r"\$SIGNOFF_OIDC_CLIENT_SECRET not set"):
        SURFACE.check(table, OPTIONS)
    monkeypatch.setenv("SIGNOFF_OIDC_CLIENT_SECRET", "secret")
    SURFACE.check(table, OPTIONS)


def test_each_flow_is_fresh_and_its_challenge_is_s256() -> None:
    one, two = Flow.start(None), Flow.start("/dashboard")
    assert len({one.state, two.state, one.nonce, two.nonce}) == 4
    assert 43 <= len(one.verifier) <= 128
    # RFC 7636: BASE64URL(SHA256(verifier)), unpadded.
    assert Flow("s", "n", "x" * 43).challenge == "zAscLGbzu5_RoIHGJrob72L2-WRBpDvhUmhSN3asJqE"
