"""The world outside the server, in processes of their own (the benchmarks start them):

    python -m bench.edge [counts|slack|telegram|hooks] [--port 0] [--token T]

Each prints ``edge listening on PORT`` on stdout once it answers, then serves until SIGTERM.

``counts`` (the default; bench/processes.py's Edge, the service, overload, grants...
scenarios): the fake Slack Web API (tests/fakes/slack.py) and a decision-webhook receiver on
one loopback port, counted as they arrive:

- ``/api/{method}``: the fake Slack Web API (``[slack] api_base_url`` = ``http://127.0.0.1:PORT/api/``);
- ``POST /hooks``: answers 204 and counts the delivery (and its distinct ``webhook-id``);
- ``GET /count``: ``{"post": ok chat.postMessage calls, "update": ok chat.update calls,
  "slack_errors": failed Slack calls, "hooks": deliveries, "hook_ids": distinct webhook ids}``.

``slack``, ``telegram``, ``hooks`` (the effects scenario, one role per process), each noting
when every call it cares about arrived (wall-clock seconds, `time.time()`):

- ``slack``: the fake Slack Web API at ``/api/{method}``; notes each ok ``chat.postMessage``
  (``post``) and ``chat.update`` (``update``) with its channel and ts.
- ``telegram``: the fake Bot API (tests/fakes/telegram/) at ``/bot{token}/{method}``; notes
  each ok ``sendMessage`` (``post``, with the Approve button's callback data) and
  ``editMessageText`` / ``editMessageReplyMarkup`` (``update``) with its chat and message id.
- ``hooks``: the decision-webhook receiver at ``POST /hooks`` (answers 204); notes each
  delivery's approval id and event.

``GET /arrivals?since=N`` (those three) answers ``{"arrivals": [[kind, where, id, at, extra],
...], "next": M, "errors": E}``: the notes from the N-th on, and the number of calls answered
with an error.

The signatures of the webhooks are not verified here: the receiver's CPU would be charged to
the machine the server shares, and the acceptance tests already hold the signatures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from aiohttp import web

from bench.harness import serve_edge
from tests.fakes.recording import Call
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram

TELEGRAM_TOKEN = "123456:BENCH-effects-token"
Arrival = list[Any]  # [kind, where, id, at, extra]


class Edge(FakeSlack):
    """FakeSlack plus the webhook receiver, counted as they arrive (cheap to read while the
    benchmark polls it several times a second)."""

    def __init__(self) -> None:
        super().__init__()
        self.counts = {"post": 0, "update": 0, "home": 0, "slack_errors": 0, "hooks": 0}
        self.hook_ids: set[str] = set()

    def _routes(self, app: web.Application) -> None:
        super()._routes(app)
        app.router.add_post("/hooks", self._hook)
        app.router.add_get("/count", self._count)

    def _record(self, call: Any) -> None:
        # Counts only: keeping every call's blocks would make the fake's memory and CPU grow
        # with the run, which the server's figures would then pay for on a shared machine.
        if not call.ok:
            self.counts["slack_errors"] += 1
        elif call.method == "chat.postMessage":
            self.counts["post"] += 1
        elif call.method == "chat.update":
            self.counts["update"] += 1
        elif call.method == "views.publish":
            self.counts["home"] += 1

    async def _hook(self, request: web.Request) -> web.Response:
        await request.read()
        self.counts["hooks"] += 1
        self.hook_ids.add(request.headers.get("webhook-id", ""))
        return web.Response(status=204)

    async def _count(self, _: web.Request) -> web.Response:
        return web.json_response({**self.counts, "hook_ids": len(self.hook_ids)})


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
    app = web.Application()
    if role == "counts":
        Edge()._routes(app)
        await serve_edge(app, port)
        return
    notes = Notes()
    fake: Slack | Telegram | Hooks
    if role == "slack":
        fake = Slack(notes)
    elif role == "telegram":
        fake = Telegram(notes, token)
    else:
        fake = Hooks(notes)
    fake._routes(app)
    app.router.add_get("/arrivals", notes.answer)
    await serve_edge(app, port)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "role", nargs="?", default="counts", choices=("counts", "slack", "telegram", "hooks")
    )
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", default=TELEGRAM_TOKEN, help="the Telegram bot token")
    args = parser.parse_args()
    asyncio.run(serve(args.role, args.port, args.token))


if __name__ == "__main__":
    main()
