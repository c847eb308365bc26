"""Who is calling the agent API: each tenant's API key, and the embed keys a tenant's backend
mints embed tokens with (bot/api_embed.py), read from the environment variables the config
names, compared in constant time. An embed key is never an agent's key: holding the API key
must not let an agent mint a token and decide its own request in a person's name.
"""

from __future__ import annotations

import hmac
import logging
import os
from collections.abc import Callable
from typing import Any

from aiohttp import web

from bot.embed_tokens import EmbedKeyRequired
from bot.errors import ConfigError, Unauthorized
from bot.routing import Directory, Tenant

log = logging.getLogger("signoff.api")


def tenant_keys(directory: Directory, environ: Any = os.environ) -> list[tuple[str, bytes]]:
    """Each tenant's API key from its environment variable; tenants without one cannot use
    the API (logged, so an operator sees why their agent gets 401)."""
    keys = _keys(directory, environ)
    keyed = {name for name, _ in keys}
    for tenant in directory.tenants.values():
        if tenant.name not in keyed:
            why = f"${tenant.api_key_env} is not set" if tenant.api_key_env else "no api_key_env"
            log.warning("tenant %s cannot use the HTTP API: %s", tenant.name, why)
    return keys


def check_tenant_keys(directory: Directory, environ: Any = os.environ) -> None:
    """Refuse (ConfigError) two tenants sharing one API key: a request could not say whose it
    is; and an embed key equal to any API key or another embed key. `serve` checks this
    before it starts any worker."""
    embed_keys(directory, environ)


def embed_keys(directory: Directory, environ: Any = os.environ) -> list[tuple[str, bytes]]:
    """Each tenant's embed key from its environment variable (none: that tenant embeds
    nothing). An agent holding its tenant's API key must not be able to mint (bot/api_embed.py),
    so the two may never be the same value."""
    return _read_keys(
        directory,
        environ,
        lambda tenant: tenant.embed_key_env,
        _keys(directory, environ),
        lambda tenant, other: (
            f"tenant {tenant.name!r}'s embed key (${tenant.embed_key_env}) is the same "
            f"as an API or embed key of tenant {other!r}; an embed key must be its own"
        ),
    )


def _keys(directory: Directory, environ: Any) -> list[tuple[str, bytes]]:
    return _read_keys(
        directory,
        environ,
        lambda tenant: tenant.api_key_env,
        [],
        lambda tenant, other: (
            f"tenants {other!r} and {tenant.name!r} have the same API key; "
            "each tenant needs its own"
        ),
    )


def _read_keys(
    directory: Directory,
    environ: Any,
    variable: Callable[[Tenant], str | None],
    taken: list[tuple[str, bytes]],
    clash: Callable[[Tenant, str], str],
) -> list[tuple[str, bytes]]:
    """(tenant, key) for each tenant whose `variable` is set; ConfigError (`clash`) for a key
    equal to one already read or one of `taken`."""
    keys: list[tuple[str, bytes]] = []
    for tenant in directory.tenants.values():
        name = variable(tenant)
        value = environ.get(name) if name else None
        if not value:
            continue
        for other, key in [*taken, *keys]:
            if hmac.compare_digest(key, value.encode()):
                raise ConfigError(clash(tenant, other))
        keys.append((tenant.name, value.encode()))
    return keys


def tenant_of(request: web.Request, keys: list[tuple[str, bytes]]) -> str:
    """The tenant whose API key is presented (every key is compared, in constant time)."""
    found = _holder(request, keys)
    if found is None:
        raise Unauthorized("unknown API key")
    return found


def embedding_tenant_of(
    request: web.Request, embed_keys: list[tuple[str, bytes]], keys: list[tuple[str, bytes]]
) -> str:
    """The tenant whose embed key is presented; an agent's API key is refused (403)."""
    found = _holder(request, embed_keys)
    if found is not None:
        return found
    if _holder(request, keys) is not None:
        raise EmbedKeyRequired(
            "embed tokens are minted with the tenant's embed key ([[tenants]] embed_key_env), "
            "not the agent's API key"
        )
    raise Unauthorized("unknown embed key")


def _holder(request: web.Request, keys: list[tuple[str, bytes]]) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, presented = header.partition(" ")
    if scheme.lower() != "bearer" or not presented.strip():
        raise Unauthorized("missing API key: send Authorization: Bearer <tenant api key>")
    # aiohttp keeps undecodable header bytes as surrogates: encode them back, never fail.
    offered = presented.strip().encode("utf-8", "surrogateescape")
    found = None
    for tenant, key in keys:
        if hmac.compare_digest(offered, key):
            found = tenant
    return found
