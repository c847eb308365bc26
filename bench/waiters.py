"""Agents waiting for their decisions: one held wait per approval, in a process of its own.

    python -m bench.waiters --url URL --key KEY --approvals FILE [--wait 60] [--deadline 600]

For each approval of FILE (bench/load.py create's `--out`: one `{"id", ...}` per line), a
`GET /v1/approvals/{id}?wait=SECONDS` on its own connection, renewed while the request stays
pending, as signoff_client's `wait()` does. Prints `{"holding": N}` once every wait was sent
and none has answered for a second (the server holds them), then, when every request has
left pending (or at the deadline), one JSON object: `returned` (each id and when its
decided record arrived, epoch seconds), `decided` (each record's `decided_at`), `renewed`
(waits that ran out and were held again), `errors` and `statuses`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from datetime import datetime
from pathlib import Path

import aiohttp


async def wait_all(args: argparse.Namespace, ids: list[str]) -> dict[str, object]:
    returned: dict[str, float] = {}
    decided: dict[str, float] = {}  # the record's decided_at: set in the deciding transaction
    statuses: dict[str, int] = {}
    renewed = 0
    errors = 0
    last_answer = time.monotonic()
    headers = {"Authorization": f"Bearer {args.key}"}
    timeout = aiohttp.ClientTimeout(total=None, sock_read=args.wait + 30)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:

        async def one(approval_id: str) -> None:
            nonlocal renewed, errors, last_answer
            url = f"{args.url}/v1/approvals/{approval_id}?wait={args.wait:g}"
            while time.monotonic() < deadline:
                try:
                    async with http.get(url, headers=headers) as response:
                        body = await response.json()
                        status = response.status
                except (aiohttp.ClientError, TimeoutError) as exc:
                    errors += 1
                    print(f"wait {approval_id}: {exc!r}", file=sys.stderr)
                    await asyncio.sleep(1)
                    continue
                last_answer = time.monotonic()
                statuses[str(status)] = statuses.get(str(status), 0) + 1
                if status == 429:
                    await asyncio.sleep(float(response.headers.get("Retry-After", "1")))
                    continue
                if status != 200:
                    errors += 1
                    return
                if body["state"] != "pending":
                    returned[approval_id] = time.time()
                    decided[approval_id] = datetime.fromisoformat(body["decided_at"]).timestamp()
                    return
                renewed += 1

        deadline = time.monotonic() + args.deadline
        tasks = [asyncio.create_task(one(i)) for i in ids]
        # Held: a second without an answer since the waits were sent.
        while time.monotonic() - last_answer < 1.0:  # noqa: ASYNC110 (a quiet period, no event)
            await asyncio.sleep(0.2)
        print(json.dumps({"holding": len(ids) - len(returned)}), flush=True)
        await asyncio.gather(*tasks)
    return {
        "returned": returned,
        "decided": decided,
        "renewed": renewed,
        "errors": errors,
        "statuses": statuses,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--approvals", required=True)
    parser.add_argument("--wait", type=float, default=60.0)
    parser.add_argument("--deadline", type=float, default=600.0)
    args = parser.parse_args()
    args.url = args.url.rstrip("/")
    lines = Path(args.approvals).read_text("utf-8").splitlines()
    ids = [json.loads(line)["id"] for line in lines]
    print(json.dumps(asyncio.run(wait_all(args, ids))), flush=True)


if __name__ == "__main__":
    main()
