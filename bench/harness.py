"""What the bench scenarios share in process: concurrent workers, latency quantiles, the
report of a chat benchmark, a throwaway PostgreSQL database, the server's config file and the
loop an edge process (fake platforms, webhook receiver) serves in."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import asyncpg
from aiohttp import web

from bench.results import p50_p99

if TYPE_CHECKING:  # the scripts put the repository on sys.path before importing this
    from store.repository import Store


async def run_concurrently(
    n: int, clients: int, op: Callable[[int], Awaitable[object]]
) -> tuple[float, list[float]]:
    """Run op(0..n-1) on `clients` workers; return (ops per second, latencies in ms)."""
    queue = iter(range(n))
    latencies: list[float] = []

    async def worker() -> None:
        for i in queue:
            start = time.perf_counter()
            await op(i)
            latencies.append((time.perf_counter() - start) * 1000)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    return n / (time.perf_counter() - start), latencies


async def run_open_loop(
    rate: float, count: int, op: Callable[[int], Awaitable[None]]
) -> list[float]:
    """Start op(i) at start + i / rate whatever the previous ones are doing; latencies in ms."""
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.1
    latencies: list[float] = []

    async def one(i: int) -> None:
        await asyncio.sleep(max(0.0, start + i / rate - loop.time()))
        began = time.perf_counter()
        await op(i)
        latencies.append((time.perf_counter() - began) * 1000)

    await asyncio.gather(*(one(i) for i in range(count)))
    return latencies


async def report_decisions(
    store: Store, n: int, rate: float, latencies: list[float], what: str
) -> None:
    """Print how many of the `n` approvals ended approved and the answer latencies, then
    close the store (the last step of every chat benchmark)."""
    async with store.read() as tx:
        decided = sum(1 for a in await tx.list_approvals(limit=n + 1) if a.state == "approved")
    await store.close()
    p50, p99 = quantiles(latencies)
    print(
        f"  {n} {what} at {rate:.0f}/s: {decided} approved; answer p50 {p50:.1f} ms, "
        f"p99 {p99:.1f} ms, max {max(latencies):.1f} ms"
    )


def quantiles(latencies: list[float]) -> tuple[float, float]:
    """(p50, p99) in the latencies' unit (bench.results.percentile)."""
    return p50_p99(latencies)


@asynccontextmanager
async def postgres_database(admin_url: str) -> AsyncIterator[str | None]:
    """A new, empty database on the server of `admin_url` (a postgresql:// URL to a
    maintenance database), as a postgresql+asyncpg:// URL; dropped afterwards. Yields None
    (saying why) when no server answers."""
    admin_url = admin_url.replace("postgresql+asyncpg://", "postgresql://")
    try:
        conn = await asyncpg.connect(admin_url)
    except OSError as exc:
        print(f"PostgreSQL skipped: {exc}")
        yield None
        return
    name = f"signoff_bench_{uuid.uuid4().hex[:8]}"
    await conn.execute(f"CREATE DATABASE {name}")
    try:
        base = admin_url.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://")
        yield f"{base}/{name}"
    finally:
        await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await conn.close()


def server_config(
    database_url: str,
    *,
    outbox: str = "",
    slack_api: str | None = None,
    telegram_api: str | None = None,
    web_surface: bool = False,
    webhook_url: str | None = None,
    notify: list[str] | None = None,
    server: str = "",
) -> str:
    """The benchmarked server's config: tenant `acme` (key in $SIGNOFF_BENCH_API_KEY, webhook
    secret in $SIGNOFF_BENCH_WEBHOOK_SECRET), principal `alice` on each chat surface given, and
    one route for `payments.*` notifying `notify`. `outbox` is the [outbox] table's body,
    `server` lines added to [server]."""
    tables = [f"[outbox]\n{outbox}", f'[server]\nlisten = "127.0.0.1:0"\n{server}']
    tables.append(f'[database]\nurl = "{database_url}"')
    alice = ['name = "Alice"']
    if slack_api is not None:
        tables.append(f'[slack]\napi_base_url = "{slack_api}"')
        alice.append('slack = "U0ALICE"')
    if telegram_api is not None:
        tables.append(f'[telegram]\napi_base_url = "{telegram_api}"')
        alice.append("telegram = 111")
    if web_surface:
        tables.append("[web]")
    tenant = ['name = "acme"', 'api_key_env = "SIGNOFF_BENCH_API_KEY"']
    if webhook_url is not None:
        tenant.append(f'webhook_url = "{webhook_url}"')
    tenant.append('webhook_secret_env = "SIGNOFF_BENCH_WEBHOOK_SECRET"')
    tables.append("[[tenants]]\n" + "\n".join(tenant))
    tables.append("[principals.alice]\n" + "\n".join(alice))
    targets = ", ".join(f'"{target}"' for target in notify or [])
    tables.append(
        f'[[routes]]\ntenant = "acme"\ncapability = "payments.*"\napprovers = ["alice"]\n'
        f"notify = [{targets}]"
    )
    return "\n\n".join(tables) + "\n"


async def serve_edge(app: web.Application, port: int) -> None:
    """Serve an edge process's `app` on loopback until SIGTERM or SIGINT, saying ``edge
    listening on PORT`` on stdout once it answers (what the benchmarks wait for)."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print(f"edge listening on {runner.addresses[0][1]}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()
