"""The peer_awaithumans scenario's load generators and webhook receiver, each run in a
process of its own (bench/scenarios/peer_awaithumans.py starts them):

    python -m bench.awaithumans_load load create|complete --url URL [--n N | --ids FILE]
        [--clients 32] [--rate R] [--prefix P] [--callback-url URL] [--out FILE] [--start-at T]
    python -m bench.awaithumans_load receiver [--port 0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from bench.harness import serve_edge
from bench.load import TRANSCRIPT

ADMIN_TOKEN = "bench-admin-token-0123456789abcdef"


def create_body(prefix: str, i: int, callback_url: str) -> bytes:
    """bench/load.py's refund as an awaithumans task: the same call, presentation and transcript
    in `payload` (awaithumans has no separate fields for them)."""
    return (
        f'{{"task":"Refund order {i}","idempotency_key":"{prefix}-{i}",'
        f'"timeout_seconds":86400,"callback_url":"{callback_url}",'
        f'"payload_schema":{{}},"response_schema":{{"type":"object",'
        f'"properties":{{"approved":{{"type":"boolean"}}}}}},'
        f'"task_metadata":{{"Amount":"{1000 + i} cents","Order":"{i}"}},'
        f'"payload":{{"capability":"payments.refund",'
        f'"tool":{{"name":"stripe.refunds.create","arguments":'
        f'{{"charge":"ch_{prefix}_{i}","amount":{1000 + i},"currency":"eur"}}}},'
        f'"summary":"Order {i} arrived damaged; the customer sent photos.",'
        f'"reason":"Refunds need a budget owner\'s approval.","requested_by":"support-agent",'
        f'"step":{{"node":"refund","attempt":1}},'
        f'"resume":{{"thread":"{prefix}-{i}","transcript":{TRANSCRIPT}}}}}}}'
    ).encode()


COMPLETE_BODY = (
    b'{"response":{"approved":true},"completed_by_email":"alice@example.com",'
    b'"completed_via_channel":"api"}'
)


def epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


async def load(args: argparse.Namespace) -> None:
    """One generator: creates (`--n` closed loop, or ids to `--out`) or completes of the ids
    in `--ids` (closed loop on --clients, or offered at --rate). Prints one JSON object."""
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"}
    base = args.url.rstrip("/") + "/api/tasks"
    latencies: list[float] = []
    errors = 0
    done: list[list[Any]] = []  # complete: [id, sent, answered, completed_at]; create: [id]
    if args.what == "create":
        jobs = list(range(args.n))
    else:
        jobs = await asyncio.to_thread(lambda: Path(args.ids).read_text("utf-8").split())
    limit = 0 if args.rate else args.clients

    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=limit), headers=headers
    ) as http:

        async def one(job: Any) -> None:
            nonlocal errors
            if args.what == "create":
                url, body = base, create_body(args.prefix, job, args.callback_url)
            else:
                url, body = f"{base}/{job}/complete", COMPLETE_BODY
            sent = time.time()
            began = time.perf_counter()
            try:
                async with http.post(url, data=body) as response:
                    status, answer = response.status, await response.read()
            except aiohttp.ClientError as exc:  # the server dropped the connection
                status, answer = 0, repr(exc).encode()
            latencies.append((time.perf_counter() - began) * 1000)
            if status not in (200, 201):
                errors += 1
                if errors <= 3:
                    print(f"{args.what}: {status} {answer[:300]!r}", file=sys.stderr)
                return
            task = json.loads(answer)
            if args.what == "create":
                done.append([task["id"]])
            else:
                done.append([job, sent, time.time(), epoch(task["completed_at"])])

        await asyncio.sleep(max(0.0, (args.start_at or 0) - time.time()))
        started = time.time()
        if args.rate:
            loop = asyncio.get_running_loop()
            start = loop.time()

            async def paced(i: int, job: Any) -> None:
                await asyncio.sleep(max(0.0, start + i / args.rate - loop.time()))
                await one(job)

            await asyncio.gather(*(paced(i, job) for i, job in enumerate(jobs)))
        else:
            queue = iter(jobs)

            async def worker() -> None:
                for job in queue:
                    await one(job)

            await asyncio.gather(*(worker() for _ in range(args.clients)))
        ended = time.time()
    if args.out:
        text = "".join(d[0] + "\n" for d in done)
        await asyncio.to_thread(Path(args.out).write_text, text, "utf-8")
    print(
        json.dumps(
            {
                "count": len(latencies),
                "errors": errors,
                "started": started,
                "ended": ended,
                "latencies_ms": latencies,
                "done": done,
            }
        )
    )


async def receiver(port: int) -> None:
    """The agent's webhook endpoint: answers 204 and keeps each task's first arrival time
    (X-Awaithumans-Task-Id); GET /arrivals returns them. Signatures are not checked: the
    receiver's CPU would be taken from the machine the server shares."""
    first: dict[str, float] = {}
    count = 0

    async def hook(request: web.Request) -> web.Response:
        nonlocal count
        at = time.time()
        await request.read()
        count += 1
        first.setdefault(request.headers.get("X-Awaithumans-Task-Id", ""), at)
        return web.Response(status=204)

    async def arrivals(_: web.Request) -> web.Response:
        return web.json_response({"count": count, "first": first})

    app = web.Application()
    app.router.add_post("/hooks", hook)
    app.router.add_get("/arrivals", arrivals)
    await serve_edge(app, port)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    g = sub.add_parser("load", help="a load generator")
    g.add_argument("what", choices=["create", "complete"])
    g.add_argument("--url", required=True)
    g.add_argument("--n", type=int, default=0)
    g.add_argument("--ids")
    g.add_argument("--clients", type=int, default=32)
    g.add_argument("--rate", type=float)
    g.add_argument("--prefix", default="run")
    g.add_argument("--callback-url", default="")
    g.add_argument("--out")
    g.add_argument("--start-at", type=float)
    r = sub.add_parser("receiver", help="the webhook receiver")
    r.add_argument("--port", type=int, default=0)
    args = p.parse_args()
    if args.command == "load":
        asyncio.run(load(args))
    else:
        asyncio.run(receiver(args.port))


if __name__ == "__main__":
    main()
