"""`signoff serve` and `signoff worker` as real processes: what an operator relies on.

This file proves, against real subprocesses, real HTTP and real databases (SQLite, and
PostgreSQL where it says so), that:

- an approval survives `kill -9` of the server that took it: a new server on the same
  database serves it, a CLI decision reaches the agent as a signed webhook whose delivery id
  stays the same across retries, and the approved call is claimed once and completed;
- outbox jobs held by a server killed with `kill -9` are delivered by another server once
  their lease runs out (not before), and end `done`;
- SIGTERM stops a server cleanly (exit 0, in seconds), idle or with a webhook in flight, and
  hands back the job it held, uncounted, for the next server to deliver;
- a receiver that is down gets the same signed bytes on every retry, with growing backoff,
  until the job is dead; `signoff outbox list --dead` and `outbox retry` bring it back, and
  `outbox retry` refuses a job that is not dead or does not exist with one line;
- `serve` refuses an empty PostgreSQL database with one line naming `signoff db upgrade`,
  while an empty SQLite file is upgraded in place and served;
- `--log-format json` writes one JSON object per stderr line, and transition lines carry the
  approval id, tenant and actor;
- `signoff worker` alone (no HTTP) delivers the webhook of a CLI decision and exits 0 on
  SIGTERM;
- a table of bad inputs each gets its 4xx and error code from the real server, nothing is
  written, and the server keeps serving.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import time
from collections import Counter
from contextlib import closing
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from signoff_client import verify_webhook
from store.migrate import head_revision
from tests.support.cli import Cli, Result, assert_refused, sqlite_url
from tests.support.raw_reads import webhook_jobs
from tests.support.samples import request_body
from tests.support.service import (
    API_KEYS,
    WEBHOOK_SECRET,
    Api,
    Delivery,
    WebhookReceiver,
    cli_for,
    deploy,
    wait_until,
)

# -- helpers ---------------------------------------------------------------------------------


def ok(result: Result) -> Result:
    assert result.returncode == 0, str(result)
    assert "Traceback" not in result.stderr, str(result)
    return result


def approve(cli: Cli, approval: dict[str, Any], who: str = "alice") -> None:
    done = ok(
        cli.run("approvals", "approve", approval["id"], "--hash", approval["hash"], "--as", who)
    )
    assert f"{approval['id']} approved" in done.stdout, str(done)


def cli_requests(cli: Cli, *run_ids: str) -> list[dict[str, Any]]:
    """Create one request per run id with `signoff approvals request` (concurrently)."""
    commands = []
    for run_id in run_ids:
        path = cli.cwd / f"{run_id}.json"
        path.write_text(json.dumps(request_body(run_id=run_id), ensure_ascii=False), "utf-8")
        commands.append(["approvals", "request", "--tenant", "acme", "--file", str(path)])
    return [ok(result).json() for result in cli.run_all(commands)]


def approve_all(cli: Cli, approvals: list[dict[str, Any]], who: str = "alice") -> None:
    """Approve each with `signoff approvals approve` (concurrent processes)."""
    results = cli.run_all(
        [["approvals", "approve", a["id"], "--hash", a["hash"], "--as", who] for a in approvals]
    )
    for approval, result in zip(approvals, results, strict=True):
        assert f"{approval['id']} approved" in ok(result).stdout, str(result)


def verified(delivery: Delivery) -> dict[str, Any]:
    """The webhook's body, after checking its signature as a receiver would."""
    assert verify_webhook(delivery.headers, delivery.body, WEBHOOK_SECRET) == delivery.delivery_id
    body: dict[str, Any] = delivery.json()
    assert body["delivery_id"] == delivery.delivery_id
    return body


def for_ids(ids: set[str], per_id: int = 1, after: float = 0.0) -> Any:
    """A wait_for predicate: every id in `ids` seen at least `per_id` times after `after`."""

    def predicate(seen: list[Delivery]) -> bool:
        counts = Counter(d.delivery_id for d in seen if d.at >= after)
        return all(counts[i] >= per_id for i in ids)

    return predicate


