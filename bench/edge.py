"""The world outside the server, in a process of its own: the fake Slack Web API
(tests/fakes/slack.py) and a decision-webhook receiver on one loopback port.

    python -m bench.edge [--port 0]

Prints ``edge listening on PORT`` on stdout once it answers, then serves until SIGTERM:

- ``/api/{method}``: the fake Slack Web API (``[slack] api_base_url`` = ``http://127.0.0.1:PORT/api/``);
- ``POST /hooks``: answers 204 and counts the delivery (and its distinct ``webhook-id``);
- ``GET /count``: ``{"post": ok chat.postMessage calls, "update": ok chat.update calls,
  "slack_errors": failed Slack calls, "hooks": deliveries, "hook_ids": distinct webhook ids}``.

The signatures of the webhooks are not verified here: the receiver's CPU would be charged to
the machine the server shares, and the acceptance tests already hold the signatures.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import serve_edge
from tests.fakes.slack import FakeSlack


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


async def serve(port: int) -> None:
    edge = Edge()
    app = web.Application()
    edge._routes(app)
    await serve_edge(app, port)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    asyncio.run(serve(parser.parse_args().port))


if __name__ == "__main__":
    main()
