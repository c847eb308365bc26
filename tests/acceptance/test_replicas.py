"""Two `signoff serve` replicas on one PostgreSQL database, with one webhook receiver.

What this proves, end to end and with real processes:

- 200 approvals created through replica 1 are visible, identically, through replica 2.
- Two replicas deciding the same approval at the same moment: exactly one decision wins, the
  other is refused with NotPending naming the state (and the decider) the winner left; the
  audit trail holds one decision event per approval and `signoff audit verify` finds every
  chain intact.
- Both replicas' outbox runners share one queue: every decision webhook reaches the receiver
  at least once, a delivery id never arrives with two different bodies, every body carries a
  valid signature, and it reports the decision that actually won.
- Two claims of one approved call through the two replicas at once: one 200, one 409
  not_pending; the winner completes with its claim token, so every approved call ends
  executed exactly once and every rejected one never started.
- Nothing is left queued in the outbox.

Why the decisions go through two `Operator` instances and not over HTTP: a human decision has
no HTTP endpoint yet (Slack, Telegram and the web inbox arrive in later issues), and every such
surface will call the Operator in whichever replica the click lands on. Two Operators, each
with its own Store (its own engine and connection pool) on the same URL, are exactly what two
replicas' chat handlers will be; the database, not any process's memory, must pick the winner.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
import urllib.request
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest

from bot.config import parse_config
from bot.errors import NotPending
from bot.operator import Actor, Operator
from bot.transitions import Transition
from signoff_client import verify_webhook
from store.repository import Store
from tests.support.cli import Cli
from tests.support.databases import POSTGRES_ONLY, asyncpg_dsn
from tests.support.samples import request_body
from tests.support.service import (
    API_KEYS,
    WEBHOOK_SECRET,
    Delivery,
    ServerProcess,
    WebhookReceiver,
    service_config,
    service_env,
    wait_until,
    write_config,
)

APPROVALS = 200
DECISIONS_AT_ONCE = 30  # Operator calls in flight: 15 races, one call per replica each
CLAIMS_AT_ONCE = 10  # claim races in flight (two HTTP requests each)
SEED = 20260302
REPLICA_A = Actor(principal="alice", via="cli")
REPLICA_B = Actor(principal="bob", via="cli")


@dataclass(frozen=True)
class Won:
    """The decision that won one approval's race."""

    state: str  # approved or rejected
    decided_by: str  # alice (replica A) or bob (replica B)