def create_body(run_id: str) -> dict[str, Any]:
    return request_body(
        run_id=run_id,
        step={"cursor": 4, "node": "refund"},
        resume={"thread": "t-1"},
        preconditions={"balance_at_least": 12000},
    )


# -- 1. restart ------------------------------------------------------------------------------


def test_an_approval_outlives_kill9_and_is_decided_claimed_and_completed_on_a_new_server(
    db_url: str, tmp_path: Path
) -> None:
    # A hung receiver times out after 1 s, so the webhook is retried: its id must not change.
    with (
        WebhookReceiver() as hooks,
        deploy(tmp_path, db_url, hooks, outbox={"webhook_timeout": 1}) as fleet,
    ):
        cli = cli_for(fleet)
        first = fleet.start()
        body = create_body("run-restart")
        created = first.api().post("/v1/approvals", body)
        assert created.status == 201, created
        record = created.body
        assert (record["state"], record["execution"]) == ("pending", "not_started")
        again = first.api().post("/v1/approvals", body)
        assert again.status == 200, again
        assert (again.body["id"], again.body["hash"]) == (record["id"], record["hash"])

        first.kill9()
        assert first.proc is not None and first.proc.returncode == -9

        hooks.hang.set()
        second = fleet.start()
        api = second.api()
        survived = api.get(f"/v1/approvals/{record['id']}")
        assert survived.status == 200, survived
        assert (survived.body["state"], survived.body["hash"]) == ("pending", record["hash"])

        approve(cli, record)
        tries = hooks.wait_for(lambda seen: len(seen) >= 2, timeout=20)
        hooks.hang.clear()
        assert tries[0].delivery_id == tries[1].delivery_id
        assert tries[0].body == tries[1].body
        for delivery in tries:
            hook = verified(delivery)
            assert hook["approval"]["id"] == record["id"]
            assert hook["approval"]["state"] == "approved"
            assert hook["approval"]["execution"] == "not_started"
            assert hook["approval"]["decided_by"] == "alice"
        wait_until(
            lambda: [j["state"] for j in webhook_jobs(db_url)] == ["done"], 15, "webhook job done"
        )

        claimed = api.post(f"/v1/approvals/{record['id']}/claim")
        assert claimed.status == 200, claimed
        grant = claimed.body
        assert grant["tool"] == body["tool"]
        assert grant["step"] == body["step"]
        assert grant["resume"] == body["resume"]
        assert grant["preconditions"] == body["preconditions"]
        assert len(grant["idempotency_key"]) == 64
        assert grant["claim_token"]
        assert grant["approval"]["state"] == "executing"
        assert grant["approval"]["execution"] == "started"

        rival = api.post(f"/v1/approvals/{record['id']}/claim")
        assert rival.status == 409, rival
        assert rival.error_code == "not_pending"

        result = {"refund": "re_123"}
        completed = api.post(
            f"/v1/approvals/{record['id']}/complete",
            {"claim_token": grant["claim_token"], "outcome": "succeeded", "result": result},
        )
        assert completed.status == 200, completed

        final = api.get(f"/v1/approvals/{record['id']}")
        assert final.status == 200, final
        assert (final.body["state"], final.body["execution"]) == ("executed", "finished")
        assert final.body["outcome"] == {"status": "succeeded", "result": result}

        shown = ok(cli.run("approvals", "show", record["id"], "--json")).json()
        for key in ("id", "state", "execution", "hash", "decided_by", "decided_at", "outcome"):
            assert shown[key] == final.body[key], key
        # Only the approval is announced, once, however often it was attempted.
        assert {d.delivery_id for d in hooks.snapshot()} == {tries[0].delivery_id}


# -- 2. kill -9 with claimed outbox jobs -----------------------------------------------------


