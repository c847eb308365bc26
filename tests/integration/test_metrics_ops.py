"""What monitoring sees, on SQLite and PostgreSQL: `/metrics` of the server and of the worker.

Proves: a card for a chat surface the deployment does not run is counted as skipped, never as
done; a request made and decided through the CLI (another process, as a subprocess) shows in
the server's `/metrics`, read from the audit trail and counted once however often it is
scraped; `signoff worker` with `[worker] metrics_listen` serves its own `/metrics` (a
subprocess), where the jobs it ran are counted; a revoked delegation's delegate leaves the
cards of the requests made while it held, and a natural end does the same.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from bot.app import build_app, outbox_handlers
from bot.clock import FakeClock
from bot.config import parse_config
from bot.delegations import Delegations
from bot.intake import create_request
from bot.metrics import SETTLE, Metrics
from bot.outbox.jobs import JobKind
from bot.outbox.runner import OutboxRunner
from store.repository import Store
from tests.fakes.slack import FakeSlack
from tests.support.chat_server import API_KEY, ChatServer, serve
from tests.support.cli import Cli, base_env, config_with, to_toml
from tests.support.samples import TEST_CONFIG, make_request, request_body
from tests.support.slack_rig import CHANNEL, SECRET


def _value(text: str, sample: str) -> float | None:
    """The value of one sample line (`name{labels}`) in a Prometheus text page, or None."""
    for line in text.splitlines():
        if line.startswith(sample + " "):
            return float(line.rpartition(" ")[2])
    return None


async def test_a_card_for_a_surface_not_running_is_skipped_not_done(
    store: Store, clock: FakeClock
) -> None:
    data = copy.deepcopy(TEST_CONFIG)
    data["slack"] = {}
    data["routes"][0]["notify"] = [f"slack:{CHANNEL}"]  # and no Slack channel runs here
    directory = parse_config(data).directory()
    await create_request(store, directory, clock, "acme", make_request())
    metrics = Metrics()
    handlers = outbox_handlers(store, directory, clock, {}, kinds=[JobKind.POST_CARD])
    runner = OutboxRunner(store, handlers, clock, metrics=metrics)
    assert await runner.run_once() == 1
    shown = metrics.render().decode()
    assert _value(shown, 'signoff_outbox_jobs_total{kind="post_card",result="skipped"}') == 1
    assert _value(shown, 'signoff_outbox_jobs_total{kind="post_card",result="done"}') is None
    async with store.read() as tx:
        [job] = await tx.outbox_jobs(state="done")
    assert job.kind == "post_card"  # settled: it is not tried again


async def test_decisions_made_through_the_cli_show_in_the_servers_metrics(
    store: Store, db_url: str, tmp_path: Path
) -> None:
    # The server's clock starts now, as the CLI's (the system clock) does.
    clock = FakeClock(datetime.now(UTC))
    config = config_with(db_url)
    app = build_app(parse_config(config), store, clock=clock, background=False)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/metrics"
    try:
        path = tmp_path / "signoff.toml"
        path.write_text(to_toml(config), "utf-8")
        cli = Cli(tmp_path, base_env(SIGNOFF_CONFIG=str(path)))
        (tmp_path / "req.json").write_text(json.dumps(request_body()), "utf-8")
        made = cli.run("approvals", "request", "--tenant", "acme", "--file", "req.json")
        assert made.returncode == 0, str(made)
        record = made.json()
        approved = cli.run(
            "approvals", "approve", record["id"], "--hash", record["hash"], "--as", "alice"
        )
        assert approved.returncode == 0, str(approved)

        clock.advance(SETTLE + timedelta(minutes=1))
        async with aiohttp.ClientSession() as http:
            for _ in range(2):  # a second scrape counts nothing twice
                async with http.get(url) as response:
                    shown = await response.text()
                assert _value(shown, "signoff_recorded_requests_total") == 1
                assert _value(shown, "signoff_recorded_decisions_total") == 1
                clock.advance(minutes=1)
    finally:
        await runner.cleanup()


def test_the_worker_serves_its_own_metrics(db_url: str, tmp_path: Path) -> None:
    config = config_with(db_url, worker={"metrics_listen": "127.0.0.1:0"})
    # The request is filed while Slack is configured; the worker runs after [slack] was taken
    # out (a route may notify only a configured surface): its queued card is skipped.
    config["slack"] = {}
    config["routes"][0]["notify"] = [f"slack:{CHANNEL}"]
    path = tmp_path / "signoff.toml"
    path.write_text(to_toml(config), "utf-8")
    slack_env = {"SLACK_BOT_TOKEN": "xoxb-test", "SLACK_SIGNING_SECRET": "s" * 32}
    cli = Cli(tmp_path, base_env(SIGNOFF_CONFIG=str(path), **slack_env))
    (tmp_path / "req.json").write_text(json.dumps(request_body()), "utf-8")
    made = cli.run("approvals", "request", "--tenant", "acme", "--file", "req.json")
    assert made.returncode == 0, str(made)
    del config["slack"], config["routes"][0]["notify"]
    path.write_text(to_toml(config), "utf-8")
    cli = Cli(tmp_path, base_env(SIGNOFF_CONFIG=str(path)))
    worker = cli.start("worker")
    try:
        assert worker.stderr is not None
        port = None
        deadline = time.monotonic() + 30
        while port is None and time.monotonic() < deadline:
            line = worker.stderr.readline()
            if not line:
                break
            found = re.search(r"worker metrics on http://127\.0\.0\.1:(\d+)/metrics", line)
            port = int(found.group(1)) if found else None
        assert port is not None, "the worker never said where its metrics are"
        shown = ""
        sample = 'signoff_outbox_jobs_total{kind="post_card",result="skipped"}'
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
                shown = page.read().decode()
            if _value(shown, sample) == 1:
                break
            time.sleep(0.1)
        assert _value(shown, sample) == 1, shown
        # The database gauges too, read at the scrape.
        assert re.search(r'^signoff_pending_approvals\{[^}]*tenant="acme"\} 1\.0$', shown, re.M)
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    assert worker.returncode == 0


# -- a delegate's name leaves the card when the delegation does ----------------------------


@pytest.fixture
async def slack_rig(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Any]:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-test")
    monkeypatch.setenv("SLACK_SIGNING_SECRET", SECRET)
    monkeypatch.setenv("SLACK_TEST_API_KEY", API_KEY)
    cleanup: list[Callable[[], Awaitable[None]]] = []
    async with FakeSlack() as slack:
        data = copy.deepcopy(TEST_CONFIG)
        data["tenants"][0]["api_key_env"] = "SLACK_TEST_API_KEY"
        data["slack"] = {"api_base_url": slack.base_url}
        data["routes"][1]["notify"] = [f"slack:{CHANNEL}"]  # contracts.*: alice first
        server = await serve(ChatServer, parse_config(data), store, clock, API_KEY, cleanup)
        yield server, slack
        for close in reversed(cleanup):
            await close()


def _card_text(slack: FakeSlack, ts: str) -> str:
    message = slack.message(CHANNEL, ts)
    assert message is not None
    return str(message["blocks"])


@pytest.mark.parametrize("how", ["revoked", "ended"])
async def test_a_delegate_leaves_the_card_when_the_delegation_ends(
    slack_rig: Any, clock: FakeClock, how: str
) -> None:
    server, slack = slack_rig
    delegations = Delegations(server.store, server.directory, clock)
    made = await delegations.create(
        "alice", "bob", ends_at=clock.now() + timedelta(days=2), created_by="cli"
    )
    await server.drain()
    record = await server.create(capability="contracts.sign")
    await server.drain()
    [post] = [
        c for c in slack.calls_to("chat.postMessage", ok=True) if c.args.get("channel") == CHANNEL
    ]
    ts = post.response["ts"]  # type: ignore[index]
    assert "Bob Stone decides as delegate" in _card_text(slack, ts)

    if how == "revoked":
        await delegations.revoke(made.id, by="cli")
    else:
        clock.advance(days=2)
    await server.drain()
    text = _card_text(slack, ts)
    assert "decides as delegate" not in text
    assert "Alice Ng" in text
    events = [e.type for e in await server.events(record["id"])]
    assert events == ["requested", "delegation_ended"]
    approval = await server.state(record["id"])
    assert (approval.state, approval.assigned_note) == ("pending", None)
