"""The world outside the server for bench/effects_latency.py, one role per process, each
noting when every call it cares about arrived (wall-clock seconds, `time.time()`):

    python -m bench.effects_edge slack|telegram|hooks [--port 0] [--token T]

- ``slack``: the fake Slack Web API (tests/fakes/slack.py) at ``/api/{method}``; notes each
  ok ``chat.postMessage`` (``post``) and ``chat.update`` (``update``) with its channel and ts.
- ``telegram``: the fake Bot API (tests/fakes/telegram/) at ``/bot{token}/{method}``; notes
  each ok ``sendMessage`` (``post``, with the Approve button's callback data) and
  ``editMessageText`` / ``editMessageReplyMarkup`` (``update``) with its chat and message id.
- ``hooks``: the decision-webhook receiver at ``POST /hooks`` (answers 204); notes each
  delivery's approval id and event. Signatures are not checked (the acceptance tests do).

Each prints ``edge listening on PORT`` once it answers, then serves until SIGTERM. ``GET
/arrivals?since=N`` answers ``{"arrivals": [[kind, where, id, at, extra], ...], "next": M,
"errors": E}``: the notes from the N-th on, and the number of calls answered with an error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import serve_edge
from tests.fakes.recording import Call
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram

TELEGRAM_TOKEN = "123456:BENCH-effects-token"
Arrival = list[Any]  # [kind, where, id, at, extra]


class Notes:
    """The arrivals noted so far (a list: a poll reads only what is new)."""

    def __init__(self) -> None:
        self.arrivals: list[Arrival] = []
        self.errors = 0

    def note(self, kind: str, where: Any, ident: Any, extra: Any = None) -> None:
        self.arrivals.append([kind, str(where), str(ident), time.time(), extra])

    async def answer(self, request: web.Request) -> web.Response:
        since = int(request.query.get("since", "0"))
        return web.json_response(
            {"arrivals": self.arrivals[since:], "next": len(self.arrivals), "errors": self.errors}
        )


class Slack(FakeSlack):
    def __init__(self, notes: Notes) -> None:
        super().__init__()
        self.notes = notes

    def _record(self, call: Call) -> None:
        # Notes only: keeping every call (as the tests' fake does) would grow with the run.
        if not call.ok:
            self.notes.errors += 1
        elif call.method == "chat.postMessage" and call.response is not None:
            self.notes.note("post", call.response["channel"], call.response["ts"])
        elif call.method == "chat.update":
            self.notes.note("update", call.args.get("channel"), call.args.get("ts"))


class Telegram(FakeTelegram):
    def __init__(self, notes: Notes, token: str) -> None:
        super().__init__(token)
        self.notes = notes

    def _record(self, call: Call) -> None:
        if not call.ok:
            self.notes.errors += 1
        elif call.method == "sendMessage" and call.response is not None:
            sent = call.response["result"]
            keyboard = (sent.get("reply_markup") or {}).get("inline_keyboard") or [[{}]]
            approve = keyboard[0][0].get("callback_data")
            self.notes.note("post", sent["chat"]["id"], sent["message_id"], approve)
        elif call.method in ("editMessageText", "editMessageReplyMarkup"):
            self.notes.note("update", call.args.get("chat_id"), call.args.get("message_id"))


class Hooks:
    def __init__(self, notes: Notes) -> None:
        self.notes = notes

    def _routes(self, app: web.Application) -> None:
        app.router.add_post("/hooks", self._hook)

    async def _hook(self, request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        approval = body.get("approval") or {}
        self.notes.note("hook", body.get("event"), approval.get("id"), approval.get("state"))
        return web.Response(status=204)


async def serve(role: str, port: int, token: str) -> None:
    notes = Notes()
    fake: Slack | Telegram | Hooks
    if role == "slack":
        fake = Slack(notes)
    elif role == "telegram":
        fake = Telegram(notes, token)
    else:
        fake = Hooks(notes)
    app = web.Application()
    fake._routes(app)
    app.router.add_get("/arrivals", notes.answer)
    await serve_edge(app, port)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=("slack", "telegram", "hooks"))
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", default=TELEGRAM_TOKEN, help="the Telegram bot token")
    args = parser.parse_args()
    asyncio.run(serve(args.role, args.port, args.token))


if __name__ == "__main__":
    main()