def test_jobs_held_by_a_killed_server_are_delivered_by_another_after_their_lease(
    db_url: str, tmp_path: Path
) -> None:
    lease = 5.0
    # The delivery outlasts nothing but the lease's margin: A is killed well inside it.
    outbox = {"lease": f"{lease:.0f}s", "poll_interval": 0.1, "webhook_timeout": 4}
    with WebhookReceiver() as hooks, deploy(tmp_path, db_url, hooks, outbox=outbox) as fleet:
        cli = cli_for(fleet)
        hooks.hang.set()
        # Decided before A starts, so A's first pass claims all three in one batch.
        approvals = cli_requests(cli, *(f"run-kill-{i}" for i in range(3)))
        approve_all(cli, approvals)

        server_a = fleet.start()
        held = wait_until(
            lambda: (
                (jobs := webhook_jobs(db_url))
                and len(jobs) == 3
                and all(j["locked_by"] for j in jobs)
                and jobs
            ),
            15,
            "server A holding every webhook job",
        )
        ids = {j["delivery_id"] for j in held}
        hooks.wait_for(for_ids(ids), timeout=15)  # A is inside every delivery, receiver hung
        server_a.kill9()
        killed_at = time.time()
        hooks.hang.clear()

        fleet.start()
        seen = hooks.wait_for(for_ids(ids, after=killed_at), timeout=lease + 20)
        for job in held:
            redelivered = [
                d for d in seen if d.delivery_id == job["delivery_id"] and d.at >= killed_at
            ]
            assert redelivered, job
            # Not before the dead server's lease ran out (same machine, same clock).
            assert redelivered[0].at >= job["locked_until"].timestamp() - 0.05, job
            hook = verified(redelivered[0])
            assert hook["approval"]["state"] == "approved"
        assert {verified(d)["approval"]["id"] for d in seen} == {a["id"] for a in approvals}

        wait_until(
            lambda: all(
                j["state"] == "done" and j["locked_by"] is None for j in webhook_jobs(db_url)
            ),
            15,
            "every webhook job done",
        )


# -- 3. graceful shutdown --------------------------------------------------------------------


def test_sigterm_when_idle_exits_0_quickly(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "signoff.db")
    with WebhookReceiver() as hooks, deploy(tmp_path, url, hooks) as fleet:
        server = fleet.start()
        assert Api(server.url, None).get("/healthz").status == 200
        started = time.monotonic()
        assert server.terminate(timeout=15) == 0, server.log
        assert time.monotonic() - started < 5, server.log
        assert "Traceback" not in server.log


def test_sigterm_with_a_webhook_in_flight_hands_the_job_back_uncounted(
    db_url: str, tmp_path: Path
) -> None:
    with (
        WebhookReceiver() as hooks,
        deploy(tmp_path, db_url, hooks, outbox={"webhook_timeout": 30}) as fleet,
    ):
        cli = cli_for(fleet)
        server = fleet.start()
        hooks.hang.set()
        created = server.api().post("/v1/approvals", create_body("run-term"))
        assert created.status == 201, created
        approve(cli, created.body)
        [first] = hooks.wait_for(lambda seen: len(seen) >= 1, timeout=15)
        [job] = webhook_jobs(db_url)
        assert job["locked_by"] and job["attempts"] == 1, job

        started = time.monotonic()
        code = server.terminate(timeout=20)
        elapsed = time.monotonic() - started
        assert code == 0, server.log
        assert elapsed < 10, f"SIGTERM took {elapsed:.1f} s\n{server.log}"
        assert "Traceback" not in server.log, server.log

        [job] = webhook_jobs(db_url)
        assert (job["state"], job["locked_by"], job["locked_until"]) == ("queued", None, None)
        assert job["attempts"] == 0, job  # the interrupted attempt does not count

        hooks.hang.clear()
        started_at = time.time()
        fleet.start()
        seen = hooks.wait_for(for_ids({first.delivery_id}, after=started_at), timeout=15)
        assert verified(seen[-1])["approval"]["id"] == created.body["id"]
        # Released, not leased: the next server did not wait out the 60 s lease.
        wait_until(lambda: webhook_jobs(db_url)[0]["state"] == "done", 15, "job done")


