"""The callback guard judges an IPv6 address that carries an IPv4 address by the IPv4 address
it reaches (issue 25, item 3): NAT64 and 6to4 addresses embedding a private, loopback or
link-local IPv4 address were called public, since Python's `is_global` says so for
`64:ff9b::/96` and `2002::/16`. Checked for the URL's text at creation and for what a name
resolves to at send time."""

from __future__ import annotations

import socket

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from bot.destinations import GuardedResolver, is_public, url_problem
from bot.errors import Undeliverable

PRIVATE_IPV4 = ["127.0.0.1", "10.0.0.1", "172.16.5.4", "192.168.1.1", "169.254.169.254",
                "100.64.0.1", "0.0.0.0", "198.18.0.1", "240.0.0.1"]  # fmt: skip


def nat64(ipv4: str) -> str:
    return f"64:ff9b::{ipv4}"


def sixtofour(ipv4: str) -> str:
    a, b, c, d = (int(part) for part in ipv4.split("."))
    return f"2002:{a:02x}{b:02x}:{c:02x}{d:02x}::1"


@pytest.mark.parametrize("ipv4", PRIVATE_IPV4)
@pytest.mark.parametrize(
    "form",
    [nat64, sixtofour, lambda v4: f"::ffff:{v4}", lambda v4: f"::{v4}",
     lambda v4: f"::ffff:0:{v4}", lambda v4: f"64:ff9b:1::{v4}"],
    ids=["nat64", "6to4", "ipv4-mapped", "ipv4-compatible", "siit", "nat64-local"],
)  # fmt: skip
def test_an_ipv6_address_carrying_a_private_ipv4_address_is_not_public(
    form: object, ipv4: str
) -> None:
    address = form(ipv4)  # type: ignore[operator]
    assert is_public(address) is False, address
    assert url_problem(f"http://[{address}]:8080/hook") is not None


@pytest.mark.parametrize(
    ("address", "public"),
    [
        # what each form reaches when the IPv4 address is public
        ("64:ff9b::8.8.8.8", True),
        ("64:ff9b::808:808", True),
        ("2002:808:808::1", True),
        ("::ffff:8.8.8.8", True),
        # hexadecimal spelling of NAT64 / 6to4 with private IPv4 addresses
        ("64:ff9b::a00:1", False),
        ("64:ff9b::7f00:1", False),
        ("64:ff9b::a9fe:a9fe", False),
        ("2002:7f00:1::", False),
        ("2002:a9fe:a9fe:1::1", False),
        # forms whose destination cannot be told are never public
        ("64:ff9b:1::808:808", False),  # local-use NAT64, RFC 8215
        ("64:ff9b:1:808:8:800::", False),  # the same prefix with a /48 embedding
        ("64:ff9b:0:0:1::808:808", False),  # 64:ff9b::/32 outside the /96
        ("::8.8.8.8", False),  # IPv4-compatible, deprecated
        ("::ffff:0:8.8.8.8", False),  # SIIT
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", False),  # Teredo
        ("2001::1", False),
        # unchanged: ordinary addresses
        ("8.8.8.8", True),
        ("2001:4860:4860::8888", True),
        ("127.0.0.2", False),
        ("::1", False),
        ("::", False),
        ("fe80::1%eth0", False),
        ("fc00::1", False),
        ("ff02::1", False),
        ("224.0.0.1", False),
    ],
)
def test_only_public_unicast_destinations_are_public(address: str, public: bool) -> None:
    assert is_public(address) is public


def test_the_refusal_names_the_ipv4_address_reached() -> None:
    from bot.destinations import reached

    problem = url_problem("http://[64:ff9b::a9fe:a9fe]/latest/meta-data/")
    assert problem is not None and "it reaches the IPv4 address 169.254.169.254" in problem
    problem = url_problem("https://[2002:7f00:1::1]/hook")
    assert problem is not None and "127.0.0.1" in problem
    assert str(reached("64:ff9b::c0a8:101")) == "192.168.1.1"
    assert reached("64:ff9b:1::a00:1") is None
    assert url_problem("https://[64:ff9b::808:808]/hook") is None
    # a tenant that allows private callbacks allows these too
    assert url_problem("http://[64:ff9b::7f00:1]/hook", allow_private=True) is None


class _Answers(AbstractResolver):
    """A DNS answer chosen by the test (DNS64 synthesises NAT64 addresses like these)."""

    def __init__(self, *addresses: str) -> None:
        self.addresses = addresses

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            {"hostname": host, "host": a, "port": port, "family": socket.AF_INET6,
             "proto": 0, "flags": 0}
            for a in self.addresses
        ]  # fmt: skip

    async def close(self) -> None:
        pass


async def test_a_name_resolving_to_nat64_or_6to4_private_addresses_is_undeliverable() -> None:
    guard = GuardedResolver(_Answers("64:ff9b::a00:1", "2002:7f00:1::1", "64:ff9b:1::808:808"))
    with pytest.raises(Undeliverable, match="may not reach"):
        await guard.resolve("agents.example", 443)
    mixed = GuardedResolver(_Answers("64:ff9b::a9fe:a9fe", "64:ff9b::808:808"))
    assert [r["host"] for r in await mixed.resolve("agents.example", 443)] == ["64:ff9b::808:808"]