@POSTGRES_ONLY
def test_two_replicas_share_one_postgresql_database(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    rng = random.Random(SEED)
    with WebhookReceiver() as receiver, ExitStack() as servers:
        config = service_config(db_url, receiver.url)
        config_path = write_config(tmp_path / "signoff.toml", config)
        one = ServerProcess(config_path, tmp_path)
        two = ServerProcess(config_path, tmp_path)
        servers.callback(two.stop)
        servers.callback(one.stop)
        with _logs_on_failure(one, two):
            one.start()
            two.start()
            bases = (one.url, two.url)

            # 1. Create through replica 1 over HTTP; replica 2 sees the same rows.
            created = asyncio.run(_create_all(one.url))
            ids = [a["id"] for a in created]
            assert len(set(ids)) == APPROVALS
            assert {(a["state"], a["assignee"]) for a in created} == {("pending", "group:finance")}

            # 2. Two replicas race a decision on every approval.
            plans = [rng.choice(("approve", "reject")) for _ in created]
            orders = [rng.random() < 0.5 for _ in created]
            races = asyncio.run(_race_decisions(db_url, config, created, plans, orders))
            won = _judge_races(created, plans, races)
            approved = [i for i in ids if won[i].state == "approved"]
            rejected = [i for i in ids if won[i].state == "rejected"]
            by_replica = {
                "A": sum(w.decided_by == REPLICA_A.principal for w in won.values()),
                "B": sum(w.decided_by == REPLICA_B.principal for w in won.values()),
            }
            # The race was real: each replica won some, and both outcomes occurred.
            assert by_replica["A"] and by_replica["B"], by_replica
            assert approved and rejected, (len(approved), len(rejected))

            records = asyncio.run(_get_all(bases, ids))
            for aid, record in records.items():
                assert (record["state"], record["decided_by"]) == (
                    won[aid].state,
                    won[aid].decided_by,
                ), record
                assert record["execution"] == "not_started", record
                assert record["decided_at"] is not None, record
            trails = asyncio.run(_audit_trails(db_url, ids))
            for aid in ids:
                assert trails[aid] == [
                    ("requested", "agent:acme"),
                    (won[aid].state, f"cli:{won[aid].decided_by}"),
                ], (aid, trails[aid])
            cli = Cli(cwd=tmp_path, env=service_env(config_path))
            verified = cli.run("audit", "verify")
            assert verified.returncode == 0, str(verified)
            assert f"{2 * APPROVALS} events across {APPROVALS} approvals" in verified.stdout

            # 3. Both runners share the outbox: every decision webhook arrives, correctly.
            deliveries = receiver.wait_for(
                lambda seen: _decided_ids(seen) >= set(ids), timeout=30.0
            )
            redelivered = _check_webhooks(deliveries, won)

            # 4. Two claims of each approved call through the two replicas at once.
            claimed_via = asyncio.run(_race_claims(bases, approved))

            final = asyncio.run(_get_all(bases, ids))
            for aid in approved:
                record = final[aid]
                assert (record["state"], record["execution"]) == ("executed", "finished"), record
                assert record["outcome"] == {"status": "succeeded", "result": {"refund": aid}}
            for aid in rejected:
                record = final[aid]
                assert (record["state"], record["execution"]) == ("rejected", "not_started")
                assert record["claimed_at"] is None, record

            # 5. The shared queue drained: nothing left queued (or dead) for these approvals.
            jobs = wait_until(
                lambda: _settled_outbox(db_url, ids), timeout=15.0, what="outbox drained"
            )
            assert sorted(jobs) == sorted(ids), "one decision webhook job per approval"
            # Each job was settled done by exactly one replica; both runners took part.
            sent = [_webhooks_done(base) for base in bases]
            assert sum(sent) == APPROVALS, sent
            assert all(sent), f"one runner delivered every webhook: {sent}"
            verified = cli.run("audit", "verify")
            assert verified.returncode == 0, str(verified)
            events = 2 * APPROVALS + 2 * len(approved)  # + claimed, executed
            assert f"{events} events across {APPROVALS} approvals" in verified.stdout
            # A clean stop (SIGTERM) of both replicas, with nothing alarming in their logs.
            for server in (one, two):
                assert server.terminate() == 0, server.log[-3000:]
                trouble = [x for x in server.log.splitlines() if " ERROR " in x or "Traceback" in x]
                assert not trouble, trouble

    elapsed = time.monotonic() - started
    with capsys.disabled():
        print(
            f"\n[replicas] {APPROVALS} approvals, {len(approved)} approved / {len(rejected)} "
            f"rejected; races won by replica A {by_replica['A']}, B {by_replica['B']}; "
            f"claims won via server 1 {claimed_via[0]}, server 2 {claimed_via[1]}; "
            f"webhooks sent by server 1 {sent[0]}, server 2 {sent[1]}, "
            f"{len(deliveries)} arrivals ({redelivered} redelivered); "
            f"{elapsed:.1f} s"
        )


# -- phases ---------------------------------------------------------------------------------


def _session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        headers={"Authorization": f"Bearer {API_KEYS['acme']}"},
        timeout=aiohttp.ClientTimeout(total=30),
    )


async def _create_all(base: str) -> list[dict[str, Any]]:
    """POST every request through one server, a few at a time; returns the created records."""
    limit = asyncio.Semaphore(16)

    async with _session() as http:

        async def create(i: int) -> dict[str, Any]:
            body = request_body(
                run_id=f"replica-run-{i:03d}",
                tool={"name": "stripe.refunds.create", "arguments": {"charge": f"ch_{i}"}},
                requested_by="sam",  # neither alice nor bob: both may decide
            )
            async with limit, http.post(f"{base}/v1/approvals", json=body) as response:
                document = await response.json()
                assert response.status == 201, document
                return dict(document)

        return list(await asyncio.gather(*(create(i) for i in range(APPROVALS))))


