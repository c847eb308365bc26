"""kill -9 under load: two `signoff serve` processes on one PostgreSQL database, either of them
killed at random moments while agents create, humans decide (the CLI and signed Slack clicks)
and agents claim and complete; each killed server is started again.

The load (tests/support/fault_load.py), for APPROVALS approvals, LIFECYCLES_AT_ONCE at a time,
each planned from the seed:

- create over the agent API (`POST /v1/approvals`) through either live server;
- decide it: `signoff approvals approve|reject ... --json` as a process of its own (the CLI
  writes to the database itself), or a correctly signed Slack click on the card the servers' outbox
  posted to the fake Slack Web API (Approve, or Reject and then the modal's submission), or
  both at once with opposite decisions by two people (a race the database must settle);
- claim an approved call (`Idempotency-Key` header) and complete it (succeeded or failed).

Meanwhile KILLS times, at seeded points of the load's progress and at a moment it has a write
in flight, one server (chosen by the seed) gets SIGKILL and is started again after a short
pause; the webhook receiver answers a little late, so kills also catch deliveries in flight.
A request in flight to the killed server fails with a connection error: the test treats it
as unacknowledged (it may or may not have committed) and retries through whichever server is
up. A create retried is the same approval (run_id and hash); a claim retried with the same
key recovers the same claim; a completion repeated returns the recorded outcome; a Slack
click is clicked again, as a person would (a new click, not a replay). The outbox lease is
short so that jobs a killed server held come back quickly.

Then, with the database as the judge:

- every acknowledged write is there: every create answered 201/200 is a row with its run_id
  and hash, and no run_id has two rows; every decision the CLI reported, and every decision a
  Slack click was answered 200 for, is the approval's one decision event, by that person; a
  claim answered 200 shows in the row and its trail (one `claimed` event), and a completion
  answered 200 is the row's state and outcome;
- nothing is decided twice: at most one `approved`/`rejected` event per approval, never both,
  and no approval has two acknowledged decisions;
- every transition that warrants a webhook was delivered at least once (the receiver records
  every arrival), each delivery id always with the same body, signed, saying what the trail
  says; the outbox drains (nothing queued, nothing dead) within a bounded wait;
- `signoff audit verify` exits 0 and counts every event;
- no answer was a 500 and no server logged a traceback.

The seed is printed; set SIGNOFF_FAULT_SEED to replay a run's plan and kill points (the
timing of a run is not reproducible, the decisions it makes are).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from bot.outbox.jobs import WEBHOOK_STATES  # a transition into one of these sends a webhook
from signoff_client import verify_webhook
from tests.fakes.slack import FakeSlack
from tests.support.cli import Cli
from tests.support.databases import POSTGRES_ONLY, asyncpg_dsn
from tests.support.fault_load import (
    AFTER_APPROVAL,
    CHANNEL,
    DECISION_EVENTS,
    DRAIN_TIMEOUT,
    KILLS,
    NOTE_EVENTS,
    OUTBOX,
    SLACK_ENV,
    SLACK_TOKEN,
    Acked,
    Pair,
    SlowReceiver,
    run_load,
)
from tests.support.service import (
    WEBHOOK_SECRET,
    Delivery,
    Fleet,
    service_config,
    service_env,
    write_config,
)

# -- what the database says --------------------------------------------------------------------


@dataclass(frozen=True)
class Db:
    approvals: dict[str, dict[str, Any]]  # id -> row
    events: dict[str, list[dict[str, Any]]]  # approval id -> trail, in order
    outbox: list[dict[str, Any]]


async def read_db(url: str) -> Db:
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        rows = await conn.fetch("SELECT * FROM approvals")
        events = await conn.fetch(
            "SELECT approval_id, seq, type, actor, data FROM approval_events "
            "ORDER BY approval_id, seq"
        )
        jobs = await conn.fetch("SELECT id, kind, approval_id, payload, state FROM outbox")
    finally:
        await conn.close()

    def decoded(value: Any) -> Any:
        return json.loads(value) if isinstance(value, str) else value

    trails: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        trails[event["approval_id"]].append({**dict(event), "data": decoded(event["data"])})
    return Db(
        approvals={row["id"]: dict(row) for row in rows},
        events=dict(trails),
        outbox=[{**dict(job), "payload": decoded(job["payload"])} for job in jobs],
    )


def outbox_settled(url: str) -> Db | None:
    """The database once every outbox job is done; None while any is queued. A dead job
    fails at once: it will never be delivered."""
    db = asyncio.run(read_db(url))
    dead = [job for job in db.outbox if job["state"] == "dead"]
    assert not dead, f"dead outbox jobs: {dead}"
    return None if any(job["state"] != "done" for job in db.outbox) else db


Wanted = dict[str, tuple[str, str, str, str | None]]


def expected_webhooks(db: Db) -> Wanted:
    """delivery id -> (approval id, event, state, decided_by) for every transition in the
    trails that warrants a webhook."""
    wanted = {}
    for aid, trail in db.events.items():
        for event in trail:
            data = event["data"]
            if event["type"] not in NOTE_EVENTS and data.get("state") in WEBHOOK_STATES:
                wanted[f"{aid}.{event['seq']}"] = (
                    aid,
                    event["type"],
                    data["state"],
                    data.get("decided_by"),
                )
    return wanted


# -- the test ----------------------------------------------------------------------------------


@pytest.mark.alone  # it loads the machine, and kills at moments of that load
@POSTGRES_ONLY
def test_kill_9_under_load_loses_nothing_acknowledged(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed = int(os.environ.get("SIGNOFF_FAULT_SEED") or random.SystemRandom().randrange(2**32))
    with capsys.disabled():
        print(f"\n[faults] seed {seed} (SIGNOFF_FAULT_SEED={seed} replays this plan)")
    print(f"[faults] seed {seed}")  # also in the captured output of a failure
    started = time.monotonic()
    rng = random.Random(seed)

    with (
        FakeSlack.in_thread(SLACK_TOKEN) as slack,
        SlowReceiver() as receiver,
    ):
        config = service_config(
            db_url, receiver.url, outbox=OUTBOX, slack={"api_base_url": slack.base_url}
        )
        config["routes"][0]["notify"] = [f"slack:{CHANNEL}"]  # payments.* -> group:finance
        config_path = write_config(tmp_path / "signoff.toml", config)
        with Fleet(config_path, tmp_path, SLACK_ENV) as fleet:
            pair = Pair(fleet, random.Random(rng.getrandbits(64)))
            acked = asyncio.run(run_load(pair, slack, config_path, tmp_path, seed, rng))
            loaded = time.monotonic()

            assert not acked.problems, f"seed {seed}:\n" + "\n".join(acked.problems)
            assert len(acked.kills) == KILLS, acked.kills

            # The outbox drains: what killed servers held comes back after its lease.
            deadline = time.monotonic() + DRAIN_TIMEOUT
            while (db := outbox_settled(db_url)) is None:
                assert time.monotonic() < deadline, f"seed {seed}: outbox not drained"
                time.sleep(0.25)
            wanted = expected_webhooks(db)
            deliveries = receiver.wait_for(
                lambda seen: {d.delivery_id for d in seen} >= wanted.keys(), timeout=15
            )
            drained = time.monotonic()

            check_writes(acked, db)
            redelivered = check_webhooks(deliveries, wanted, db)

            verified = asyncio.run(audit_verify(tmp_path, config_path))
            events = sum(len(trail) for trail in db.events.values())
            assert verified[0] == 0, f"seed {seed}: audit verify\n{verified[1]}{verified[2]}"
            assert f"{events} events across {len(db.approvals)} approvals" in verified[1], verified

            tracebacks = [
                f"server {n}: {line}"
                for n, server in enumerate(fleet.servers, 1)
                for line in server.log.splitlines()
                if "Traceback" in line or " ERROR " in line
            ]
            assert not tracebacks, "\n".join(tracebacks)

    elapsed = time.monotonic() - started
    states = Counter(row["state"] for row in db.approvals.values())
    with capsys.disabled():
        print(
            f"[faults] seed {seed}: {len(acked.created)} approvals ({dict(states)}); "
            f"{dict(acked.counts)}; kills: {'; '.join(acked.kills)}; "
            f"lost answers {dict(acked.lost)}; {len(wanted)} webhooks, {len(deliveries)} "
            f"arrivals ({redelivered} redelivered); load {loaded - started:.1f} s, "
            f"drained {drained - loaded:.1f} s, total {elapsed:.1f} s"
        )
        for took, what in sorted(acked.slow, reverse=True)[:3]:
            print(f"[faults] slow: {took:.1f} s {what}")


async def audit_verify(cwd: Path, config_path: Path) -> tuple[int, str, str]:
    done = await asyncio.to_thread(Cli(cwd, service_env(config_path)).run, "audit", "verify")
    return done.returncode, done.stdout, done.stderr


def check_writes(acked: Acked, db: Db) -> None:
    """Every acknowledged write is in the database; nothing was decided twice."""
    # Creates: each acknowledged one is a row as answered; a run_id never has two rows.
    by_run: dict[str, list[str]] = defaultdict(list)
    for row in db.approvals.values():
        by_run[row["run_id"]].append(row["id"])
    doubled = {run: ids for run, ids in by_run.items() if len(ids) > 1}
    assert not doubled, f"run_ids created twice: {doubled}"
    for run_id, record in acked.created.items():
        row = db.approvals.get(record["id"])
        assert row is not None, f"acknowledged create lost: {record['id']} ({run_id})"
        assert (row["run_id"], row["hash"]) == (run_id, record["hash"]), (row, record)

    for aid, row in db.approvals.items():
        trail = db.events.get(aid, [])
        decisions = [e for e in trail if e["type"] in DECISION_EVENTS]
        # Nothing decided twice: one decision event at most, so never approved and rejected.
        assert len(decisions) <= 1, (aid, decisions)
        claimed = [e for e in trail if e["type"] == "claimed"]
        assert len(claimed) <= 1, (aid, claimed)  # a recovered claim writes nothing

        told = acked.decisions.get(aid, [])
        assert len(told) <= 1, f"two acknowledged decisions of {aid}: {told}"
        if told:
            via, who, state = told[0]
            assert decisions, f"acknowledged decision lost: {aid} {state} by {via}:{who}"
            event = decisions[0]
            assert (event["type"], event["actor"]) == (state, f"{via}:{who}"), (told, event)
            assert row["decided_by"] == who, (told, row["decided_by"])
            family = AFTER_APPROVAL if state == "approved" else {"rejected"}
            assert row["state"] in family, (aid, told, row["state"])

        if aid in acked.claims:
            assert claimed, f"acknowledged claim lost: {aid}"
            assert row["claimed_at"] is not None, row
            assert row["state"] in {"executing", "executed", "failed"}, (aid, row["state"])
            assert row["claim_token"] == acked.claims[aid], aid  # the claim answered is the one
        if aid in acked.completes:
            outcome, result = acked.completes[aid]
            expected = "executed" if outcome == "succeeded" else "failed"
            assert row["state"] == expected, (aid, row["state"], outcome)
            stored = row["outcome"]
            stored = json.loads(stored) if isinstance(stored, str) else stored
            assert stored == {"status": outcome, "result": result}, (aid, stored)


def check_webhooks(deliveries: list[Delivery], wanted: Wanted, db: Db) -> int:
    """Every wanted delivery arrived, signed, with one body per delivery id, saying what the
    trail says; nothing else arrived. Returns how many arrivals were repeats."""
    bodies: dict[str, set[bytes]] = defaultdict(set)
    for delivery in deliveries:
        delivery_id = verify_webhook(delivery.headers, delivery.body, WEBHOOK_SECRET)
        assert delivery_id in wanted, f"a webhook for no transition in the trail: {delivery_id}"
        body = delivery.json()
        aid, event, state, decided_by = wanted[delivery_id]
        assert body["delivery_id"] == delivery_id, body
        approval = body["approval"]
        assert (body["event"], approval["id"], approval["state"]) == (event, aid, state), body
        if decided_by is not None:
            assert approval["decided_by"] == decided_by, (decided_by, body)
        bodies[delivery_id].add(delivery.body)
    changed = {d: len(b) for d, b in bodies.items() if len(b) > 1}
    assert not changed, f"delivery ids that arrived with different bodies: {changed}"
    missing = sorted(wanted.keys() - bodies.keys())
    assert not missing, f"webhooks never delivered: {missing}"
    queued = {job["payload"]["delivery_id"] for job in db.outbox if job["kind"] == "webhook"}
    assert queued == wanted.keys(), (sorted(queued - wanted.keys()), sorted(wanted.keys() - queued))
    return len(deliveries) - len(bodies)
