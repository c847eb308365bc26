"""The Slack rig: one signoff server in the test's process (tests/support/chat_server.py) wired
to the fake Slack Web API (tests/fakes/slack.py), the config it runs, and readers for the
Block Kit it sends, and `starting`, the body of the `start_slack` fixture
(tests/integration/conftest.py). Used by the Slack tests (tests/integration/slack/, whose
conftest.py names it `start`), the confirm and create-gate tests and the outbox batch tests.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

from bot.clock import FakeClock
from bot.config import parse_config
from bot.delegations import Delegations
from store.records import Delegation
from store.repository import Store
from tests.fakes.slack import FakeSlack
from tests.fakes.slack_inbound import sign, slash_command_body
from tests.support.chat_server import API_KEY, ChatServer, Configure, serve, with_web
from tests.support.samples import TEST_CONFIG

SECRET = "slack-signing-secret"
CHANNEL = "C0FINANCE"


@dataclass
class SlackRig(ChatServer):
    """One signoff server wired to the fake Slack, and what a test needs to drive it."""

    slack: FakeSlack

    async def card_for(self, approval_id: str) -> dict[str, Any]:
        """Run the outbox until the approval's card is posted; the postMessage call."""
        await self.drain()
        posts = [c for c in self.slack.calls_to("chat.postMessage", ok=True)]
        for call in posts:
            if any(approval_id in str(b) for b in call.args.get("blocks", [])):
                return call.args | {"ts": call.response["ts"]}  # type: ignore[index]
        raise AssertionError(f"no card for {approval_id}: {posts}")

    async def send(self, body: bytes, headers: dict[str, str] | None = None) -> int:
        return (await self._post(body, headers))[0]

    async def answer(self, body: bytes) -> str:
        """What signoff answered a signed request in its HTTP response (Bolt's ack body)."""
        status, text = await self._post(body, None)
        assert status == 200, text
        return text

    async def command(self, user_id: str, text: str) -> str:
        """`/signoff TEXT` typed by `user_id`; the answer Slack shows them."""
        return await self.answer(slash_command_body(user_id, text, channel_id=CHANNEL))

    async def _post(
        self, body: bytes, headers: dict[str, str] | None, *, json_body: bool = False
    ) -> tuple[int, str]:
        kind = "application/json" if json_body else "application/x-www-form-urlencoded"
        sent = {"Content-Type": kind}
        sent |= sign(SECRET, body) if headers is None else headers
        async with self.http.post(f"{self.url}/slack/events", data=body, headers=sent) as resp:
            return resp.status, await resp.text()

    async def delegations(self) -> list[Delegation]:
        return await Delegations(self.store, self.directory, self.clock).list()

    async def settle(self, approval_id: str, seq: int) -> None:
        """Wait until the click handler (which runs after Bolt's ack) appended event `seq`."""
        for _ in range(200):
            if len(await self.events(approval_id)) >= seq:
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"approval {approval_id} never reached event {seq}")


def slack_config(slack: FakeSlack) -> dict[str, Any]:
    """TEST_CONFIG with Slack at the fake, Erin (no approver) and Carol linked, payments.*
    cards in CHANNEL, and acme's key read from SLACK_TEST_API_KEY."""
    config = copy.deepcopy(TEST_CONFIG)
    config["tenants"][0]["api_key_env"] = "SLACK_TEST_API_KEY"
    config["slack"] = {"api_base_url": slack.base_url}
    config["principals"]["erin"] = {"name": "Erin Outsider", "slack": "U0ERIN"}
    config["principals"]["carol"]["slack"] = "U0CAROL"
    config["routes"][0]["notify"] = [f"slack:{CHANNEL}"]
    return config


Start = Callable[..., Awaitable[SlackRig]]
R = TypeVar("R", bound=SlackRig)


@asynccontextmanager
async def starting(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Start]:
    """The body of the `start_slack` fixture (tests/integration/conftest.py), the Slack tests'
    `start`: one fake Slack, and a function that starts a signoff server wired to it on a store
    and returns a `kind` (a SlackRig, or a test's subclass with helpers of its own). Its options:
    `trailing_slash=False` writes the fake's URL without the slash, `team_id` sets [slack]
    team_id, `confirm=True` asks to confirm Approve on payments.*, `web=True` serves [web]
    beside Slack, and `configure` makes a test's own changes to the config's dict last. Every
    server started stops on the way out."""
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-test")
    monkeypatch.setenv("SLACK_SIGNING_SECRET", SECRET)
    monkeypatch.setenv("SLACK_TEST_API_KEY", API_KEY)
    cleanup: list[Callable[[], Awaitable[None]]] = []
    async with FakeSlack() as slack:

        async def one(
            store: Store,
            *,
            kind: type[R] = SlackRig,  # type: ignore[assignment]
            trailing_slash: bool = True,
            team_id: str | None = None,
            confirm: bool = False,
            web: bool = False,
            configure: Configure | None = None,
        ) -> R:
            data = slack_config(slack)
            if not trailing_slash:  # as an operator might write it
                data["slack"]["api_base_url"] = slack.base_url.rstrip("/")
            if team_id is not None:
                data["slack"]["team_id"] = team_id
            if confirm:
                data["routes"][0]["confirm"] = True  # payments.*
            if web:
                with_web(data, monkeypatch)
            if configure is not None:
                configure(data)
            config = parse_config(data)
            return await serve(kind, config, store, clock, API_KEY, cleanup, slack=slack)

        yield one
        for close in reversed(cleanup):
            await close()


def texts_in(blocks: list[dict[str, Any]], kind: str) -> list[str]:
    """Every text of `kind` (plain_text or mrkdwn) anywhere in the blocks."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == kind and isinstance(node.get("text"), str):
                found.append(node["text"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(blocks)
    return found


def buttons_in(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every button of the blocks' actions, in order."""
    return [e for b in blocks if b["type"] == "actions" for e in b["elements"]]