async def _race_decisions(
    url: str,
    config: dict[str, Any],
    approvals: Sequence[dict[str, Any]],
    plans: Sequence[str],
    bob_first: Sequence[bool],
) -> list[list[Transition | BaseException]]:
    """For every approval, replica A approves as alice while replica B approves or rejects as
    bob, both at once, in a seeded random order. Returns [alice's result, bob's result] each."""
    directory = parse_config(config).directory()
    store_a, store_b = Store.from_url(url), Store.from_url(url)
    replica_a, replica_b = Operator(store_a, directory), Operator(store_b, directory)
    limit = asyncio.Semaphore(DECISIONS_AT_ONCE // 2)

    async def race(approval: dict[str, Any], plan: str, b_first: bool) -> list[Any]:
        aid, shown = approval["id"], approval["hash"]
        decide_b = replica_b.approve_shown if plan == "approve" else replica_b.reject_shown
        async with limit:
            a = replica_a.approve_shown(aid, shown, REPLICA_A)
            b = decide_b(aid, shown, REPLICA_B)
            if b_first:
                b_result, a_result = await asyncio.gather(b, a, return_exceptions=True)
            else:
                a_result, b_result = await asyncio.gather(a, b, return_exceptions=True)
        return [a_result, b_result]

    try:
        return list(
            await asyncio.gather(
                *(race(a, p, o) for a, p, o in zip(approvals, plans, bob_first, strict=True))
            )
        )
    finally:
        await store_a.close()
        await store_b.close()


def _judge_races(
    approvals: Sequence[dict[str, Any]],
    plans: Sequence[str],
    races: Sequence[Sequence[Transition | BaseException]],
) -> dict[str, Won]:
    """Exactly one decision per approval won; the loser was told what the winner did."""
    won: dict[str, Won] = {}
    for approval, plan, results in zip(approvals, plans, races, strict=True):
        aid = approval["id"]
        winners = [r for r in results if isinstance(r, Transition)]
        losers = [r for r in results if not isinstance(r, Transition)]
        assert len(winners) == 1 and len(losers) == 1, (aid, results)
        winner, loser = winners[0].approval, losers[0]
        a_won = results[0] is winners[0]
        expected = "approved" if a_won or plan == "approve" else "rejected"
        decider = REPLICA_A.principal if a_won else REPLICA_B.principal
        assert winner.id == aid
        assert (winner.state, winner.decided_by) == (expected, decider), (aid, results)
        assert type(loser) is NotPending, (aid, repr(loser))
        assert (loser.state, loser.decided_by) == (winner.state, winner.decided_by), repr(loser)
        assert f"approval is {winner.state} (by {winner.decided_by}" in loser.message
        assert winner.decided_by is not None
        won[aid] = Won(winner.state, winner.decided_by)
    return won


async def _get_all(bases: Sequence[str], ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """GET every approval, alternating between the servers."""
    limit = asyncio.Semaphore(16)

    async with _session() as http:

        async def get(i: int, aid: str) -> dict[str, Any]:
            base = bases[i % len(bases)]
            async with limit, http.get(f"{base}/v1/approvals/{aid}") as response:
                document = await response.json()
                assert response.status == 200, document
                return dict(document)

        records = await asyncio.gather(*(get(i, aid) for i, aid in enumerate(ids)))
    return {record["id"]: record for record in records}


async def _audit_trails(url: str, ids: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        rows = await conn.fetch(
            "SELECT approval_id, type, actor FROM approval_events "
            "WHERE approval_id = ANY($1::text[]) ORDER BY approval_id, seq",
            list(ids),
        )
    finally:
        await conn.close()
    trails: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for row in rows:
        trails[row["approval_id"]].append((row["type"], row["actor"]))
    return trails


def _decided_ids(deliveries: Sequence[Delivery]) -> set[str]:
    return {d.json()["approval"]["id"] for d in deliveries}


def _check_webhooks(deliveries: Sequence[Delivery], won: dict[str, Won]) -> int:
    """Every delivery verifies and reports the winning decision; a delivery id always carries
    the same body, and each approval has one decision delivery. Returns how many arrivals
    were redeliveries of an id already seen."""
    bodies: dict[str, set[bytes]] = defaultdict(set)
    delivery_ids: dict[str, set[str]] = defaultdict(set)
    for delivery in deliveries:
        assert verify_webhook(delivery.headers, delivery.body, WEBHOOK_SECRET) == (
            delivery.delivery_id
        )
        body = json.loads(delivery.body)
        approval = body["approval"]
        assert body["delivery_id"] == delivery.delivery_id, body
        expected = won[approval["id"]]
        assert body["event"] == expected.state, body
        assert (approval["state"], approval["decided_by"]) == (expected.state, expected.decided_by)
        bodies[delivery.delivery_id].add(delivery.body)
        delivery_ids[approval["id"]].add(delivery.delivery_id)
    changed = {d: len(b) for d, b in bodies.items() if len(b) > 1}
    assert not changed, f"delivery ids that arrived with different bodies: {changed}"
    several = {a: sorted(d) for a, d in delivery_ids.items() if len(d) != 1}
    assert not several, f"approvals with more than one decision delivery: {several}"
    return len(deliveries) - len(bodies)


async def _race_claims(bases: Sequence[str], ids: Sequence[str]) -> tuple[int, int]:
    """Claim each approved call through both servers at once: one 200, one 409 not_pending.
    The winner completes with its token through the other server (the claim lives in the
    database, not in the replica that granted it). Returns claims won via each server."""
    limit = asyncio.Semaphore(CLAIMS_AT_ONCE)
    wins = [0, 0]

    async with _session() as http:

        async def claim(base: str, aid: str) -> tuple[int, dict[str, Any]]:
            async with http.post(f"{base}/v1/approvals/{aid}/claim", json={}) as response:
                return response.status, dict(await response.json())

        async def race(aid: str) -> None:
            async with limit:
                first, second = await asyncio.gather(*(claim(base, aid) for base in bases))
                statuses = sorted((first[0], second[0]))
                assert statuses == [200, 409], (aid, first, second)
                via = 0 if first[0] == 200 else 1
                granted, refused = (first, second) if via == 0 else (second, first)
                error = refused[1]["error"]
                assert (error["code"], error["state"]) == ("not_pending", "executing"), error
                token = granted[1]["claim_token"]
                assert granted[1]["approval"]["state"] == "executing", granted
                wins[via] += 1
                done = {"claim_token": token, "outcome": "succeeded", "result": {"refund": aid}}
                other = bases[1 - via]
                async with http.post(f"{other}/v1/approvals/{aid}/complete", json=done) as r:
                    record = await r.json()
                    assert r.status == 200, record
                assert (record["state"], record["execution"]) == ("executed", "finished")

        await asyncio.gather(*(race(aid) for aid in ids))
    return wins[0], wins[1]


def _webhooks_done(base: str) -> int:
    """How many webhook jobs this server's runner settled as done (its /metrics counter)."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as response:
        text = response.read().decode()
    found = re.search(
        r'^signoff_outbox_jobs_total\{kind="webhook",result="done"\} (\S+)$', text, re.M
    )
    return int(float(found.group(1))) if found else 0


def _settled_outbox(url: str, ids: Sequence[str]) -> list[str] | None:
    """The approval ids of this run's outbox jobs, once none is queued or dead; else None."""

    async def query() -> list[asyncpg.Record]:
        conn = await asyncpg.connect(asyncpg_dsn(url))
        try:
            return list(
                await conn.fetch(
                    "SELECT approval_id, kind, state FROM outbox "
                    "WHERE approval_id = ANY($1::text[])",
                    list(ids),
                )
            )
        finally:
            await conn.close()

    rows = asyncio.run(query())
    if any(row["state"] != "done" for row in rows):
        return None
    assert {row["kind"] for row in rows} == {"webhook"}, rows
    return [row["approval_id"] for row in rows]


@contextmanager
def _logs_on_failure(*servers: ServerProcess) -> Iterator[None]:
    """On any failure, print the servers' logs (pytest shows them with the failure)."""
    try:
        yield
    except BaseException:
        for n, server in enumerate(servers, 1):
            print(f"--- server {n} log (tail)\n{server.log[-6000:]}")
        raise
