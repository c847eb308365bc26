"""How fast the web pages answer over a database of 100,000 approvals.

Fills a database with N approvals spread over the last 30 days, as signoff itself would have
left them: the newest still pending (about one in twenty), the rest approved and executed,
rejected, or expired, each with its full audit chain (requested, decided, claimed, executed),
plus a few dead outbox jobs and an active delegation. The rows and events are built with
intake's own `new_approval` and `audit.next_event` and inserted in bulk, so filling takes
seconds instead of the hours the API would take; every chain verifies.

Then starts `signoff serve` as a subprocess on that database, signs in with
`signoff web login --as NAME` (an operator, and an approver for the inbox), and times
GET /dashboard, its second page, /web/inbox and one /dashboard/approvals/ID: one warm-up
request each, then --repeat timed ones, printing min / median / max in milliseconds.

    python -m bench dashboard_pages [--n 100000] [--repeat 9] [--postgres URL | --no-postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp

from bench.harness import postgres_database
from bench.results import Results
from bot import audit
from bot.canonical import approval_hash
from bot.clock import utc_iso
from bot.intake import Draft, new_approval
from bot.model import Kind
from store.engine import create_engine
from store.migrate import upgrade
from store.repository import Store
from store.schema import approval_events, approvals, delegations, outbox

DESCRIPTION = "the web pages' response times over 100,000 approvals"

ROOT = Path(__file__).resolve().parents[2]
SECRET = "bench-dashboard-secret-0123456789abcdef"
DAYS = 30
TTL = timedelta(hours=72)
# How long decisions took, cycled through: from seconds to more than a day.
WAITS = [timedelta(seconds=s) for s in (20, 180, 720, 2400, 7200, 32400, 108000)]
DECIDERS = ["alice", "bob", "carol"]
SURFACES = ["slack", "web", "cli", "telegram"]
LATER_COLUMNS = (
    "decided_by",
    "decided_at",
    "decision_note",
    "grant_expires_at",
    "claim_token",
    "claimed_at",
    "lease_until",
    "executed_at",
    "outcome",
)
_LISTENING = re.compile(r"signoff listening on http://[^\s:]+:(\d+)")


def config_toml(database_url: str) -> str:
    return f"""
[server]
listen = "127.0.0.1:0"
public_url = "http://127.0.0.1:8700"

[database]
url = "{database_url}"

[sweeper]
interval = 3600

[web]

[[tenants]]
name = "acme"

[[tenants]]
name = "globex"

[principals.olga]
name = "Olga Ops"
operator = true

[principals.alice]
name = "Alice Ng"

[principals.bob]
name = "Bob Stone"

[principals.carol]
name = "Carol Diaz"

