"""`/metrics` answers from a summary read in the background, and the list by state pages
through an index; on SQLite and PostgreSQL, with the real server on loopback.

Proves: the first scrape of a process waits for real figures; a request made and decided by
another process (the CLI, as a subprocess) shows in the gauges once the refresh interval
passes; a scrape answers with the figures it has while a refresh is held inside the
database read, and the new figures follow once it completes; `GET /v1/approvals?state=X`
returns exactly the rows in that state, newest first, across pages whose rows share a
creation time, and an empty page for a state with no rows.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from bot.app import build_app
from bot.clock import FakeClock
from bot.config import parse_config
from bot.intake import create_request
from bot.operator import Operator
from bot.routing import Directory
from store.repository import Store, Tx
from tests.support.api_server import ALICE, GLOBEX_KEY, Api, listing
from tests.support.cli import Cli, base_env, config_with, to_toml
from tests.support.samples import make_request, request_body

# Small enough that the tests wait a few tens of milliseconds for a refresh, never seconds.
REFRESH = 0.02


def _pending(text: str) -> dict[tuple[str, str], float]:
    """signoff_pending_approvals by (capability, tenant)."""
    found = {}
    for capability, tenant, value in re.findall(
        r'^signoff_pending_approvals\{capability="([^"]+)",tenant="([^"]+)"\} (\S+)$', text, re.M
    ):
        found[(capability, tenant)] = float(value)
    return found


class HeldStore(Store):
    """The real store, whose reads can be held at the door (a slow summary query)."""

    def __init__(self, store: Store) -> None:
        super().__init__(store.engine)
        self.door = asyncio.Event()
        self.door.set()
        self.held = asyncio.Event()

    @asynccontextmanager
    async def read(self) -> AsyncIterator[Tx]:
        if not self.door.is_set():
            self.held.set()
            await self.door.wait()
        async with super().read() as tx:
            yield tx


Server = Callable[..., Awaitable[tuple[str, aiohttp.ClientSession]]]


@pytest.fixture
async def server(db_url: str) -> AsyncIterator[Server]:
    """The real application on a loopback port, its metrics refreshed every REFRESH s."""
    runners: list[web.AppRunner] = []
    sessions: list[aiohttp.ClientSession] = []

    async def start(store: Store, clock: FakeClock) -> tuple[str, aiohttp.ClientSession]:
        config = parse_config(config_with(db_url, metrics={"refresh": REFRESH}))
        app = build_app(config, store, clock=clock, background=False)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        runners.append(runner)
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        http = aiohttp.ClientSession()
        sessions.append(http)
        return f"http://127.0.0.1:{runner.addresses[0][1]}/metrics", http

    yield start
    for http in sessions:
        await http.close()
    for runner in runners:
        await runner.cleanup()


async def _scrape(http: aiohttp.ClientSession, url: str) -> str:
    async with http.get(url) as response:
        assert response.status == 200
        return await response.text()


async def _until(http: aiohttp.ClientSession, url: str, want: Callable[[str], bool]) -> str:
    """Scrape until the page shows what is wanted (a refresh or two), at most 10 s."""
    shown = ""
    for _ in range(500):
        shown = await _scrape(http, url)
        if want(shown):
            break
        await asyncio.sleep(REFRESH)
    return shown


async def test_the_first_scrape_waits_for_real_figures(
    store: Store, clock: FakeClock, server: Server, directory: Directory
) -> None:
    await create_request(store, directory, clock, "acme", make_request(run_id="r1"))
    await create_request(store, directory, clock, "acme", make_request(run_id="r2"))
    clock.advance(minutes=5)
    url, http = await server(store, clock)
    shown = await _scrape(http, url)
    assert _pending(shown) == {("payments.refund", "acme"): 2.0}
    assert re.search(
        r'^signoff_oldest_pending_age_seconds\{capability="payments.refund",tenant="acme"\} '
        r"300\.0$",
        shown,
        re.M,
    )


async def test_changes_made_by_another_process_show_once_the_interval_passes(
    store: Store, server: Server, db_url: str, tmp_path: Path
) -> None:
    clock = FakeClock(datetime.now(UTC))  # the CLI stamps its rows with the system clock
    url, http = await server(store, clock)
    assert _pending(await _scrape(http, url)) == {}

    path = tmp_path / "signoff.toml"
    path.write_text(to_toml(config_with(db_url)), "utf-8")
    cli = Cli(tmp_path, base_env(SIGNOFF_CONFIG=str(path)))
    records = []
    for run in ("r1", "r2"):
        (tmp_path / "req.json").write_text(json.dumps(request_body(run_id=run)), "utf-8")
        made = cli.run("approvals", "request", "--tenant", "acme", "--file", "req.json")
        assert made.returncode == 0, str(made)
        records.append(made.json())
    shown = await _until(http, url, lambda page: bool(_pending(page)))
    assert _pending(shown) == {("payments.refund", "acme"): 2.0}

    first = records[0]
    decided = cli.run("approvals", "approve", first["id"], "--hash", first["hash"], "--as", "alice")
    assert decided.returncode == 0, str(decided)
    shown = await _until(
        http, url, lambda page: _pending(page).get(("payments.refund", "acme")) == 1
    )
    assert _pending(shown) == {("payments.refund", "acme"): 1.0}
    # The webhook the decision queued is in the outbox backlog too.
    assert re.search(r'^signoff_outbox_backlog\{kind="webhook"\} 1\.0$', shown, re.M), shown


async def test_a_scrape_never_waits_for_a_refresh_in_progress(
    store: Store, clock: FakeClock, server: Server, directory: Directory
) -> None:
    held = HeldStore(store)
    await create_request(store, directory, clock, "acme", make_request(run_id="r1"))
    url, http = await server(held, clock)
    assert _pending(await _scrape(http, url)) == {("payments.refund", "acme"): 1.0}

    held.door.clear()
    await asyncio.wait_for(held.held.wait(), 10)  # the next refresh is inside its read
    await create_request(store, directory, clock, "acme", make_request(run_id="r2"))
    clock.advance(minutes=1)
    shown = await asyncio.wait_for(_scrape(http, url), 10)  # waiting would never end
    assert not held.door.is_set()  # answered while the refresh is still held
    assert _pending(shown) == {("payments.refund", "acme"): 1.0}
    # The oldest age is worked out at the scrape, not at the last read.
    assert re.search(r"^signoff_oldest_pending_age_seconds\{[^}]*\} 60\.0$", shown, re.M)

    held.door.set()
    shown = await _until(
        http, url, lambda page: bool(_pending(page).get(("payments.refund", "acme")) == 2)
    )
    assert _pending(shown) == {("payments.refund", "acme"): 2.0}


# -- the list by state -----------------------------------------------------------------------


async def test_the_list_by_state_pages_through_that_state_only(api: Api) -> None:
    operator = Operator(api.store, api.directory, api.clock)
    made = []
    for i in range(9):
        made.append(await api.create(run_id=f"run-{i}"))
        if i % 3 == 2:  # threes share a created_at: the id orders them
            api.clock.advance(seconds=1)
    for record in made[1::3]:  # 1, 4, 7 approved
        await operator.approve_shown(record["id"], record["hash"], ALICE)

    def newest_first(records: list[dict[str, Any]]) -> list[str]:
        ordered = sorted(records, key=lambda r: (r["created_at"], r["id"]), reverse=True)
        return [r["id"] for r in ordered]

    decided = {r["id"] for r in made[1::3]}
    for state, expected in (
        ("pending", newest_first([r for r in made if r["id"] not in decided])),
        ("approved", newest_first([r for r in made if r["id"] in decided])),
    ):
        seen: list[str] = []
        query = f"?state={state}&limit=2"
        for _ in range(10):
            page = await listing(api, query)
            assert {a["state"] for a in page["approvals"]} <= {state}
            seen += [a["id"] for a in page["approvals"]]
            if page["next_cursor"] is None:
                break
            query = f"?state={state}&limit=2&cursor={page['next_cursor']}"
        assert seen == expected

    empty = await listing(api, "?state=rejected")
    assert empty == {"approvals": [], "next_cursor": None}
    # Another tenant's rows in the same state are never listed.
    assert (await listing(api, "?state=pending", key=GLOBEX_KEY))["approvals"] == []