# -- 4. receiver down ------------------------------------------------------------------------


def test_a_receiver_that_is_down_gets_backoff_then_a_dead_job_an_operator_can_retry(
    tmp_path: Path,
) -> None:
    url = sqlite_url(tmp_path / "signoff.db")
    outbox = {"backoff_base": "1s", "max_attempts": 3}
    with WebhookReceiver() as hooks, deploy(tmp_path, url, hooks, outbox=outbox) as fleet:
        cli = cli_for(fleet)
        hooks.status = 503
        server = fleet.start()
        created = server.api().post("/v1/approvals", create_body("run-down"))
        assert created.status == 201, created
        approve(cli, created.body)

        tries = hooks.wait_for(lambda seen: len(seen) >= 3, timeout=20)
        assert len({d.delivery_id for d in tries}) == 1
        assert len({d.body for d in tries}) == 1  # byte-identical on every retry
        for delivery in tries:
            verified(delivery)
        # Backoff base * 2^(attempt-1), jittered to between half and all of it: at least
        # 0.5 s, then at least 1 s (a little slack for timer granularity).
        gaps = [b.at - a.at for a, b in itertools.pairwise(tries)]
        assert gaps[0] >= 0.45, gaps
        assert gaps[1] >= 0.95, gaps

        def dead() -> list[dict[str, Any]]:
            jobs: list[dict[str, Any]] = ok(cli.run("outbox", "list", "--dead", "--json")).json()[
                "jobs"
            ]
            return jobs

        [job] = wait_until(dead, 15, "the job to be dead")
        assert job["delivery_id"] == tries[0].delivery_id
        assert job["approval_id"] == created.body["id"]
        assert job["attempts"] == 3
        assert "503" in (job["last_error"] or ""), job
        time.sleep(0.5)  # a dead job is not attempted again on its own
        assert len(hooks.snapshot()) == 3

        table = ok(cli.run("outbox", "list", "--dead"))
        assert created.body["id"] in table.stdout and "dead" in table.stdout, str(table)

        hooks.status = 200
        retried = ok(cli.run("outbox", "retry", str(job["id"])))
        assert f"outbox job {job['id']}" in retried.stdout, str(retried)
        seen = hooks.wait_for(lambda seen: len(seen) >= 4, timeout=15)
        assert seen[3].delivery_id == tries[0].delivery_id
        assert seen[3].body == tries[0].body
        verified(seen[3])

        wait_until(lambda: [j["state"] for j in webhook_jobs(url)] == ["done"], 15, "job done")
        assert ok(cli.run("outbox", "list", "--dead")).stdout.strip() == "no dead outbox jobs"
        assert ok(cli.run("outbox", "list", "--dead", "--json")).json() == {"jobs": []}

        assert_refused(cli.run("outbox", "retry", str(job["id"])), "not dead")
        assert_refused(cli.run("outbox", "retry", "99999"), "no outbox job")


# -- 5. schema on start ----------------------------------------------------------------------


def test_serve_refuses_an_empty_postgresql_database_naming_db_upgrade(
    pg_empty_url: str, tmp_path: Path
) -> None:
    with WebhookReceiver() as hooks, deploy(tmp_path, pg_empty_url, hooks) as fleet:
        cli = cli_for(fleet)
        started = time.monotonic()
        refused = cli.run("serve")
        assert time.monotonic() - started < 15, str(refused)
        line = assert_refused(refused, "signoff db upgrade")
        assert "empty" in line, line

        ok(cli.run("db", "upgrade"))
        server = fleet.start()
        ready = Api(server.url, None).get("/readyz")
        assert ready.status == 200, ready
        assert (ready.body["status"], ready.body["schema"]) == ("ready", head_revision())