[[routes]]
tenant = "*"
capability = "*"
approvers = ["alice", "bob", "carol"]
"""


def draft(i: int) -> Draft:
    tenant = "acme" if i % 3 else "globex"
    capability = ("payments.refund", "contracts.cancel", "db.migrate")[i % 3]
    presentation = {
        "title": f"Request {i}: {capability}",
        "fields": [{"label": "Amount", "value": f"€{i % 1000}.00"}],
    }
    args = {"id": f"obj_{i}", "amount": i % 1000}
    kind = Kind.TOOL_CALL
    return Draft(
        tenant=tenant,
        run_id=f"run-{i}",
        kind=kind,
        capability=capability,
        tool_name="tool.call",
        tool_args=args,
        presentation=presentation,
        hash=approval_hash(kind, capability, presentation, "tool.call", args),
        reason="policy says so",
        requested_by="agent",
        approvers=["alice", "bob", "carol"],
        required_approvals=1,
        allow_self_approval=False,
        approval_ttl=TTL,
        grant_ttl=timedelta(hours=24),
        first_escalation=None,
    )


def _move(
    row: dict[str, Any],
    trail: list[dict[str, Any]],
    kind: str,
    actor: str,
    at: datetime,
    values: dict[str, Any],
    data: dict[str, Any],
) -> None:
    """What transitions.apply does to a row and its trail, without a database."""
    data = data | {"state": values["state"]}
    if "decided_by" in values:
        data["decided_by"] = values["decided_by"]
    event = audit.next_event(
        row["id"],
        kind,
        after_seq=row["audit_seq"],
        after_hash=row["audit_head"],
        actor=actor,
        at=at,
        data=data,
    )
    row.update(values, version=row["version"] + 1, **audit.head_of(event))
    trail.append(event)


def build(i: int, n: int, now: datetime) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    created = now - timedelta(days=DAYS) + timedelta(days=DAYS) * i / n
    request = draft(i)
    values, requested = new_approval(request, now=created, actor=f"agent:{request.tenant}")
    row = dict.fromkeys(LATER_COLUMNS) | values  # one shape for every row of the bulk insert
    trail = [requested]
    decided = created + WAITS[i % len(WAITS)]
    if decided >= now or (created > now - TTL and i % 2):
        return row, trail  # still pending
    if i % 5 == 4 and created + TTL < now:
        deadline = created + TTL
        data = {"clock": "approval_ttl", "deadline": utc_iso(deadline), "from": "pending"}
        _move(row, trail, "expired", "system", deadline, {"state": "expired"}, data)
        return row, trail
    who = DECIDERS[i % len(DECIDERS)]
    actor = f"{SURFACES[i % len(SURFACES)]}:{who}"
    if i % 4 == 3:
        values = {
            "state": "rejected",
            "decided_by": who,
            "decided_at": decided,
            "decision_note": "no",
        }
        _move(
            row,
            trail,
            "rejected",
            actor,
            decided,
            values,
            {"note": "no", "shown_hash": row["hash"]},
        )
        return row, trail
    values = {
        "state": "approved",
        "decided_by": who,
        "decided_at": decided,
        "decision_note": None,
        "grant_expires_at": decided + timedelta(hours=24),
    }
    _move(row, trail, "approved", actor, decided, values, {"note": None, "shown_hash": row["hash"]})
    claimed, lease = decided + timedelta(seconds=5), decided + timedelta(minutes=10, seconds=5)
    values = {
        "state": "executing",
        "claim_token": uuid.uuid4().hex,
        "claimed_at": claimed,
        "lease_until": lease,
    }
    _move(
        row,
        trail,
        "claimed",
        f"agent:{row['tenant']}",
        claimed,
        values,
        {"lease_until": utc_iso(lease)},
    )
    done = claimed + timedelta(seconds=2)
    values = {
        "state": "executed",
        "executed_at": done,
        "outcome": {"status": "succeeded", "result": None},
    }
    _move(row, trail, "executed", f"agent:{row['tenant']}", done, values, {"outcome": "succeeded"})
    return row, trail


async def fill(url: str, n: int, now: datetime) -> str:
    """Load the database; returns the id of an executed approval (its timeline is timed)."""
    engine = create_engine(url)
    await upgrade(engine)
    await engine.dispose()
    store = Store.from_url(url)
    executed = ""
    counts: dict[str, int] = {}
    started = time.perf_counter()
    for chunk in range(0, n, 5000):
        built = [build(i, n, now) for i in range(chunk, min(chunk + 5000, n))]
        for row, _ in built:
            counts[row["state"]] = counts.get(row["state"], 0) + 1
            if row["state"] == "executed":
                executed = row["id"]
        async with store.write() as tx:  # bulk load for the benchmark only
            await tx.conn.execute(approvals.insert(), [row for row, _ in built])
            await tx.conn.execute(approval_events.insert(), [e for _, t in built for e in t])
    async with store.write() as tx:
        await tx.conn.execute(
            outbox.insert(),
            [
                {
                    "kind": "webhook",
                    "approval_id": executed,
                    "payload": {"url": f"https://agent{j}.example/hooks", "tenant": "acme"},
                    "dedupe_key": f"bench-dead-{j}",
                    "state": "dead",
                    "attempts": 10,
                    "run_after": now,
                    "last_error": "HTTP 503 from https://agent.example/hooks",
                    "created_at": now - timedelta(hours=j),
                    "done_at": now - timedelta(hours=j),
                }
                for j in range(20)
            ],
        )
        await tx.conn.execute(
            delegations.insert(),
            {
                "id": str(uuid.uuid4()),
                "principal": "alice",
                "delegate": "bob",
                "scope": "*",
                "starts_at": now - timedelta(days=1),
                "ends_at": now + timedelta(days=7),
                "created_by": "cli:alice",
                "created_at": now - timedelta(days=1),
            },
        )
    if not url.startswith("sqlite"):
        # What autovacuum does soon after a bulk load (planner statistics, visibility map);
        # SQLite is left as signoff leaves it, without ANALYZE.
        async with store.engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.exec_driver_sql("VACUUM ANALYZE")
    await store.close()
    shown = ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items()))
    print(f"  filled {n:,} approvals in {time.perf_counter() - started:.1f} s ({shown})")
    return executed


class Server:
    """`signoff serve` on the benchmark's config, on a free port."""

    def __init__(self, config: Path) -> None:
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")},
            "SIGNOFF_CONFIG": str(config),
            "SIGNOFF_WEB_SECRET": SECRET,
            "PYTHONPATH": str(ROOT),
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "serve"],
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.port: int | None = None
        self.log: list[str] = []
        ready = threading.Event()

        def drain() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.log.append(line)
                if match := _LISTENING.search(line):
                    self.port = int(match.group(1))
                    ready.set()
            ready.set()

        threading.Thread(target=drain, daemon=True).start()
        if not ready.wait(60) or self.port is None:
            self.stop()
            raise SystemExit("signoff serve did not start:\n" + "".join(self.log))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def login(self, principal: str) -> str:
        """The path of a fresh sign-in link from `signoff web login --as NAME`."""
        out = subprocess.run(
            [sys.executable, "-m", "bot.cli", "web", "login", "--as", principal],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        match = re.search(r"/web/login/\S+", out)
        assert match, out
        return match.group()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(15)


async def time_pages(
    server: Server, executed: str, repeat: int, found: Results, db: str
) -> None:
    async def session(principal: str) -> aiohttp.ClientSession:
        http = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
        # The link's page has a Continue button; pressing it (a POST) opens the session.
        async with http.post(server.url + server.login(principal), allow_redirects=False) as r:
            assert r.status == 303, await r.text()
        return http

    olga, alice = await session("olga"), await session("alice")
    try:
        async with olga.get(server.url + "/dashboard") as r:
            first = await r.text()
        after = re.search(r'href="(/dashboard\?after=[^"]+)"', first)
        pages = [
            ("GET /dashboard", olga, "/dashboard"),
            ("GET /dashboard (page 2)", olga, after.group(1) if after else "/dashboard"),
            ("GET /web/inbox (alice)", alice, "/web/inbox"),
            ("GET /dashboard/approvals/ID", olga, f"/dashboard/approvals/{executed}"),
        ]
        for label, http, path in pages:
            took, status, size = [], 0, 0
            for attempt in range(repeat + 1):
                t0 = time.perf_counter()
                async with http.get(server.url + path) as r:
                    body = await r.read()
                    status, size = r.status, len(body)
                if attempt:  # the first request warms caches and the connection
                    took.append((time.perf_counter() - t0) * 1000)
            for ms in took:
                found.add(f"{db}/{label.strip()}", ms, "ms")
            print(
                f"  {label:<28} {status}  {size / 1024:6.1f} KiB   min {min(took):6.1f} ms   "
                f"median {statistics.median(took):6.1f} ms   max {max(took):6.1f} ms"
            )
    finally:
        await olga.close()
        await alice.close()


async def run_on(
    url: str, n: int, repeat: int, directory: Path, found: Results, db: str
) -> None:
    executed = await fill(url, n, datetime.now(UTC))
    config = directory / "signoff.toml"
    config.write_text(config_toml(url), "utf-8")
    server = Server(config)
    try:
        await time_pages(server, executed, repeat, found, db)
    finally:
        server.stop()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--no-postgres", action="store_true")


def run(args: argparse.Namespace) -> Results:
    return asyncio.run(measure(args))


async def measure(args: argparse.Namespace) -> Results:
    found = Results()
    with tempfile.TemporaryDirectory() as tmp:
        print(f"SQLite, {args.n:,} approvals:")
        url = f"sqlite+aiosqlite:///{tmp}/bench.db"
        await run_on(url, args.n, args.repeat, Path(tmp), found, "sqlite")
        if not args.no_postgres:
            async with postgres_database(args.postgres) as pg:
                if pg is not None:
                    print(f"PostgreSQL, {args.n:,} approvals:")
                    await run_on(pg, args.n, args.repeat, Path(tmp), found, "postgresql")
    return found

