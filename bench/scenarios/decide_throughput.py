"""Throughput of create and decide through signoff vs. the same writes as bare SQL.

For each database (a SQLite file; PostgreSQL when reachable), with 32 concurrent clients:
  - signoff create:  intake.create_request (route, hash, INSERT approval + chained event)
  - signoff decide:  Operator.approve_shown (lock, checks, conditional UPDATE, vote, event,
                     webhook outbox job)
  - bare create:     the same statements signoff's create issues (INSERT approval ... ON
                     CONFLICT DO NOTHING RETURNING, INSERT event), driver only
  - bare decide:     the same statements signoff's decide issues (SELECT ... FOR UPDATE,
                     conditional UPDATE ... RETURNING, INSERT event, SELECT card_messages,
                     INSERT outbox webhook job), driver only
Both sides run the same transactions; the ratio is what signoff's own code costs on top:
SQLAlchemy Core, validation, hashing, the audit chain, the checks.
The figure is the ratio signoff / bare (the target: at least 0.5). Then, open loop:
decisions offered at a fixed rate (default 100/s, the expected click load) and their latency
p50/p99 (target: p99 under 50 ms; here without the HTTP layer in front).

    python -m bench decide_throughput [--n 2000] [--clients 32] [--rate 100] [--seconds 10]
                                      [--databases sqlite,postgresql] [--postgres URL]
                                      [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiosqlite
import asyncpg

import bot.outbox  # noqa: F401  (installs the outbox bot.effects queues through)
from bench.harness import run_concurrently, run_open_loop
from bench.results import Results, percentile
from bot.clock import SystemClock
from bot.config import parse_config
from bot.intake import create_request, validate_request
from bot.operator import Actor, Operator
from store.engine import create_engine
from store.migrate import upgrade
from store.repository import Store

DESCRIPTION = "the core (create, decide) from 32 clients beside bare SQL; paced decisions"

CONFIG = {
    "tenants": [{"name": "acme", "webhook_url": "http://127.0.0.1:9/hooks"}],
    "principals": {"alice": {"name": "Alice"}, "sam": {"name": "Sam"}},
    "routes": [{"tenant": "acme", "capability": "payments.*", "approvers": ["alice"]}],
}


def body(i: int) -> dict:
    return {
        "run_id": f"run-{i}",
        "capability": "payments.refund",
        "tool": {"name": "stripe.refunds.create", "arguments": {"charge": f"ch_{i}", "amount": i}},
        "presentation": {"title": f"Refund {i}", "fields": [{"label": "Amount", "value": str(i)}]},
        "requested_by": "sam",
    }


async def bench_signoff(
    url: str, n: int, clients: int, rate: float, seconds: float
) -> dict[str, float]:
    store = Store.from_url(url, pool_size=clients, max_overflow=0)
    directory = parse_config(CONFIG).directory()
    clock = SystemClock()
    operator = Operator(store, directory, clock)
    requests = [validate_request(body(i)) for i in range(n)]
    created: list = [None] * n

    async def create(i: int) -> None:
        created[i] = (await create_request(store, directory, clock, "acme", requests[i])).approval

    async def decide(i: int) -> None:
        await operator.approve_shown(created[i].id, created[i].hash, Actor("alice", via="bench"))

    create_rate, _ = await run_concurrently(n, clients, create)
    decide_rate, latencies = await run_concurrently(n, clients, decide)

    # Open loop: a fresh batch of pending approvals, decided at a fixed offered rate.
    offered = int(rate * seconds)
    requests += [validate_request(body(n + i)) for i in range(offered)]
    created += [None] * offered
    await run_concurrently(offered, clients, lambda i: create(n + i))
    paced = await run_open_loop(rate, offered, lambda i: decide(n + i))
    await store.close()
    return {
        "create": create_rate,
        "decide": decide_rate,
        "p50": percentile(latencies, 50),
        "p99": percentile(latencies, 99),
        "paced_p50": percentile(paced, 50),
        "paced_p99": percentile(paced, 99),
    }


_INSERT_APPROVAL = (
    "INSERT INTO approvals (id, tenant, run_id, kind, capability, tool_name, tool_args, "
    "presentation, hash, assignee, approvers, required_approvals, allow_self_approval, state, "
    "created_at, expires_at, version) VALUES ({}) "
    "ON CONFLICT (tenant, run_id, hash) DO NOTHING RETURNING *"
)
_INSERT_EVENT = (
    "INSERT INTO approval_events (approval_id, seq, type, actor, at, data, prev_hash, hash) "
    "VALUES ({}) RETURNING *"
)
_LOCK = "SELECT * FROM approvals WHERE id = {}"
_UPDATE = (
    "UPDATE approvals SET state = 'approved', decided_by = {}, decided_at = {}, "
    "version = version + 1, audit_seq = 2, audit_head = '2' "
    "WHERE id = {} AND state = 'pending' AND version = 1 AND hash = {} RETURNING *"
)
_CARDS = "SELECT * FROM card_messages WHERE approval_id = {} ORDER BY id"
_OUTBOX = (
    "INSERT INTO outbox (kind, approval_id, payload, dedupe_key, state, attempts, run_after, "
    "created_at) VALUES ('webhook', {}, {}, {}, 'queued', 0, {}, {}) "
    "ON CONFLICT (dedupe_key) DO NOTHING"
)
_PAYLOAD = '{"url": "http://127.0.0.1:9/hooks", "body": {"event": "approved"}}'


def _approval_row(i: int, ids: list[str]) -> tuple:
    now = datetime.now(UTC)
    return (
        ids[i], "acme", f"run-{i}", "tool_call", "payments.refund", "stripe.refunds.create",
        f'{{"charge": "ch_{i}", "amount": {i}}}', f'{{"title": "Refund {i}"}}', "0" * 64,
        "alice", '["alice"]', 1, False, "pending", now, now + timedelta(hours=72), 1,
    )  # fmt: skip


async def bench_bare_sqlite(path: str, n: int, clients: int) -> dict[str, float]:
    conns = []
    for _ in range(clients):
        conn = await aiosqlite.connect(path, isolation_level=None)
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute("PRAGMA busy_timeout=30000")
        await conn.execute("PRAGMA synchronous=NORMAL")
        await conn.execute("PRAGMA foreign_keys=ON")
        conns.append(conn)
    free: asyncio.Queue[aiosqlite.Connection] = asyncio.Queue()
    for conn in conns:
        free.put_nowait(conn)
    # One writer at a time in this process, as signoff's Store does for SQLite.
    turn = asyncio.Lock()
    ids = [str(uuid.uuid4()) for _ in range(n)]
    ins_a = _INSERT_APPROVAL.format(", ".join("?" * 17))
    ins_e = _INSERT_EVENT.format(", ".join("?" * 8))

    async def fetch(conn: aiosqlite.Connection, sql: str, *args: object) -> list:
        async with conn.execute(sql, args) as cursor:
            return list(await cursor.fetchall())

    async def create(i: int) -> None:
        conn = await free.get()
        row = list(_approval_row(i, ids))
        row[14], row[15] = row[14].isoformat(" "), row[15].isoformat(" ")
        async with turn:
            await conn.execute("BEGIN IMMEDIATE")
            await fetch(conn, ins_a, *row)
            await fetch(conn, ins_e, ids[i], 1, "requested", "agent", row[14], "{}", "0" * 64, "1")
            await conn.execute("COMMIT")
        free.put_nowait(conn)

    async def decide(i: int) -> None:
        conn = await free.get()
        now = datetime.now(UTC).isoformat(" ")
        async with turn:
            await conn.execute("BEGIN IMMEDIATE")
            await fetch(conn, _LOCK.format("?"), ids[i])
            await fetch(conn, _UPDATE.format("?", "?", "?", "?"), "alice", now, ids[i], "0" * 64)
            await fetch(conn, ins_e, ids[i], 2, "approved", "alice", now, "{}", "1", "2")
            await fetch(conn, _CARDS.format("?"), ids[i])
            await conn.execute(
                _OUTBOX.format("?", "?", "?", "?", "?"), (ids[i], _PAYLOAD, f"w:{i}", now, now)
            )
            await conn.execute("COMMIT")
        free.put_nowait(conn)

    create_rate, _ = await run_concurrently(n, clients, create)
    decide_rate, _ = await run_concurrently(n, clients, decide)
    for conn in conns:
        await conn.close()
    return {"create": create_rate, "decide": decide_rate}


async def bench_bare_postgres(dsn: str, n: int, clients: int) -> dict[str, float]:
    pool = await asyncpg.create_pool(dsn, min_size=clients, max_size=clients)
    ids = [str(uuid.uuid4()) for _ in range(n)]
    ins_a = _INSERT_APPROVAL.format(", ".join(f"${k}" for k in range(1, 18)))
    ins_e = _INSERT_EVENT.format(", ".join(f"${k}" for k in range(1, 9)))
    lock = _LOCK.format("$1") + " FOR UPDATE"
    upd = _UPDATE.format("$1", "$2", "$3", "$4")
    cards = _CARDS.format("$1")
    enqueue = _OUTBOX.format("$1", "$2", "$3", "$4", "$5")

    async def create(i: int) -> None:
        row = _approval_row(i, ids)
        async with pool.acquire() as conn, conn.transaction():
            await conn.fetch(ins_a, *row)
            await conn.fetch(ins_e, ids[i], 1, "requested", "agent", row[14], "{}", "0" * 64, "1")

    async def decide(i: int) -> None:
        now = datetime.now(UTC)
        async with pool.acquire() as conn, conn.transaction():
            await conn.fetch(lock, ids[i])
            await conn.fetch(upd, "alice", now, ids[i], "0" * 64)
            await conn.fetch(ins_e, ids[i], 2, "approved", "alice", now, "{}", "1", "2")
            await conn.fetch(cards, ids[i])
            await conn.execute(enqueue, ids[i], _PAYLOAD, f"w:{i}", now, now)

    create_rate, _ = await run_concurrently(n, clients, create)
    decide_rate, _ = await run_concurrently(n, clients, decide)
    await pool.close()
    return {"create": create_rate, "decide": decide_rate}


async def fresh_postgres(admin: str) -> tuple[str, str]:
    name = f"signoff_bench_{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(admin)
    await conn.execute(f"CREATE DATABASE {name}")
    await conn.close()
    base = admin.rsplit("/", 1)[0]
    return name, f"{base}/{name}"


async def drop_postgres(admin: str, name: str) -> None:
    conn = await asyncpg.connect(admin)
    await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    await conn.close()


async def migrated(url: str) -> None:
    engine = create_engine(url)
    await upgrade(engine)
    await engine.dispose()


async def bytes_per_approval(path: Path) -> str:
    """Database size after a checkpoint, divided by the approvals it holds."""
    async with aiosqlite.connect(path) as conn:
        await conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        async with conn.execute(
            "SELECT count(*), (SELECT page_count * page_size FROM pragma_page_count, "
            "pragma_page_size) FROM approvals"
        ) as cursor:
            count, size = await cursor.fetchone()
    return f"{size / count / 1024:.1f} KiB ({count} approvals)"


def report(label: str, ours: dict[str, float], bare: dict[str, float], rate: float) -> None:
    print(f"\n{label}")
    for op in ("create", "decide"):
        ratio = ours[op] / bare[op]
        print(
            f"  {op:<7} signoff {ours[op]:7.0f}/s   bare SQL {bare[op]:7.0f}/s   ratio {ratio:.2f}"
        )
    print(
        f"  decision latency, {rate:.0f}/s offered: p50 {ours['paced_p50']:.1f} ms, "
        f"p99 {ours['paced_p99']:.1f} ms"
    )
    print(
        f"  decision latency, saturated by the clients: p50 {ours['p50']:.1f} ms, "
        f"p99 {ours['p99']:.1f} ms"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--rate", type=float, default=100.0, help="offered decisions per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the paced run")
    parser.add_argument("--databases", default="sqlite,postgresql")
    parser.add_argument(
        "--postgres",
        default=os.environ.get(
            "SIGNOFF_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
        ),
    )


def run(args: argparse.Namespace) -> Results:
    return asyncio.run(measure(args))


async def measure(args: argparse.Namespace) -> Results:
    print(
        f"n={args.n} clients={args.clients} rate={args.rate:.0f}/s for {args.seconds:.0f} s "
        f"cpus={os.cpu_count()}"
    )
    figures: dict[str, dict[str, dict[str, float]]] = {}
    databases = args.databases.split(",")

    if "sqlite" in databases:
        with tempfile.TemporaryDirectory() as tmp:
            ours_db, bare_db = Path(tmp, "signoff.db"), Path(tmp, "bare.db")
            await migrated(f"sqlite+aiosqlite:///{ours_db}")
            await migrated(f"sqlite+aiosqlite:///{bare_db}")
            ours = await bench_signoff(
                f"sqlite+aiosqlite:///{ours_db}", args.n, args.clients, args.rate, args.seconds
            )
            bare = await bench_bare_sqlite(str(bare_db), args.n, args.clients)
            report("SQLite (aiosqlite, WAL, BEGIN IMMEDIATE)", ours, bare, args.rate)
            print(
                "  stored per approval (row, events, outbox job): "
                f"{await bytes_per_approval(ours_db)}"
            )
            figures["sqlite"] = {"signoff": ours, "bare": bare}

    if "postgresql" in databases:
        await bench_postgres(args, figures)
    found = Results(detail=figures)
    found.add_document(figures)
    return found


async def bench_postgres(args: argparse.Namespace, figures: dict) -> None:
    try:
        ours_name, ours_url = await fresh_postgres(args.postgres)
        bare_name, bare_url = await fresh_postgres(args.postgres)
    except (OSError, asyncpg.PostgresError) as exc:
        print(f"\nPostgreSQL skipped: {exc}")
        return
    try:
        await migrated(ours_url)
        await migrated(bare_url)
        ours = await bench_signoff(ours_url, args.n, args.clients, args.rate, args.seconds)
        bare = await bench_bare_postgres(bare_url, args.n, args.clients)
        report("PostgreSQL (asyncpg)", ours, bare, args.rate)
        figures["postgresql"] = {"signoff": ours, "bare": bare}
    finally:
        await drop_postgres(args.postgres, ours_name)
        await drop_postgres(args.postgres, bare_name)