@pytest.mark.parametrize("file_state", ["missing", "zero_bytes"])
def test_serve_upgrades_an_empty_sqlite_file_itself(file_state: str, tmp_path: Path) -> None:
    path = tmp_path / "embedded.db"
    if file_state == "zero_bytes":
        path.touch()
    with WebhookReceiver() as hooks, deploy(tmp_path, sqlite_url(path), hooks) as fleet:
        server = fleet.start()
        ready = Api(server.url, None).get("/readyz")
        assert ready.status == 200, ready
        assert (ready.body["status"], ready.body["schema"]) == ("ready", head_revision())
        created = server.api().post("/v1/approvals", create_body("run-embedded"))
        assert created.status == 201, created


# -- 6. JSON logs ----------------------------------------------------------------------------


def test_json_log_format_gives_one_object_per_line_and_transitions_name_who(
    tmp_path: Path,
) -> None:
    url = sqlite_url(tmp_path / "signoff.db")
    with WebhookReceiver() as hooks, deploy(tmp_path, url, hooks) as fleet:
        cli = cli_for(fleet)
        server = fleet.start(json_logs=True)
        api = server.api()
        kept = api.post("/v1/approvals", create_body("run-log-1")).body
        dropped = api.post("/v1/approvals", create_body("run-log-2")).body
        approve(cli, kept)
        hooks.wait_for(lambda seen: len(seen) >= 1, timeout=15)
        grant = api.post(f"/v1/approvals/{kept['id']}/claim").body
        done = api.post(
            f"/v1/approvals/{kept['id']}/complete",
            {"claim_token": grant["claim_token"], "outcome": "succeeded"},
        )
        assert done.status == 200, done
        assert api.post(f"/v1/approvals/{dropped['id']}/cancel", {"reason": "no"}).status == 200
        assert api.get("/v1/approvals/no-such-id").status == 404
        assert server.terminate() == 0, server.log

    # Every line is JSON, the startup line naming the port included.
    lines = [line for line in server.log.splitlines() if line.strip()]
    records = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            pytest.fail(f"not a JSON log line: {line!r}\n--- whole log\n{server.log}")
        assert isinstance(record, dict), line
        assert {"time", "level", "logger", "message"} <= record.keys(), line
        records.append(record)
    assert any(r["message"].startswith("signoff listening on http://") for r in records)

    transitions = [r for r in records if "event" in r]
    assert {(r["approval_id"], r["event"]) for r in transitions} >= {
        (kept["id"], "claimed"),
        (kept["id"], "executed"),
        (dropped["id"], "cancelled"),
    }, transitions
    for record in transitions:
        assert record["tenant"] == "acme", record
        assert record["actor"] == "agent:acme", record
    requested = [r for r in records if r.get("approval_id") and "event" not in r]
    assert {r["approval_id"] for r in requested} >= {kept["id"], dropped["id"]}, records
    for record in requested:
        assert (record["tenant"], record["actor"]) == ("acme", "agent:acme"), record


# -- 7. worker -------------------------------------------------------------------------------


def test_worker_alone_delivers_the_webhook_of_a_cli_decision(db_url: str, tmp_path: Path) -> None:
    with WebhookReceiver() as hooks, deploy(tmp_path, db_url, hooks) as fleet:
        cli = cli_for(fleet)
        worker = fleet.start("worker")
        assert worker.port is None  # no HTTP listener
        [approval] = cli_requests(cli, "run-worker")
        approve(cli, approval)
        [delivery] = hooks.wait_for(lambda seen: len(seen) >= 1, timeout=15)
        hook = verified(delivery)
        assert hook["approval"]["id"] == approval["id"]
        assert hook["approval"]["state"] == "approved"
        assert hook["approval"]["execution"] == "not_started"
        wait_until(lambda: webhook_jobs(db_url)[0]["state"] == "done", 15, "job done")
        started = time.monotonic()
        assert worker.terminate() == 0, worker.log
        assert time.monotonic() - started < 5, worker.log
        assert "Traceback" not in worker.log, worker.log


