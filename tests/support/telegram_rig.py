"""The Telegram rig: one signoff server in the test's process (tests/support/chat_server.py)
wired to the fake Bot API (tests/fakes/telegram/), the people who write to it, the config it
runs, a reader for the keyboards it sends, and `starting`, the body of the `start_telegram`
fixture (tests/integration/conftest.py). Used by the Telegram tests (tests/integration/telegram/,
whose conftest.py names it `start`), the confirm tests and the outbox batch tests.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

from bot.clock import FakeClock
from bot.config import parse_config
from store.repository import Store
from tests.fakes import telegram as fake
from tests.fakes.telegram import FakeTelegram
from tests.support.chat_server import API_KEY, ChatServer, Configure, serve, with_web
from tests.support.samples import TEST_CONFIG

TOKEN = "123456:TEST-token"
SECRET = "telegram-webhook-secret"
GROUP = -1001234567890

ALICE = fake.user(111, "Alice", username="alice_ng")
BOB = fake.user(222, "Bob", username="bob_stone")
ERIN = fake.user(555, "Erin", username="erin")  # a principal, but not an approver
STRANGER = fake.user(999, "Mallory")  # no principal at all
update_ids = itertools.count(700_000)  # update and message ids, never reused in a process


@dataclass
class TelegramRig(ChatServer):
    """One signoff server wired to the fake Bot API, and what a test needs to drive it."""

    tg: FakeTelegram

    async def card_for(self, approval_id: str, chat: int = GROUP) -> dict[str, Any]:
        """Run the outbox until the approval's card is in `chat`; the message as it stands."""
        await self.drain()
        async with self.store.read() as tx:
            messages = await tx.card_messages_for(approval_id)
        for message in messages:
            if message.address == str(chat):
                found = self.tg.message(chat, int(message.message_id))
                assert found is not None
                return found
        raise AssertionError(f"no card for {approval_id} in {chat}: {messages}")

    async def send(self, update: dict[str, Any], secret: str | None = SECRET) -> int:
        headers = fake.webhook_headers(secret) if secret is not None else {}
        headers.setdefault("Content-Type", "application/json")
        async with self.http.post(
            f"{self.url}/telegram/webhook", json=update, headers=headers
        ) as response:
            # As Telegram does: a call in the answer (a button's toast) is run.
            self.tg.answered(response.status, response.reason or "", await response.read())
            return response.status

    async def click(
        self, who: dict[str, Any], card: dict[str, Any], button: int = 0, data: str | None = None
    ) -> int:
        pressed = data if data is not None else buttons_in(card)[button]["callback_data"]
        return await self.send(
            fake.callback_query(next(update_ids), from_user=who, message=card, data=pressed)
        )

    async def reply(self, who: dict[str, Any], to: dict[str, Any], text: str) -> int:
        return await self.send(
            fake.text_message(
                next(update_ids),
                chat=to["chat"],
                from_user=who,
                text=text,
                message_id=next(update_ids),
                reply_to=to,
            )
        )


def buttons_in(message: dict[str, Any]) -> list[dict[str, Any]]:
    """Every button of the message's inline keyboard, row by row."""
    markup = message.get("reply_markup") or {}
    return [button for row in markup.get("inline_keyboard", []) for button in row]


def telegram_config(tg: FakeTelegram, notify: list[str]) -> dict[str, Any]:
    """TEST_CONFIG with Telegram at the fake, Erin (no approver) and Carol linked, payments.*
    and quorum.* cards to `notify`, and acme's key read from TELEGRAM_TEST_API_KEY."""
    config = copy.deepcopy(TEST_CONFIG)
    config["tenants"][0]["api_key_env"] = "TELEGRAM_TEST_API_KEY"
    config["telegram"] = {"api_base_url": tg.base_url}
    config["principals"]["erin"] = {"name": "Erin Outsider", "telegram": 555}
    config["principals"]["carol"]["telegram"] = 333
    config["routes"][0]["notify"] = notify
    config["routes"][2]["notify"] = notify  # quorum.*: 2 of alice, bob, carol
    return config


Start = Callable[..., Awaitable[TelegramRig]]
R = TypeVar("R", bound=TelegramRig)


@asynccontextmanager
async def starting(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Start]:
    """The body of the `start_telegram` fixture (tests/integration/conftest.py), the Telegram
    tests' `start`: one fake Bot API, and a function that starts a signoff server wired to it
    on a store, its cards to `notify` (the group unless told), and returns a `kind` (a
    TelegramRig, or a test's subclass with helpers of its own). Its options: `confirm=True`
    asks to confirm Approve on payments.*, `web=True` serves [web] beside Telegram, and
    `configure` makes a test's own changes to the config's dict last. Every server started
    stops on the way out."""
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TOKEN)
    monkeypatch.setenv("TELEGRAM_WEBHOOK_SECRET", SECRET)
    monkeypatch.setenv("TELEGRAM_TEST_API_KEY", API_KEY)
    cleanup: list[Callable[[], Awaitable[None]]] = []
    async with FakeTelegram(TOKEN) as tg:

        async def one(
            store: Store,
            notify: list[str] | None = None,
            *,
            kind: type[R] = TelegramRig,  # type: ignore[assignment]
            confirm: bool = False,
            web: bool = False,
            configure: Configure | None = None,
        ) -> R:
            data = telegram_config(tg, notify or [f"telegram:{GROUP}"])
            if confirm:
                data["routes"][0]["confirm"] = True  # payments.*
            if web:
                with_web(data, monkeypatch)
            if configure is not None:
                configure(data)
            config = parse_config(data)
            return await serve(kind, config, store, clock, API_KEY, cleanup, tg=tg)

        yield one
        for close in reversed(cleanup):
            await close()
