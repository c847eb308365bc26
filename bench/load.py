"""Load generators for bench/service.py, each run as a process of its own so that the clients
never take the server's CPU inside one interpreter.

    python -m bench.load create --url URL --key KEY (--n N | --seconds S) [--clients 32]
                                [--rate R] [--prefix P] [--out FILE] [--start-at EPOCH]
                                [--on-429 retry|count] [--retry-wait S] [--then-click SECRET]
    python -m bench.load clicks --url URL --secret S --approvals FILE --rate R
                                [--start-at EPOCH]

`create` posts agent-shaped create bodies (the refund of examples/refund-request.json with a
~4 KB transcript in `resume`, like the LangGraph peer's state) to ``POST /v1/approvals``:
closed loop on `--clients` connections, or open loop at `--rate` per second; `--out` writes
each created approval's ``{"id", "hash", "sent"}`` as a JSON line (`sent`: when its create
was first sent, epoch seconds). `--then-click SECRET` has a person decide each request the
moment it is created: a signed Slack Approve click follows each 201 answer that left the
request pending (bench/grants.py's create-plus-decision reference). A create the server refuses for
load (429) is asked again after its Retry-After, as signoff_client does (`--on-429 retry`,
the default; its latency runs to the final answer), or counted as answered (`count`: the
overload benchmark, bench/overload.py). `clicks` reads such a file and
offers one signed Slack Approve click (block_actions) per approval to ``POST /slack/events``
at `--rate` per second, whatever the previous ones are doing.

Both print one JSON object on stdout: ``count``, ``errors``, ``started`` and ``ended`` (epoch
seconds, so the parent can combine several generators) and ``latencies_ms``; `create` also
``statuses`` (final answers by HTTP status, "exception" for no answer: a timeout or a
dropped connection), ``refused`` (429 answers, retried or not) and ``refused_bare`` (429s
without a Retry-After).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fakes.slack_inbound import block_action_body, sign

CHANNEL = "C0FIN"
APPROVER_SLACK_ID = "U0ALICE"


def transcript(size: int = 4096) -> list[dict[str, str]]:
    """A support conversation of about `size` bytes of JSON: what an agent keeps to resume."""
    turns: list[dict[str, str]] = []
    lines = (
        ("user", "Hello, my order 8812 arrived damaged, the box was crushed and the lamp broken."),
        ("assistant", "I am sorry to hear that. Could you send a photo of the damage, please?"),
        ("user", "Here are three photos of the lamp and of the box as it was delivered."),
        ("assistant", "Thank you. I can see the damage; I will ask for a refund of the order."),
    )
    while len(json.dumps(turns)) < size:
        role, text = lines[len(turns) % len(lines)]
        turns.append({"role": role, "content": f"{text} ({len(turns)})"})
    return turns


TRANSCRIPT = json.dumps(transcript(), separators=(",", ":"))


def create_body(prefix: str, i: int) -> bytes:
    """The create body of request i, as JSON bytes (built by formatting: the client's CPU
    should go to sending, not to serialising)."""
    return (
        f'{{"run_id":"{prefix}-{i}","capability":"payments.refund",'
        f'"tool":{{"name":"stripe.refunds.create","arguments":'
        f'{{"charge":"ch_{prefix}_{i}","amount":{1000 + i},"currency":"eur"}}}},'
        f'"presentation":{{"title":"Refund order {i}",'
        f'"summary":"Order {i} arrived damaged; the customer sent photos.",'
        f'"fields":[{{"label":"Amount","value":"{1000 + i} cents"}},'
        f'{{"label":"Order","value":"{i}"}}]}},'
        f'"reason":"Refunds need a budget owner\'s approval.","requested_by":"support-agent",'
        f'"step":{{"node":"refund","attempt":1}},'
        f'"resume":{{"thread":"{prefix}-{i}","transcript":{TRANSCRIPT}}}}}'
    ).encode()


def result(
    count: int,
    errors: int,
    started: float,
    ended: float,
    latencies: list[float],
    **more: object,
) -> None:
    print(
        json.dumps(
            {
                "count": count,
                "errors": errors,
                "started": started,
                "ended": ended,
                "latencies_ms": [round(x, 3) for x in latencies],
                **more,
            }
        )
    )


async def wait_until(epoch: float | None) -> None:
    if epoch is not None:
        await asyncio.sleep(max(0.0, epoch - time.time()))


async def create(args: argparse.Namespace) -> None:
    url = args.url.rstrip("/") + "/v1/approvals"
    headers = {"Authorization": f"Bearer {args.key}", "Content-Type": "application/json"}
    latencies: list[float] = []
    created: list[str] = []
    statuses: dict[str, int] = {}
    errors = refused = refused_bare = 0
    limit = args.clients if args.rate is None else 0
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=limit),
        headers=headers,
        timeout=aiohttp.ClientTimeout(total=60),
    ) as http:

        async def one(i: int) -> None:
            nonlocal errors, refused, refused_bare
            body = create_body(args.prefix, i)
            began = time.perf_counter()
            sent = time.time()
            while True:
                try:
                    async with http.post(url, data=body) as response:
                        answer = await response.read()
                        status = str(response.status)
                        retry_after = response.headers.get("Retry-After")
                except (aiohttp.ClientError, TimeoutError) as exc:
                    status, answer, retry_after = "exception", repr(exc).encode(), None
                if status != "429":
                    break
                refused += 1
                if retry_after is None:
                    refused_bare += 1
                if args.on_429 == "count":
                    break
                wait = args.retry_wait if args.retry_wait is not None else float(retry_after or 1)
                await asyncio.sleep(wait * (1 + random.random() / 4))
            latencies.append((time.perf_counter() - began) * 1000)
            statuses[status] = statuses.get(status, 0) + 1
            if status == "201":
                record = json.loads(answer)
                if args.then_click and record["state"] == "pending":
                    if not await click(http, args.url, args.then_click, record, i):
                        errors += 1
                if args.out:
                    kept = {"id": record["id"], "hash": record["hash"], "sent": sent}
                    created.append(json.dumps(kept))
            elif status != "429":
                errors += 1
                if errors <= 3:
                    print(f"create {i}: {status} {answer[:300]!r}", file=sys.stderr)

        await wait_until(args.start_at)
        started = time.time()
        deadline = None if args.seconds is None else time.perf_counter() + args.seconds
        if args.rate is None:
            counter = iter(range(args.n if args.n is not None else 10**9))

            async def worker() -> None:
                for i in counter:
                    if deadline is not None and time.perf_counter() >= deadline:
                        return
                    await one(i)

            await asyncio.gather(*(worker() for _ in range(args.clients)))
        else:
            count = args.n if args.n is not None else int(args.rate * args.seconds)
            loop = asyncio.get_running_loop()
            start = loop.time()

            async def paced(i: int) -> None:
                await asyncio.sleep(max(0.0, start + i / args.rate - loop.time()))
                await one(i)

            await asyncio.gather(*(paced(i) for i in range(count)))
        ended = time.time()
    if args.out:
        await asyncio.to_thread(
            Path(args.out).write_text, "".join(line + "\n" for line in created), "utf-8"
        )
    result(
        len(latencies),
        errors,
        started,
        ended,
        latencies,
        statuses=statuses,
        refused=refused,
        refused_bare=refused_bare,
    )


async def click(
    http: aiohttp.ClientSession, base: str, secret: str, record: dict[str, str], n: int
) -> bool:
    """One signed Slack Approve click on `record`'s card; whether Slack's answer was a 200."""
    value = f"{record['id']}:{record['hash']}"
    body = block_action_body(
        APPROVER_SLACK_ID, "signoff_approve", value, CHANNEL, f"1700000000.{n:06d}"
    )
    # The session's Authorization and JSON content type are the agent's: a click has neither.
    headers = {"Content-Type": "application/x-www-form-urlencoded", "Authorization": ""}
    async with http.post(
        base.rstrip("/") + "/slack/events", data=body, headers=headers | sign(secret, body)
    ) as response:
        await response.read()
        return response.status == 200


async def clicks(args: argparse.Namespace, approvals: list[dict[str, str]]) -> None:
    url = args.url.rstrip("/") + "/slack/events"
    # Signed ahead of time: the clock measures Slack's wait, not the harness.
    signed = []
    for n, a in enumerate(approvals):
        body = block_action_body(
            APPROVER_SLACK_ID,
            "signoff_approve",
            f"{a['id']}:{a['hash']}",
            CHANNEL,
            f"1700000000.{n:06d}",
        )
        headers = {"Content-Type": "application/x-www-form-urlencoded"} | sign(args.secret, body)
        signed.append((body, headers))
    latencies: list[float] = []
    # Each click's approval id, when it was sent and when Slack's answer came (epoch seconds):
    # the decision committed in between (bench/scenarios/waits.py).
    clicked: list[tuple[str, float, float]] = []
    errors = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:

        async def one(i: int) -> None:
            nonlocal errors
            body, headers = signed[i]
            began = time.perf_counter()
            sent = time.time()
            try:
                async with http.post(url, data=body, headers=headers) as response:
                    answer = await response.read()
                    status = str(response.status)
            except (aiohttp.ClientError, TimeoutError) as exc:  # counted, with its wait
                status, answer = "exception", repr(exc).encode()
            latencies.append((time.perf_counter() - began) * 1000)
            clicked.append((approvals[i]["id"], sent, time.time()))
            if status != "200":
                errors += 1
                if errors <= 3:
                    print(f"click {i}: {status} {answer[:300]!r}", file=sys.stderr)

        await wait_until(args.start_at)
        loop = asyncio.get_running_loop()
        start = loop.time()
        started = time.time()

        async def paced(i: int) -> None:
            await asyncio.sleep(max(0.0, start + i / args.rate - loop.time()))
            await one(i)

        await asyncio.gather(*(paced(i) for i in range(len(signed))))
        ended = time.time()
    result(len(latencies), errors, started, ended, latencies, clicked=clicked)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("create")
    c.add_argument("--url", required=True)
    c.add_argument("--key", required=True)
    c.add_argument("--n", type=int)
    c.add_argument("--seconds", type=float)
    c.add_argument("--clients", type=int, default=32)
    c.add_argument("--rate", type=float, help="open loop: creates offered per second")
    c.add_argument("--prefix", default="run")
    c.add_argument("--out")
    c.add_argument("--start-at", type=float)
    c.add_argument(
        "--on-429",
        choices=("retry", "count"),
        default="retry",
        help="a create refused for load: asked again after Retry-After, or counted as answered",
    )
    c.add_argument(
        "--retry-wait",
        type=float,
        help="seconds to wait before asking a refused create again, instead of its Retry-After "
        "(to keep the server offered more than it takes: a capacity measurement)",
    )
    c.add_argument(
        "--then-click",
        metavar="SECRET",
        help="decide each created request at once with a Slack Approve click signed with SECRET",
    )
    k = sub.add_parser("clicks")
    k.add_argument("--url", required=True)
    k.add_argument("--secret", required=True)
    k.add_argument("--approvals", required=True)
    k.add_argument("--rate", type=float, default=100.0)
    k.add_argument("--start-at", type=float)
    args = parser.parse_args()
    if args.command == "create":
        if (args.n is None) == (args.seconds is None) and args.rate is None:
            parser.error("create: give --n or --seconds")
        asyncio.run(create(args))
    else:
        lines = Path(args.approvals).read_text("utf-8").splitlines()
        asyncio.run(clicks(args, [json.loads(line) for line in lines]))


if __name__ == "__main__":
    main()
