"""Decisions for the effects scenario (bench/scenarios/effects.py), offered at a fixed rate
from a process of its own, one approval each, by one of four paths:

    python -m bench.drive slack --url URL --secret S --decisions FILE --rate R
    python -m bench.drive telegram --url URL --secret S --decisions FILE --rate R
    python -m bench.drive web --url URL --login LINK --decisions FILE --rate R
    python -m bench.drive cli --command JSON --config C --decisions FILE --rate R
                                      [--procs 2]

- ``slack``: a signed Slack Approve click (block_actions) on the approval's card, to
  ``POST /slack/events``;
- ``telegram``: a callback_query update pressing Approve on the card, to ``POST
  /telegram/webhook`` with the secret token;
- ``web``: the form of ``/web/approvals/{id}``, posted to ``/web/approvals/{id}/approve`` with
  the hash and the session's CSRF token, by a browser session opened with the sign-in link
  LINK (``signoff web login``);
- ``cli``: ``COMMAND approvals approve ID --hash H --as alice`` as a process of its own (at
  most --procs at once, so the rate offered may not be reached: the answer says what was;
  none starts later than --seconds after --start-at).

FILE holds one JSON object a line: ``id``, ``hash``, and for slack ``channel`` and ``ts``, for
telegram ``chat``, ``message_id`` and ``data`` (the Approve button's callback data). All
start at --start-at (epoch seconds). Prints one JSON object: ``started``, ``ended``,
``errors`` and ``decisions``: ``[id, sent, answered, status]`` per decision (epoch seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fakes import telegram as fake_telegram
from tests.fakes.slack_inbound import block_action_body, sign

SLACK_USER = "U0ALICE"
TELEGRAM_USER = fake_telegram.user(111, "Alice")
PRINCIPAL = "alice"
_CSRF = re.compile(r'name="csrf"\s+value="([^"]+)"')

Decide = Callable[[dict[str, Any]], Awaitable[tuple[float, float, int] | None]]


async def paced(
    decisions: list[dict[str, Any]], rate: float, start_at: float | None, decide: Decide
) -> None:
    """Offer decide(d) at start + i / rate, whatever the previous ones are doing; print the
    answer."""
    if start_at is not None:
        await asyncio.sleep(max(0.0, start_at - time.time()))
    loop = asyncio.get_running_loop()
    start = loop.time()
    started = time.time()
    done: list[list[Any]] = []

    async def one(i: int, d: dict[str, Any]) -> None:
        await asyncio.sleep(max(0.0, start + i / rate - loop.time()))
        decided = await decide(d)
        if decided is not None:
            done.append([d["id"], *decided])

    await asyncio.gather(*(one(i, d) for i, d in enumerate(decisions)))
    errors = sum(1 for *_, status in done if status not in (200, 204, 303, 0))
    ended = time.time()
    print(json.dumps({"started": started, "ended": ended, "errors": errors, "decisions": done}))


async def timed_post(
    http: aiohttp.ClientSession, url: str, data: Any, headers: dict[str, str] | None = None
) -> tuple[float, float, int]:
    sent = time.time()
    async with http.post(url, data=data, headers=headers, allow_redirects=False) as response:
        answer = await response.read()
    if response.status not in (200, 204, 303):
        print(f"{url}: {response.status} {answer[:300]!r}", file=sys.stderr)
    return sent, time.time(), response.status


async def slack(args: argparse.Namespace, decisions: list[dict[str, Any]]) -> None:
    url = args.url.rstrip("/") + "/slack/events"
    # Signed ahead of time: the clock measures the decision, not the harness. (Slack's
    # signature allows five minutes of skew, far more than a run lasts.)
    signed = {}
    for d in decisions:
        value = f"{d['id']}:{d['hash']}"
        body = block_action_body(SLACK_USER, "signoff_approve", value, d["channel"], d["ts"])
        signed[d["id"]] = (
            body,
            {"Content-Type": "application/x-www-form-urlencoded"} | sign(args.secret, body),
        )
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:

        async def decide(d: dict[str, Any]) -> tuple[float, float, int]:
            body, headers = signed[d["id"]]
            return await timed_post(http, url, body, headers)

        await paced(decisions, args.rate, args.start_at, decide)


async def telegram(args: argparse.Namespace, decisions: list[dict[str, Any]]) -> None:
    url = args.url.rstrip("/") + "/telegram/webhook"
    headers = fake_telegram.webhook_headers(args.secret)
    bodies = {}
    for n, d in enumerate(decisions, start=1):
        shown = {
            "message_id": int(d["message_id"]),
            "chat": fake_telegram.group_chat(int(d["chat"])),
            "date": int(time.time()),
            "text": "the card",
        }
        update = fake_telegram.callback_query(
            n, from_user=TELEGRAM_USER, message=shown, data=d["data"]
        )
        bodies[d["id"]] = fake_telegram.webhook_body(update)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:

        async def decide(d: dict[str, Any]) -> tuple[float, float, int]:
            return await timed_post(http, url, bodies[d["id"]], headers)

        await paced(decisions, args.rate, args.start_at, decide)


async def web(args: argparse.Namespace, decisions: list[dict[str, Any]]) -> None:
    base = args.url.rstrip("/")
    jar = aiohttp.CookieJar(unsafe=True)  # cookies for 127.0.0.1
    async with aiohttp.ClientSession(
        cookie_jar=jar, connector=aiohttp.TCPConnector(limit=0)
    ) as http:
        # Signing in: the link's Continue button, then any page with a form for the token.
        async with http.post(args.login, allow_redirects=False) as response:
            await response.read()
            if response.status != 303:
                raise SystemExit(f"sign-in refused: {response.status}")
        async with http.get(f"{base}/web/approvals/{decisions[0]['id']}") as response:
            page = await response.text()
        found = _CSRF.search(page)
        if found is None:
            raise SystemExit("no CSRF token on the approval's page")
        csrf = found.group(1)

        async def decide(d: dict[str, Any]) -> tuple[float, float, int]:
            form = {"hash": d["hash"], "csrf": csrf, "note": ""}
            return await timed_post(http, f"{base}/web/approvals/{d['id']}/approve", form)

        await paced(decisions, args.rate, args.start_at, decide)


async def cli(args: argparse.Namespace, decisions: list[dict[str, Any]]) -> None:
    command = json.loads(args.command)
    slots = asyncio.Semaphore(args.procs)

    async def decide(d: dict[str, Any]) -> tuple[float, float, int] | None:
        async with slots:
            sent = time.time()
            if sent > (args.start_at or sent) + args.seconds:
                return None  # past the path's time: not offered
            proc = await asyncio.create_subprocess_exec(
                *command,
                "approvals", "approve", d["id"], "--hash", d["hash"], "--as", PRINCIPAL,
                "--config", args.config,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            _, err = await proc.communicate()
            answered = time.time()
        if proc.returncode != 0:
            print(f"cli {d['id']}: {proc.returncode} {err[-300:]!r}", file=sys.stderr)
        return sent, answered, proc.returncode or 0  # 0: decided

    await paced(decisions, args.rate, args.start_at, decide)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", choices=("slack", "telegram", "web", "cli"))
    parser.add_argument("--decisions", required=True)
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--start-at", type=float)
    parser.add_argument("--url", help="the server (slack, telegram, web)")
    parser.add_argument("--secret", help="Slack signing secret / Telegram webhook secret")
    parser.add_argument("--login", help="web: a sign-in link")
    parser.add_argument("--command", help="cli: the signoff command, as a JSON list")
    parser.add_argument("--config", help="cli: the server's config file")
    parser.add_argument("--procs", type=int, default=2, help="cli: processes at once")
    parser.add_argument("--seconds", type=float, default=60.0, help="cli: no start after this")
    args = parser.parse_args()
    lines = Path(args.decisions).read_text("utf-8").splitlines()
    decisions = [json.loads(line) for line in lines if line.strip()]
    run = {"slack": slack, "telegram": telegram, "web": web, "cli": cli}[args.path]
    asyncio.run(run(args, decisions))


if __name__ == "__main__":
    main()