def test_a_cli_decision_reaches_the_agent_at_once_though_the_outbox_polls_every_10_s(
    db_url: str, tmp_path: Path
) -> None:
    """The CLI is another process: the server learns of its commit from the database
    (PostgreSQL NOTIFY, SQLite's data_version), not from its next poll."""
    with (
        WebhookReceiver() as hooks,
        deploy(tmp_path, db_url, hooks, outbox={"poll_interval": "10s"}) as fleet,
    ):
        cli = cli_for(fleet)
        server = fleet.start("serve")
        for run_id in ("run-at-once-1", "run-at-once-2"):  # and again: it keeps watching
            [approval] = cli_requests(cli, run_id)
            approve(cli, approval)
            [delivery] = [
                d
                for d in hooks.wait_for(lambda seen, i=approval["id"]: _hook_for(seen, i), 10)
                if d.json()["approval"]["id"] == approval["id"]
            ]
            hook = verified(delivery)
            assert hook["approval"]["state"] == "approved"
            # From the decision's commit (the server's clock is this machine's) to arrival.
            decided = datetime.fromisoformat(hook["occurred_at"]).timestamp()
            assert delivery.at - decided < 1.5, server.log


def _hook_for(seen: list[Delivery], approval_id: str) -> bool:
    return any(d.json()["approval"]["id"] == approval_id for d in seen)


# -- 8. bad input against the real server ------------------------------------------------------


def _valid_but(amount: bytes) -> bytes:
    """A valid create body whose tool argument `amount` is the given JSON text."""
    body = request_body(tool={"name": "stripe.refunds.create", "arguments": {"amount": "@"}})
    return json.dumps(body).encode().replace(b'"@"', amount)


_BAD_INPUTS: list[tuple[str, dict[str, Any], int, str]] = [
    ("malformed JSON", {"raw": b'{"run_id": '}, 400, "malformed_json"),
    ("wrong type", {"body": request_body(run_id=7)}, 422, "invalid_request"),
    ("missing field", {"body": {"run_id": "r"}}, 422, "invalid_request"),
    ("unknown field", {"body": request_body(colour="red")}, 422, "invalid_request"),
    ("oversized body", {"raw": b'"' + b"x" * 300_000 + b'"'}, 413, "too_large"),
    ("no key", {"key": None, "body": request_body()}, 401, "unauthorized"),
    ("wrong key", {"key": "nope", "body": request_body()}, 401, "unauthorized"),
    ("3 fortnights", {"body": request_body(approval_ttl="3 fortnights")}, 422, "invalid_request"),
    # A float NaN as the agent's JSON library would send it: as a huge number.
    ("NaN as 1e400", {"raw": _valid_but(b"1e400")}, 422, "not_canonical"),
    ("NaN literal", {"raw": b'{"run_id": "r", "x": NaN}'}, 422, "not_canonical"),
]


def test_bad_input_gets_its_4xx_writes_nothing_and_the_server_keeps_serving(
    tmp_path: Path,
) -> None:
    db = tmp_path / "signoff.db"
    with WebhookReceiver() as hooks, deploy(tmp_path, sqlite_url(db), hooks) as fleet:
        server = fleet.start()
        acme = server.api()
        mine = acme.post("/v1/approvals", request_body()).body
        for name, sent, status, code in _BAD_INPUTS:
            key = sent.get("key", API_KEYS["acme"])
            reply = Api(server.url, key).call(
                "POST", "/v1/approvals", sent.get("body"), raw=sent.get("raw")
            )
            assert (reply.status, reply.error_code) == (status, code), (name, reply)
            assert reply.body["error"]["message"], name
        # Another tenant's id is indistinguishable from a missing one.
        assert server.api("globex").get(f"/v1/approvals/{mine['id']}").status == 404
        with closing(sqlite3.connect(db)) as conn:
            assert conn.execute("SELECT count(*) FROM approvals").fetchone() == (1,)
        assert acme.get("/healthz").status == 200
        assert server.proc is not None and server.proc.poll() is None
        assert "Traceback" not in server.log
