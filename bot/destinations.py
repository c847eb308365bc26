"""Where signoff may POST a request's `callback_url`: public addresses only, unless the
tenant's config allows more.

`callback_url` is chosen by the agent, and signoff POSTs a signed body to it from inside the
deployment's network: left open, any tenant could make signoff call its own API, `/metrics`,
a cloud metadata service (169.254.169.254) or anything else only the server can reach. So a
callback may not reach loopback, link-local, private, shared, reserved, multicast or
unspecified addresses, judged twice:

- by the URL's text at creation (a 422 the agent can act on): userinfo, `localhost`, or a
  literal address in those ranges;
- by the addresses the name resolves to when the webhook is sent (DNS can change after
  creation): `GuardedResolver` hands the connection only public addresses, so the address
  checked is the address connected to.

A tenant's own `webhook_url` is the operator's choice and is not restricted; neither is a
callback of a tenant with `allow_private_callbacks = true`.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from bot.errors import Undeliverable

_LOCAL_NAMES = ("localhost", "localhost.", "ip6-localhost", "ip6-loopback")


def is_public(address: str) -> bool:
    """Whether `address` (an IPv4 or IPv6 literal) is a public unicast address."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def url_problem(url: str, *, allow_private: bool = False) -> str | None:
    """Why the text of a callback URL already shows it may not be called, or None."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises for a port out of range
    except ValueError as exc:
        return f"it is not a valid URL ({exc})"
    if parts.username is not None or parts.password is not None:
        return "it carries a user name or password (user@host); put credentials elsewhere"
    if allow_private:
        return None
    host = (parts.hostname or "").lower()
    if host in _LOCAL_NAMES or host.endswith(".localhost"):
        return f"{host} is this machine"
    try:
        public = is_public(host)
    except ValueError:
        return None  # a name: judged by what it resolves to when the webhook is sent
    if not public:
        return f"{host} is not a public address (loopback, private, link-local or reserved)"
    return None


class GuardedResolver(AbstractResolver):
    """Resolves like aiohttp's default resolver and keeps only public addresses; a name with
    none left is Undeliverable."""

    def __init__(self, resolver: AbstractResolver | None = None) -> None:
        self._resolver = resolver or DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = await self._resolver.resolve(host, port, family)
        public = [r for r in found if is_public(r["host"])]
        if not public:
            addresses = ", ".join(sorted({r["host"] for r in found}))
            raise Undeliverable(
                f"{host} resolves only to addresses a callback may not reach ({addresses}); "
                "allow_private_callbacks in the tenant's config allows them"
            )
        return public

    async def close(self) -> None:
        await self._resolver.close()
