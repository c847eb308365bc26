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

An IPv6 address that carries an IPv4 address to an IPv4 host is judged by the IPv4 address it
reaches: IPv4-mapped (`::ffff:0:0/96`), NAT64 (`64:ff9b::/96`, RFC 6052) and 6to4
(`2002::/16`, RFC 3056). `64:ff9b::a00:1` is 10.0.0.1 to a host behind a NAT64 gateway, and
`2002:7f00:1::` is 127.0.0.1 to a 6to4 relay, while Python's `is_global` calls both public.
Forms whose IPv4 address cannot be read with certainty are never public: the local-use NAT64
prefix `64:ff9b:1::/48` (RFC 8215; where the IPv4 address sits depends on a prefix length only
the local operator knows), Teredo (`2001::/32`; relayed to a host behind a NAT) and the rest of
`::/8` (IPv4-compatible `::a.b.c.d`, deprecated; SIIT-translated `::ffff:0:a.b.c.d`; reserved).

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
# The well-known NAT64 prefix: RFC 6052 allows it only as a /96, the IPv4 address in the last
# 32 bits, so the address reached is always readable.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_NEVER_PUBLIC = (
    ipaddress.IPv6Network("64:ff9b:1::/48"),  # local-use NAT64: the embedding is not knowable
    ipaddress.IPv6Network("2001::/32"),  # Teredo
    ipaddress.IPv6Network("::/8"),  # IPv4-compatible, SIIT, loopback, unspecified, reserved
)


def reached(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address a connection to `address` (an IPv4 or IPv6 literal) really reaches: the IPv4
    address an IPv4-mapped, NAT64 or 6to4 address carries, else the address itself; None for
    a form whose destination cannot be told (never public). ValueError for a non-address."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv4Address):
        return ip
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return ip.sixtofour
    if any(ip in network for network in _NEVER_PUBLIC):
        return None
    return ip


def is_public(address: str) -> bool:
    """Whether `address` (an IPv4 or IPv6 literal) is a public unicast address, judged by the
    address it reaches (see `reached`)."""
    ip = reached(address)
    return ip is not None and ip.is_global and not ip.is_multicast


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
        target = reached(host)
        carried = (
            f"; it reaches the IPv4 address {target}"
            if isinstance(target, ipaddress.IPv4Address) and ":" in host
            else ""
        )
        return (
            f"{host} is not a public address (loopback, private, link-local or reserved{carried})"
        )
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
