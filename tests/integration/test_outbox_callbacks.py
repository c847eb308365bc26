"""Callbacks may reach public addresses only, on real SQLite and PostgreSQL, with webhook
receivers on loopback (tests/support/webhook_rig.py).

Proves: a callback_url whose text shows a private address (loopback, link-local, private or
shared ranges, localhost) or carries a user name or password is refused at creation; a
tenant may allow private callbacks, never userinfo; a name that resolves only to addresses a
callback may not reach makes its job dead after one attempt, nothing sent; and which
addresses count as public.
"""

from __future__ import annotations

import socket
from dataclasses import replace

import aiohttp
import pytest

from bot.clock import FakeClock
from bot.destinations import is_public
from bot.errors import InvalidRequest
from bot.routing import Directory
from store.repository import Store
from tests.support.webhook_rig import approved, serving, webhook_runner


def _guarded(directory: Directory) -> Directory:
    """The same tenant without allow_private_callbacks: the production default."""
    tenant = directory.tenants["acme"]
    tenants = dict(directory.tenants, acme=replace(tenant, allow_private_callbacks=False))
    return replace(directory, tenants=tenants)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8700/v1/approvals",
        "http://localhost:8700/metrics",
        "http://api.localhost/x",
        "http://[::1]/x",
        "http://[::ffff:127.0.0.1]/x",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.1.2.3/hook",
        "http://192.168.0.10/hook",
        "http://100.64.0.1/hook",
        "http://0.0.0.0/hook",
        "https://user@agents.example/hook",
        "https://user:pw@agents.example/hook",
    ],
)
async def test_a_callback_the_text_shows_to_be_private_is_refused_at_creation(
    store: Store, hooked: Directory, clock: FakeClock, url: str
) -> None:
    with pytest.raises(InvalidRequest, match="callback_url cannot be called back") as info:
        await approved(store, _guarded(hooked), clock, "r-ssrf", callback_url=url)
    assert [f["field"] for f in info.value.fields] == ["callback_url"]


async def test_a_tenant_may_allow_private_callbacks_but_never_userinfo(
    store: Store, hooked: Directory, clock: FakeClock
) -> None:
    ok = await approved(store, hooked, clock, "r-1", callback_url="http://127.0.0.1:9/hook")
    assert ok.callback_url == "http://127.0.0.1:9/hook"
    with pytest.raises(InvalidRequest, match="user name or password"):
        await approved(store, hooked, clock, "r-2", callback_url="http://u@127.0.0.1:9/hook")
    public = await approved(
        store, _guarded(hooked), clock, "r-3", callback_url="https://agents.example/hook"
    )
    assert public.callback_url == "https://agents.example/hook"


async def test_a_callback_that_resolves_to_a_private_address_is_dead_at_once(
    store: Store, hooked: Directory, clock: FakeClock, session: aiohttp.ClientSession
) -> None:
    """Created while the tenant allowed it (or before DNS changed): at send time the name is
    resolved again and only public addresses are connected to; none is, so the job is dead
    after one attempt, naming why, and nothing is sent."""
    name = socket.gethostname()
    addresses = {info[4][0] for info in socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)}
    if any(is_public(a) for a in addresses):
        pytest.skip(f"{name} resolves to a public address here: {addresses}")
    async with serving() as other:
        port = other.url.split(":")[2].split("/")[0]
        approval = await approved(
            store, hooked, clock, "r-dns", callback_url=f"http://{name}:{port}/hook"
        )
        runner = webhook_runner(store, _guarded(hooked), clock, session)
        try:
            while await runner.run_once():
                pass
        finally:
            await runner.handlers["webhook"].close()  # type: ignore[attr-defined]
        assert other.received == []
    async with store.read() as tx:
        [job] = await tx.outbox_jobs(approval_id=approval.id)
    assert (job.state, job.attempts) == ("dead", 1)
    assert "resolves only to addresses a callback may not reach" in (job.last_error or "")


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("8.8.8.8", True),
        ("2001:4860:4860::8888", True),
        ("127.0.0.2", False),
        ("::1", False),
        ("::ffff:10.0.0.1", False),
        ("fe80::1%eth0", False),
        ("fc00::1", False),
        ("224.0.0.1", False),
        ("192.0.2.1", False),
    ],
)
def test_only_public_unicast_addresses_are_public(address: str, public: bool) -> None:
    assert is_public(address) is public
