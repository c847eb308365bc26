"""Telegram through real `signoff serve` processes: config, environment and CLI wiring.

tests/integration/telegram/test_telegram_cards.py, test_telegram_decisions.py and
test_telegram_delegation.py prove the Telegram flows in-process. This file proves them the way
an operator runs them: a config file with a `[telegram]` table whose `api_base_url` points at
the fake Bot API (tests/fakes/telegram/, in a thread of its own), the token and webhook secret
in the environment, `signoff serve` as a subprocess with its own outbox, and updates posted to
`POST /telegram/webhook` with the secret header. It proves that:

- a request becomes a card posted by the server's own outbox; a press of Approve on it,
  delivered to a second `serve` process on the same database (SQLite and PostgreSQL), approves;
  the card is edited without its buttons and the signed decision webhook reaches the agent;
  the same update delivered again to the first process is acknowledged and handled once;
- `signoff telegram set-webhook` registers PUBLIC_URL/telegram/webhook with the secret token
  and only the update kinds signoff handles; `delete-webhook` removes it;
- `serve --telegram-polling` on SQLite decides from updates fetched with getUpdates, and is
  refused on PostgreSQL with the reason;
- `[telegram]` without `$TELEGRAM_WEBHOOK_SECRET` stops `serve` at once, naming the variable.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.fakes import telegram as fake
from tests.fakes.telegram import FakeTelegram
from tests.support.cli import Cli, assert_refused, sqlite_url
from tests.support.databases import POSTGRES_ONLY
from tests.support.service import (
    Fleet,
    ServerProcess,
    WebhookReceiver,
    create,
    service_config,
    service_env,
    wait_state,
    write_config,
)

TOKEN = "123456:TEST-token"
SECRET = "acceptance-webhook-secret"
GROUP = -1001234567890
TELEGRAM_ENV = {"TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_WEBHOOK_SECRET": SECRET}
ALICE = fake.user(111, "Alice")
CARD_TIMEOUT = 10.0


def telegram_config(db_url: str, webhook_url: str, api: str) -> dict[str, Any]:
    config = service_config(db_url, webhook_url, telegram={"api_base_url": api})
    config["routes"][0]["notify"] = [f"telegram:{GROUP}"]
    return config


def fleet(tmp_path: Path, config: dict[str, Any]) -> Fleet:
    return Fleet(write_config(tmp_path / "signoff.toml", config), tmp_path, TELEGRAM_ENV)


def card_for(tg: FakeTelegram) -> dict[str, Any]:
    """Wait for the server's outbox to post a card; the message as Telegram stores it."""
    call = tg.wait_for_sync(lambda c: c.method == "sendMessage" and c.ok, timeout=CARD_TIMEOUT)
    assert call.response is not None
    message = tg.message(GROUP, call.response["result"]["message_id"])
    assert message is not None
    return message


