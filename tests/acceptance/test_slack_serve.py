"""Slack through real `signoff serve` processes: the config and environment wiring, end to end.

tests/integration/slack/ proves the Slack flows in-process (build_app, a FakeClock, an
outbox driven by hand). This file proves the same flows the way an operator runs them: a
config file with a `[slack]` table whose `api_base_url` points at the fake Slack Web API
(tests/fakes/slack.py, in a thread of its own), the bot token and signing secret in the
environment variables the config names, `signoff serve` as a subprocess with its own outbox
runner, and clicks signed exactly as Slack signs them, sent over real HTTP to
`POST /slack/events`. It proves that:

- a request created over the agent API becomes a card in the route's channel, posted by the
  server's own outbox within seconds, with Approve and Reject buttons carrying id and hash;
- an entitled click is acknowledged in under Slack's 3 seconds, approves with `decided_by`
  that principal, the card is `chat.update`d without its buttons, and the signed decision
  webhook reaches the agent's receiver;
- the click works on a second `signoff serve` process on the same database (SQLite and
  PostgreSQL) that did not post the card, and the card is still updated;
- Reject goes through the modal (`views.open`, then a `view_submission` with a reason) and
  ends `rejected` with the reason as the decision note;
- `[slack]` without `$SLACK_SIGNING_SECRET` stops `serve` at once: exit 1, one stderr line
  naming the variable, no traceback;
- a badly signed or stale request to the real server is 401 and decides nothing, and the
  server goes on accepting properly signed clicks.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from signoff_client import verify_webhook
from tests.fakes.slack import Call, FakeSlack
from tests.fakes.slack_inbound import sign
from tests.support.cli import Cli, assert_refused, sqlite_url
from tests.support.service import (
    WEBHOOK_SECRET,
    Delivery,
    Fleet,
    ServerProcess,
    WebhookReceiver,
    create,
    service_config,
    service_env,
    wait_state,
    write_config,
)

SECRET = "slack-signing-secret-acceptance"
TOKEN = "xoxb-test"  # FakeSlack's default token
CHANNEL = "C0FINANCE"
SLACK_ENV = {"SLACK_BOT_TOKEN": TOKEN, "SLACK_SIGNING_SECRET": SECRET}
APPROVE = "signoff_approve"
REJECT = "signoff_reject"
ACK_WINDOW = 3.0  # Slack shows the user an error if the ack takes longer
CARD_TIMEOUT = 10.0  # the outbox polls every 0.1 s; generous for a loaded machine


# -- helpers ---------------------------------------------------------------------------------


def slack_config(db_url: str, webhook_url: str, slack_api: str) -> dict[str, Any]:
    """The service test config with `[slack]` on and the payments route notifying C0FINANCE."""
    config = service_config(db_url, webhook_url, slack={"api_base_url": slack_api})
    config["routes"][0]["notify"] = [f"slack:{CHANNEL}"]
    return config


def servers(tmp_path: Path, config: dict[str, Any]) -> Fleet:
    return Fleet(write_config(tmp_path / "signoff.toml", config), tmp_path, SLACK_ENV)


def card_for(slack: FakeSlack, approval_id: str) -> Call:
    """Wait for the server's outbox to post the approval's card; the chat.postMessage call."""
    return slack.wait_for_sync(
        lambda c: (
            c.method == "chat.postMessage" and c.ok and approval_id in json.dumps(c.args["blocks"])
        ),
        timeout=CARD_TIMEOUT,
    )


def ts_of(call: Call) -> str:
    assert call.response is not None
    return str(call.response["ts"])


def buttons(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for b in blocks if b.get("type") == "actions" for e in b.get("elements", [])]


def texts(blocks: Any) -> str:
    """Every text in the blocks, joined: for `in` checks."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("text"), str):
                found.append(node["text"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(blocks)
    return "\n".join(found)


def post_to_slack_events(
    server: ServerProcess, body: bytes, headers: dict[str, str]
) -> tuple[int, float]:
    """POST a form-encoded body to the server's /slack/events; (status, seconds taken)."""
    request = urllib.request.Request(
        server.url + "/slack/events",
        data=body,
        method="POST",
        headers={"Content-Type": "application/x-www-form-urlencoded", **headers},
    )
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()
            status = response.status
    except urllib.error.HTTPError as error:
        error.read()
        status = error.code
    return status, time.monotonic() - started


def click(server: ServerProcess, body: bytes) -> None:
    """Send a correctly signed Slack request; it must be acknowledged 200 within 3 s."""
    status, took = post_to_slack_events(server, body, sign(SECRET, body))
    assert status == 200, (status, server.log[-3000:])
    assert took < ACK_WINDOW, f"ack took {took:.2f} s"


def wait_card_update(slack: FakeSlack, card: Call) -> Call:
    """The successful chat.update of that card message."""
    return slack.wait_for_sync(
        lambda c: (
            c.method == "chat.update"
            and c.ok
            and c.args.get("channel") == CHANNEL
            and c.args.get("ts") == ts_of(card)
        ),
        timeout=CARD_TIMEOUT,
    )


def decision_webhook(hooks: WebhookReceiver, approval_id: str, state: str) -> dict[str, Any]:
    """The signed decision webhook for the approval, verified as a receiver would."""

    def about(seen: list[Delivery]) -> bool:
        return any(
            d.json().get("approval", {}).get("id") == approval_id
            and d.json()["approval"].get("state") == state
            for d in seen
        )

    seen = hooks.wait_for(about, timeout=15)
    delivery = next(d for d in seen if d.json()["approval"]["id"] == approval_id)
    assert verify_webhook(delivery.headers, delivery.body, WEBHOOK_SECRET) == delivery.delivery_id
    body: dict[str, Any] = delivery.json()
    return body


def sqlite_copy(tmp_path: Path, template: Path) -> str:
    path = tmp_path / "signoff.db"
    shutil.copy(template, path)
    return sqlite_url(path)


# -- 1. the approve flow ---------------------------------------------------------------------


def test_a_card_posted_by_serve_is_approved_by_a_signed_click(
    tmp_path: Path, sqlite_template: Path
) -> None:
    with (
        FakeSlack.in_thread(TOKEN) as slack,
        WebhookReceiver() as hooks,
        servers(
            tmp_path,
            slack_config(sqlite_copy(tmp_path, sqlite_template), hooks.url, slack.base_url),
        ) as fleet,
    ):
        server = fleet.start()
        api = server.api()
        record = create(api, "run-slack")

        card = card_for(slack, record["id"])
        assert card.args["channel"] == CHANNEL
        assert [(b["action_id"], b.get("style")) for b in buttons(card.args["blocks"])] == [
            (APPROVE, "primary"),
            ("signoff_allow", None),  # the route gives standing grants
            (REJECT, "danger"),
            ("signoff_answer", None),
            ("signoff_delegate", None),
        ]
        assert {b["value"] for b in buttons(card.args["blocks"])} == {
            f"{record['id']}:{record['hash']}"
        }
        assert f"sha256:{record['hash'][:12]}" in texts(card.args["blocks"])

        click(server, slack.click_body("U0ALICE", CHANNEL, ts_of(card), APPROVE))

        approved = wait_state(api, record["id"], "approved")
        assert approved["decided_by"] == "alice", approved
        assert approved["execution"] == "not_started", approved

        update = wait_card_update(slack, card)
        blocks = update.args["blocks"]
        assert [b for b in blocks if b.get("type") == "actions"] == []
        assert "Approved" in texts(blocks) and "Alice Ng" in texts(blocks), texts(blocks)
        shown = slack.message(CHANNEL, ts_of(card))
        assert shown is not None and buttons(shown["blocks"]) == []

        hook = decision_webhook(hooks, record["id"], "approved")
        assert hook["approval"]["decided_by"] == "alice", hook
        assert slack.calls_to("chat.postEphemeral") == []  # nothing was refused
        # No [slack] team_id: serve said so as it started, once.
        [warned] = [line for line in server.log.splitlines() if "team_id is not set" in line]
        assert "WARNING" in warned and "any Slack workspace" in warned, warned


# -- 2. a click on another replica -----------------------------------------------------------


def test_a_click_on_the_replica_that_did_not_post_the_card_approves(
    tmp_path: Path, db_url: str
) -> None:
    with (
        FakeSlack.in_thread(TOKEN) as slack,
        WebhookReceiver() as hooks,
        servers(tmp_path, slack_config(db_url, hooks.url, slack.base_url)) as fleet,
    ):
        poster = fleet.start()
        record = create(poster.api(), "run-slack")
        # Only `poster` runs yet, so its outbox is the one that posts the card.
        card = card_for(slack, record["id"])
        other = fleet.start()
        assert other.port != poster.port

        click(other, slack.click_body("U0ALICE", CHANNEL, ts_of(card), APPROVE))

        approved = wait_state(poster.api(), record["id"], "approved")
        assert approved["decided_by"] == "alice", approved
        assert other.api().get(f"/v1/approvals/{record['id']}").body["state"] == "approved"
        update = wait_card_update(slack, card)
        assert buttons(update.args["blocks"]) == []
        assert "Approved" in texts(update.args["blocks"])
        decision_webhook(hooks, record["id"], "approved")
        assert len(slack.calls_to("chat.postMessage", ok=True)) == 1  # one card, not two


# -- 3. reject through the modal -------------------------------------------------------------


def test_reject_through_the_modal_records_the_reason(tmp_path: Path, sqlite_template: Path) -> None:
    with (
        FakeSlack.in_thread(TOKEN) as slack,
        WebhookReceiver() as hooks,
        servers(
            tmp_path,
            slack_config(sqlite_copy(tmp_path, sqlite_template), hooks.url, slack.base_url),
        ) as fleet,
    ):
        server = fleet.start()
        api = server.api()
        record = create(api, "run-slack")
        card = card_for(slack, record["id"])

        click(
            server,
            slack.click_body("U0BOB", CHANNEL, ts_of(card), REJECT, trigger_id="trigger-reject"),
        )
        opened = slack.wait_for_sync(lambda c: c.method == "views.open" and c.ok, timeout=5)
        assert opened.args["trigger_id"] == "trigger-reject"
        assert opened.response is not None
        view_id = opened.response["view"]["id"]
        # The click alone decides nothing: the approval waits for the modal.
        assert api.get(f"/v1/approvals/{record['id']}").body["state"] == "pending"

        submit = slack.submit_body(view_id, "U0BOB", {"reason": {"reason": "duplicate refund"}})
        click(server, submit)

        rejected = wait_state(api, record["id"], "rejected")
        assert (rejected["decided_by"], rejected["decision_note"]) == ("bob", "duplicate refund")
        update = wait_card_update(slack, card)
        assert buttons(update.args["blocks"]) == []
        assert "Rejected" in texts(update.args["blocks"])
        assert "duplicate refund" in texts(update.args["blocks"])
        hook = decision_webhook(hooks, record["id"], "rejected")
        assert hook["approval"]["decided_by"] == "bob", hook


# -- 4. startup without the signing secret ---------------------------------------------------


SECRET_ONLY = ("SLACK_SIGNING_SECRET",)
BOTH = ("SLACK_SIGNING_SECRET", "SLACK_BOT_TOKEN")


@pytest.mark.parametrize(
    ("unset", "fresh_database"),
    [(SECRET_ONLY, False), (BOTH, False), (SECRET_ONLY, True)],
    ids=["secret unset", "secret and token unset", "secret unset, first run on a new SQLite file"],
)
def test_serve_refuses_to_start_with_slack_but_no_signing_secret(
    tmp_path: Path, sqlite_template: Path, unset: tuple[str, ...], fresh_database: bool
) -> None:
    # A first run on the embedded default (no database file yet) is the likeliest moment to
    # have forgotten a variable; the refusal must read the same there.
    db = (
        sqlite_url(tmp_path / "new.db")
        if fresh_database
        else sqlite_copy(tmp_path, sqlite_template)
    )
    config = slack_config(db, "http://127.0.0.1:9/hooks", "http://127.0.0.1:9/api/")
    config_path = write_config(tmp_path / "signoff.toml", config)
    env = {**service_env(config_path), **SLACK_ENV}
    for name in unset:
        env.pop(name)
    cli = Cli(cwd=tmp_path, env=env)
    started = time.monotonic()
    result = cli.run("serve")
    took = time.monotonic() - started
    line = assert_refused(result, *unset)
    assert "[slack]" in line, line
    assert took < 15, f"serve took {took:.1f} s to refuse"


# -- 5. bad signatures -----------------------------------------------------------------------


def test_badly_signed_clicks_are_401_and_decide_nothing(
    tmp_path: Path, sqlite_template: Path
) -> None:
    with (
        FakeSlack.in_thread(TOKEN) as slack,
        WebhookReceiver() as hooks,
        servers(
            tmp_path,
            slack_config(sqlite_copy(tmp_path, sqlite_template), hooks.url, slack.base_url),
        ) as fleet,
    ):
        server = fleet.start()
        api = server.api()
        record = create(api, "run-slack")
        card = card_for(slack, record["id"])
        body = slack.click_body("U0ALICE", CHANNEL, ts_of(card), APPROVE)

        forged = sign("not-the-secret", body)
        stale = sign(SECRET, body, int(time.time()) - 360)
        for headers in (forged, stale, {}):
            status, _ = post_to_slack_events(server, body, headers)
            assert status == 401, (status, headers)
        time.sleep(0.5)  # a wrongly accepted click would have decided by now
        still = api.get(f"/v1/approvals/{record['id']}").body
        assert (still["state"], still["decided_by"]) == ("pending", None), still
        assert slack.calls_to("chat.update") == []
        assert slack.calls_to("chat.postEphemeral") == []
        assert hooks.snapshot() == []

        # The same click, properly signed, still works: the server was not disturbed.
        click(server, body)
        assert wait_state(api, record["id"], "approved")["decided_by"] == "alice"
