"""What is checked of a request from Slack before Bolt sees it, in-process, as
test_slack_cards.py drives Slack: real slack-bolt against the fake Slack Web API
(tests/fakes/slack.py), requests signed (or not) as Slack signs them, on SQLite and PostgreSQL,
with a FakeClock.

Proves: bad signatures and stale timestamps are 401 and change nothing; Slack's ssl_check is
answered and nothing rides on it; unsigned garbage is 401 and a signed but malformed payload
400, without a traceback; a replayed click does nothing again; a click from another workspace
is refused, and with team_id set, so is a request naming no workspace or another org.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

import pytest
import sqlalchemy

from store.repository import Store
from tests.fakes.slack_inbound import sign, slash_command_body
from tests.support.slack_rig import CHANNEL, SECRET, SlackRig, Start


@pytest.mark.parametrize("problem", ["bad signature", "six minutes old", "no headers"])
async def test_badly_signed_requests_are_401_and_change_nothing(
    rig: SlackRig, problem: str
) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    body = rig.slack.click_body("U0ALICE", CHANNEL, card["ts"], "signoff_approve")
    if problem == "bad signature":
        headers = sign("not-the-secret", body)
    elif problem == "six minutes old":
        headers = sign(SECRET, body, int(time.time()) - 360)
    else:
        headers = {}
    assert await rig.send(body, headers) == 401
    await asyncio.sleep(0.2)  # a wrongly accepted click would have decided by now
    assert (await rig.state(record["id"])).state == "pending"
    assert len(await rig.events(record["id"])) == 1
    assert rig.slack.calls_to("chat.postEphemeral") == []


async def test_slacks_ssl_check_is_answered_200_and_nothing_else_rides_on_it(
    rig: SlackRig,
) -> None:
    record = await rig.create()
    ssl_check = b"ssl_check=1&token=verification-token"
    seen = await _deliveries_recorded(rig)
    # Slack's periodic check, as it sends it: signed or not, answered 200, nothing recorded.
    assert await rig.send(ssl_check, {}) == 200
    assert await rig.send(ssl_check) == 200
    assert await _deliveries_recorded(rig) == seen
    # A click cannot pass as one: with a payload or a command beside it, the signature counts.
    card = await rig.card_for(record["id"])
    click = rig.slack.click_body("U0ALICE", CHANNEL, card["ts"], "signoff_approve")
    assert await rig.send(click + b"&ssl_check=1", {}) == 401
    command = slash_command_body("U0ALICE", "delegations", channel_id=CHANNEL)
    assert await rig.send(command + b"&ssl_check=1", {}) == 401
    await asyncio.sleep(0.2)
    assert (await rig.state(record["id"])).state == "pending"


async def _deliveries_recorded(rig: SlackRig) -> int:
    async with rig.store.engine.connect() as conn:
        counted = await conn.execute(sqlalchemy.text("SELECT count(*) FROM inbound_deliveries"))
        return int(counted.scalar_one())


@pytest.mark.parametrize(
    "body",
    [b"payload=%7Bnot-json", b"payload=%5B%5D", b"payload=" + b"%5B" * 5000, b"\xff\xfe"],
    ids=["not json", "a list", "5000 brackets", "not utf-8"],
)
async def test_unsigned_garbage_is_401_without_a_traceback(
    rig: SlackRig, body: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    for headers in ({}, {"X-Slack-Request-Timestamp": "abc", "X-Slack-Signature": "v0=1"}):
        assert await rig.send(body, headers) == 401
    stale = sign(SECRET, body, timestamp=int(time.time()) - 600)
    assert await rig.send(body, stale) == 401
    assert not [r for r in caplog.records if r.exc_info or r.levelname == "ERROR"]


@pytest.mark.parametrize(
    "payload",
    [
        "{not json",
        "[]",
        '{"type": "block_actions", "actions": [{"value": "x"}]}',
        '{"type": "block_actions", "user": {"id": "U0ALICE"}, "actions": []}',
        '{"type": "block_actions", "user": {"id": "U0ALICE"}, "channel": "C0", "actions": [{}]}',
    ],
    ids=["not json", "a list", "no user", "no actions", "channel as a string"],
)
async def test_signed_but_malformed_payloads_are_400(
    rig: SlackRig, payload: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert await rig.send(f"payload={quote(payload)}".encode()) == 400
    assert not [r for r in caplog.records if r.exc_info or r.levelname == "ERROR"]


async def test_a_replayed_click_is_answered_and_does_nothing_again(rig: SlackRig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    click = rig.slack.click_body("U0ERIN", CHANNEL, card["ts"], "signoff_approve")  # refused
    headers = {"Content-Type": "application/x-www-form-urlencoded", **sign(SECRET, click)}
    assert await rig.send(click, headers) == 200
    await rig.settle(record["id"], 2)
    told = len(rig.slack.calls_to("chat.postEphemeral"))
    for _ in range(5):
        assert await rig.send(click, headers) == 200
    await asyncio.sleep(0.1)
    assert [e.type for e in await rig.events(record["id"])] == ["requested", "refused"]
    assert len(rig.slack.calls_to("chat.postEphemeral")) == told


async def test_a_click_from_another_workspace_is_refused(start: Start, store: Store) -> None:
    rig = await start(store, team_id="T0OTHER")
    record = await rig.create()
    card = await rig.card_for(record["id"])
    click = rig.slack.click_body("U0ALICE", CHANNEL, card["ts"], "signoff_approve")  # team T1
    assert await rig.send(click) == 403
    assert (await rig.state(record["id"])).state == "pending"


def _without_workspace(click: bytes, **extra: Any) -> bytes:
    """A click body as `click`, but naming no workspace at all (no team, no user.team_id, no
    team_id), and with `extra` set in its payload."""
    payload = json.loads(parse_qs(click.decode())["payload"][0])
    payload.pop("team", None)
    payload.pop("team_id", None)
    payload["user"].pop("team_id", None)
    payload.update(extra)
    return urlencode({"payload": json.dumps(payload)}).encode()


async def test_with_team_id_set_a_request_naming_no_workspace_is_refused(
    start: Start, store: Store
) -> None:
    rig = await start(store, team_id="T0OURS")
    record = await rig.create()
    card = await rig.card_for(record["id"])
    click = rig.slack.click_body("U0ALICE", CHANNEL, card["ts"], "signoff_approve")
    assert await rig.send(_without_workspace(click)) == 403
    assert await rig.send(_without_workspace(click, team_id="T0OTHER")) == 403
    command = slash_command_body("U0ALICE", "delegations", channel_id=CHANNEL)
    fields = {k: v[0] for k, v in parse_qs(command.decode()).items() if k != "team_id"}
    assert await rig.send(urlencode(fields).encode()) == 403
    await asyncio.sleep(0.1)
    assert (await rig.state(record["id"])).state == "pending"
    assert [e.type for e in await rig.events(record["id"])] == ["requested"]
    assert rig.slack.calls_to("chat.postEphemeral") == []
    # Slack's own checks name no workspace and decide nothing: still answered.
    challenge = json.dumps({"type": "url_verification", "challenge": "c-1", "token": "x"})
    status, text = await rig._post(challenge.encode(), None, json_body=True)
    assert (status, json.loads(text)) == (200, {"challenge": "c-1"})
    # The same click naming the workspace decides.
    assert await rig.send(_without_workspace(click, team={"id": "T0OURS"})) == 200
    await rig.settle(record["id"], 2)
    assert (await rig.state(record["id"])).state == "approved"


async def test_an_enterprise_grid_team_id_is_matched_by_the_org(start: Start, store: Store) -> None:
    rig = await start(store, team_id="E0ORG")
    record = await rig.create()
    card = await rig.card_for(record["id"])
    click = rig.slack.click_body("U0ALICE", CHANNEL, card["ts"], "signoff_approve")
    assert await rig.send(click) == 403  # names workspace T1, no org
    other = _without_workspace(click, enterprise={"id": "E0ELSE"}, team={"id": "T1"})
    assert await rig.send(other) == 403
    await asyncio.sleep(0.1)
    assert (await rig.state(record["id"])).state == "pending"
    ours = _without_workspace(click, enterprise={"id": "E0ORG"}, team={"id": "T1"})
    assert await rig.send(ours) == 200
    await rig.settle(record["id"], 2)
    assert (await rig.state(record["id"])).state == "approved"