def post_update(server: ServerProcess, update: dict[str, Any], tg: FakeTelegram) -> int:
    """Post `update` to the server's webhook and hand the answer to `tg`, as Telegram does
    (a button's toast comes back in the answer)."""
    request = urllib.request.Request(
        server.url + "/telegram/webhook",
        data=json.dumps(update).encode(),
        method="POST",
        headers=fake.webhook_headers(SECRET),
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            tg.answered(response.status, response.reason or "", response.read())
            return int(response.status)
    except urllib.error.HTTPError as error:
        error.read()
        return int(error.code)


def card_recorded(db: Path, message_id: int, timeout: float = 10.0) -> None:
    """Wait until the server has recorded Telegram message `message_id` as a card."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with sqlite3.connect(db) as conn:
            found = conn.execute(
                "SELECT 1 FROM card_messages WHERE message_id = ?", (str(message_id),)
            ).fetchone()
        if found:
            return
        time.sleep(0.02)
    raise AssertionError(f"card {message_id} not recorded within {timeout} s")


def approve_button(card: dict[str, Any]) -> str:
    row, _answer = card["reply_markup"]["inline_keyboard"]  # Approve, Reject; Answer instead
    return str(row[0]["callback_data"])


def test_a_press_on_the_other_replica_approves_once(tmp_path: Path, db_url: str) -> None:
    with (
        FakeTelegram.in_thread(TOKEN) as tg,
        WebhookReceiver() as hooks,
        fleet(tmp_path, telegram_config(db_url, hooks.url, tg.base_url)) as servers,
    ):
        poster = servers.start()
        record = create(poster.api(), "run-telegram")
        card = card_for(tg)  # only `poster` runs yet: its outbox posted the card
        assert f"sha256:{record['hash'][:12]}" == card["text"].splitlines()[-1]
        other = servers.start()

        update = fake.callback_query(
            tg.next_update_id(), from_user=ALICE, message=card, data=approve_button(card)
        )
        assert post_update(other, update, tg) == 200
        approved = wait_state(poster.api(), record["id"], "approved")
        assert approved["decided_by"] == "alice", approved
        # Telegram delivering the same update again, to the first replica: handled once.
        assert post_update(poster, update, tg) == 200
        assert len(tg.calls_to("answerCallbackQuery")) == 1

        edited = tg.wait_for_sync(
            lambda c: c.method == "editMessageText" and c.ok, timeout=CARD_TIMEOUT
        )
        assert edited.args["message_id"] == card["message_id"]
        shown = tg.message(GROUP, card["message_id"])
        assert shown is not None and "reply_markup" not in shown
        assert "Approved by Alice Ng (alice)" in shown["text"]
        hooks.wait_for(
            lambda seen: any(d.json()["approval"]["state"] == "approved" for d in seen),
            timeout=15,
        )
        assert len(tg.calls_to("sendMessage", ok=True)) == 1  # one card, not two


def test_set_webhook_and_delete_webhook(tmp_path: Path, sqlite_template: Path) -> None:
    with FakeTelegram.in_thread(TOKEN) as tg:
        shutil.copy(sqlite_template, tmp_path / "signoff.db")
        db = sqlite_url(tmp_path / "signoff.db")
        config = telegram_config(db, "http://127.0.0.1:9/", tg.base_url)
        config["server"]["public_url"] = "https://signoff.example.com/"
        path = write_config(tmp_path / "signoff.toml", config)
        cli = Cli(cwd=tmp_path, env={**service_env(path), **TELEGRAM_ENV})

        result = cli.run("telegram", "set-webhook")
        assert result.returncode == 0, result
        assert "https://signoff.example.com/telegram/webhook" in result.stdout
        [call] = tg.calls_to("setWebhook", ok=True)
        assert call.args["url"] == "https://signoff.example.com/telegram/webhook"
        assert call.args["secret_token"] == SECRET
        assert sorted(call.args["allowed_updates"]) == ["callback_query", "message"]

        result = cli.run("telegram", "delete-webhook")
        assert result.returncode == 0, result
        assert tg.calls_to("deleteWebhook", ok=True)

        bad = cli.run("telegram", "set-webhook", env={"TELEGRAM_BOT_TOKEN": "999:wrong"})
        assert_refused(bad, "TELEGRAM_BOT_TOKEN", "BotFather")


def test_polling_mode_decides_on_sqlite(tmp_path: Path, sqlite_template: Path) -> None:
    shutil.copy(sqlite_template, tmp_path / "signoff.db")
    with (
        FakeTelegram.in_thread(TOKEN) as tg,
        WebhookReceiver() as hooks,
        fleet(
            tmp_path,
            telegram_config(sqlite_url(tmp_path / "signoff.db"), hooks.url, tg.base_url),
        ) as servers,
    ):
        server = servers.start(args=("--telegram-polling",))
        record = create(server.api(), "run-telegram")
        card = card_for(tg)
        # The card is on Telegram as soon as sendMessage answers; a press is tied to it once
        # the server has recorded which approval it shows, a moment later. A person is never
        # that fast; the test waits for the record.
        card_recorded(tmp_path / "signoff.db", card["message_id"])
        tg.push_update(
            fake.callback_query(
                tg.next_update_id(), from_user=ALICE, message=card, data=approve_button(card)
            )
        )
        approved = wait_state(server.api(), record["id"], "approved")
        assert approved["decided_by"] == "alice"
        assert tg.calls_to("getUpdates", ok=True)


@POSTGRES_ONLY
def test_polling_is_refused_on_postgresql(tmp_path: Path, db_url: str) -> None:
    config = telegram_config(db_url, "http://127.0.0.1:9/", "http://127.0.0.1:9/bot")
    path = write_config(tmp_path / "signoff.toml", config)
    cli = Cli(cwd=tmp_path, env={**service_env(path), **TELEGRAM_ENV})
    result = cli.run("serve", "--telegram-polling")
    assert_refused(result, "--telegram-polling", "PostgreSQL", "set-webhook")


def test_serve_refuses_to_start_without_the_webhook_secret(
    tmp_path: Path, sqlite_template: Path
) -> None:
    shutil.copy(sqlite_template, tmp_path / "signoff.db")
    config = telegram_config(
        sqlite_url(tmp_path / "signoff.db"), "http://127.0.0.1:9/", "http://127.0.0.1:9/bot"
    )
    path = write_config(tmp_path / "signoff.toml", config)
    env = {**service_env(path), "TELEGRAM_BOT_TOKEN": TOKEN}
    result = Cli(cwd=tmp_path, env=env).run("serve")
    line = assert_refused(result, "TELEGRAM_WEBHOOK_SECRET")
    assert "[telegram]" in line, line


def test_config_check_says_a_configured_group_became_a_supergroup(
    tmp_path: Path, sqlite_template: Path
) -> None:
    old_group = -4001234
    with FakeTelegram.in_thread(TOKEN) as tg:
        shutil.copy(sqlite_template, tmp_path / "signoff.db")
        config = telegram_config(sqlite_url(tmp_path / "signoff.db"), "http://127.0.0.1:9/",
                                 tg.base_url)  # fmt: skip
        config["routes"][0]["notify"] = [f"telegram:{old_group}", f"telegram:{GROUP}"]
        path = write_config(tmp_path / "signoff.toml", config)
        cli = Cli(cwd=tmp_path, env={**service_env(path), **TELEGRAM_ENV})

        before = cli.run("config", "check")
        assert before.returncode == 0, before
        assert "stale" not in before.stderr

        tg.migrate(old_group, GROUP)
        after = cli.run("config", "check")
        assert after.returncode == 0, after  # serve would still start: cards follow it
        assert f"notify target telegram:{old_group} is stale" in after.stderr
        assert f"write telegram:{GROUP} in the config" in after.stderr
