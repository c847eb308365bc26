"""Claiming, completing and withdrawing approved calls through the agent-facing HTTP API, over
real HTTP, on real SQLite and PostgreSQL.

The real application (`build_app`, no background tasks, a FakeClock) is served on a loopback
port and driven with an aiohttp client (tests/support/api_server.py). What these tests prove:

- claim and complete follow the state machine: one winner (also under 20 concurrent HTTP
  claims), leases from config or body, stable idempotency keys, claim tokens checked,
  completion retries answered with the recorded outcome;
- grant and approval TTLs are judged on the injected clock (410 `expired`);
- supersede and cancel withdraw only what has not started.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from datetime import timedelta
from typing import Any

import pytest

from bot.clock import utc_iso
from tests.support.api_server import HEX64, Api, Serve, assert_error, error_fields
from tests.support.samples import tamper

# -- claim and complete ----------------------------------------------------------------------


async def test_claim_hands_over_the_stored_call_with_a_lease(api: Api) -> None:
    record = await api.approved(
        step={"cursor": 4}, resume={"thread": "t-1"}, preconditions={"balance_at_least": 12000}
    )
    api.clock.advance(minutes=3)
    claimed = await api.claim(record["id"])
    assert claimed.status == 200, claimed.body
    c = claimed.body
    assert c["tool"] == {
        "name": "stripe.refunds.create",
        "arguments": {"charge": "ch_1", "amount": 12000},
    }
    assert (c["step"], c["resume"], c["preconditions"]) == (
        {"cursor": 4},
        {"thread": "t-1"},
        {"balance_at_least": 12000},
    )
    assert c["lease_until"] == utc_iso(api.clock.now() + timedelta(minutes=10))
    assert HEX64.match(c["idempotency_key"])
    # Stable: a function of this exact approved call, the same on every claim of it.
    expected_key = hashlib.sha256(f"{record['id']}:{record['hash']}".encode()).hexdigest()
    assert c["idempotency_key"] == expected_key
    assert isinstance(c["claim_token"], str) and len(c["claim_token"]) >= 16
    assert c["claim_token"] not in json.dumps(c["approval"])
    assert (c["approval"]["state"], c["approval"]["execution"]) == ("executing", "started")
    assert c["approval"]["claimed_at"] == utc_iso(api.clock.now())
    assert c["approval"]["lease_until"] == c["lease_until"]

    stored = await api.get(record["id"])
    assert (stored["state"], stored["execution"]) == ("executing", "started")
    assert c["claim_token"] not in json.dumps(stored)

    again = await api.claim(record["id"])
    error = assert_error(again, 409, "not_pending")
    assert error["state"] == "executing"

    other = await api.approved(run_id="run-2")
    other_claim = await api.claim(other["id"])
    assert other_claim.body["idempotency_key"] != c["idempotency_key"]
    assert other_claim.body["claim_token"] != c["claim_token"]


async def test_claim_lease_from_the_body_and_from_config(serve: Serve) -> None:
    api = await serve(claim_lease="7m")
    record = await api.approved()
    claimed = await api.claim(record["id"])
    assert claimed.status == 200, claimed.body
    assert claimed.body["lease_until"] == utc_iso(api.clock.now() + timedelta(minutes=7))

    other = await api.approved(run_id="run-2")
    short = await api.claim(other["id"], {"lease": "2m"})
    assert short.status == 200, short.body
    assert short.body["lease_until"] == utc_iso(api.clock.now() + timedelta(minutes=2))


async def test_claim_of_a_request_that_is_not_approved_is_409(api: Api) -> None:
    record = await api.create()
    reply = await api.claim(record["id"])
    error = assert_error(reply, 409, "not_pending")
    assert error["state"] == "pending"
    assert (await api.get(record["id"]))["state"] == "pending"


async def test_complete_records_the_outcome_once(api: Api) -> None:
    record = await api.approved()
    token = (await api.claim(record["id"])).body["claim_token"]
    path = f"/v1/approvals/{record['id']}/complete"

    wrong = await api.call("POST", path, {"claim_token": token + "x", "outcome": "succeeded"})
    assert_error(wrong, 409, "claim_mismatch")
    assert (await api.get(record["id"]))["state"] == "executing"

    huge = {"claim_token": token, "outcome": "succeeded", "result": {"log": "x" * 17 * 1024}}
    assert_error(await api.call("POST", path, huge), 413, "too_large")
    assert (await api.get(record["id"]))["state"] == "executing"

    api.clock.advance(minutes=1)
    done = {"claim_token": token, "outcome": "succeeded", "result": {"refund": "re_1"}}
    first = await api.call("POST", path, done)
    assert first.status == 200, first.body
    assert (first.body["state"], first.body["execution"]) == ("executed", "finished")
    assert first.body["outcome"] == {"status": "succeeded", "result": {"refund": "re_1"}}
    assert first.body["executed_at"] == utc_iso(api.clock.now())
    _, jobs = await api.snapshot()

    api.clock.advance(minutes=1)
    retry = await api.call("POST", path, done)
    assert (retry.status, retry.body) == (200, first.body)
    assert (await api.snapshot())[1] == jobs  # a retry causes no second webhook

    changed = await api.call("POST", path, {**done, "outcome": "failed"})
    assert_error(changed, 409, "not_pending")
    late_claim = await api.claim(record["id"])
    assert_error(late_claim, 409, "not_pending")
    assert await api.get(record["id"]) == first.body


async def test_complete_with_failed_outcome(api: Api) -> None:
    record = await api.approved()
    token = (await api.claim(record["id"])).body["claim_token"]
    reply = await api.call(
        "POST",
        f"/v1/approvals/{record['id']}/complete",
        {"claim_token": token, "outcome": "failed", "result": {"error": "card_declined"}},
    )
    assert reply.status == 200, reply.body
    assert (reply.body["state"], reply.body["execution"]) == ("failed", "finished")
    assert reply.body["outcome"]["status"] == "failed"


async def test_complete_before_claim_is_409(api: Api) -> None:
    record = await api.approved()
    reply = await api.call(
        "POST",
        f"/v1/approvals/{record['id']}/complete",
        {"claim_token": "guess", "outcome": "succeeded"},
    )
    error = assert_error(reply, 409, "not_pending")
    assert error["state"] == "approved"


# -- grant TTL -------------------------------------------------------------------------------


async def test_claim_after_the_grant_ttl_is_410_expired(api: Api) -> None:
    record = await api.approved()
    api.clock.advance(hours=24, seconds=1)
    reply = await api.claim(record["id"])
    error = assert_error(reply, 410, "expired")
    assert error["state"] == "expired"
    stored = await api.get(record["id"])
    assert (stored["state"], stored["execution"]) == ("expired", "not_started")
    # Expired stays expired.
    assert_error(await api.claim(record["id"]), 410, "expired")


async def test_claim_just_before_the_grant_ttl_succeeds(api: Api) -> None:
    record = await api.approved()
    api.clock.advance(hours=23, minutes=59, seconds=59)
    assert (await api.claim(record["id"])).status == 200


async def test_a_request_may_shorten_its_grant_ttl(api: Api) -> None:
    record = await api.approved(grant_ttl="1h")
    api.clock.advance(hours=1)
    assert_error(await api.claim(record["id"]), 410, "expired")


# -- supersede and cancel --------------------------------------------------------------------


async def test_supersede_pending_records_the_reason(api: Api) -> None:
    record = await api.create()
    reason = "balance fell below 12000 before anyone decided"
    reply = await api.call("POST", f"/v1/approvals/{record['id']}/supersede", {"reason": reason})
    assert reply.status == 200, reply.body
    assert (reply.body["state"], reply.body["execution"]) == ("superseded", "not_started")
    assert reply.body["decision_note"] == reason
    assert await api.get(record["id"]) == reply.body
    assert_error(await api.claim(record["id"]), 409, "not_pending")


async def test_supersede_approved(api: Api) -> None:
    record = await api.approved()
    reply = await api.call("POST", f"/v1/approvals/{record['id']}/supersede", {"reason": "stale"})
    assert (reply.status, reply.body["state"]) == (200, "superseded")


@pytest.mark.parametrize("body", [{}, {"reason": None}, {"note": "x"}])
async def test_supersede_needs_a_reason(api: Api, body: dict[str, Any]) -> None:
    record = await api.create()
    reply = await api.call("POST", f"/v1/approvals/{record['id']}/supersede", body)
    error = assert_error(reply, 422, "invalid_request")
    assert error_fields(error)
    assert (await api.get(record["id"]))["state"] == "pending"


async def test_cancel_approved_and_pending(api: Api) -> None:
    approved = await api.approved()
    reply = await api.call("POST", f"/v1/approvals/{approved['id']}/cancel", {"reason": "done"})
    assert reply.status == 200, reply.body
    assert (reply.body["state"], reply.body["decision_note"]) == ("cancelled", "done")
    assert_error(await api.claim(approved["id"]), 409, "not_pending")

    pending = await api.create(run_id="run-2")
    empty = await api.call("POST", f"/v1/approvals/{pending['id']}/cancel")  # no body at all
    assert (empty.status, empty.body["state"]) == (200, "cancelled")


@pytest.mark.parametrize("finished", [False, True])
@pytest.mark.parametrize("action", ["cancel", "supersede"])
async def test_withdrawing_a_started_call_is_409(api: Api, action: str, finished: bool) -> None:
    record = await api.approved()
    token = (await api.claim(record["id"])).body["claim_token"]
    if finished:
        done = await api.call(
            "POST",
            f"/v1/approvals/{record['id']}/complete",
            {"claim_token": token, "outcome": "succeeded"},
        )
        assert done.status == 200
    state = "executed" if finished else "executing"
    before = await api.snapshot()
    reply = await api.call("POST", f"/v1/approvals/{record['id']}/{action}", {"reason": "r"})
    error = assert_error(reply, 409, "not_pending")
    assert error["state"] == state
    assert await api.snapshot() == before


async def test_cancel_of_an_overdue_pending_request_is_410_expired(api: Api) -> None:
    record = await api.create(approval_ttl="1h")
    api.clock.advance(hours=1, seconds=1)
    reply = await api.call("POST", f"/v1/approvals/{record['id']}/cancel", {})
    error = assert_error(reply, 410, "expired")
    assert error["state"] == "expired"
    stored = await api.get(record["id"])
    assert (stored["state"], stored["execution"]) == ("expired", "not_started")


# -- concurrency -----------------------------------------------------------------------------


async def test_twenty_concurrent_claims_have_one_winner(api: Api) -> None:
    record = await api.approved()
    replies = await asyncio.gather(*(api.claim(record["id"]) for _ in range(20)))
    winners = [r for r in replies if r.status == 200]
    losers = [r for r in replies if r.status != 200]
    assert len(winners) == 1, [(r.status, r.body) for r in replies]
    assert len(losers) == 19
    for loser in losers:
        error = assert_error(loser, 409, "not_pending")
        assert error["state"] == "executing"

    async with api.store.read() as tx:
        events = [e.type for e in await tx.events_for(record["id"])]
    assert events.count("claimed") == 1
    token = winners[0].body["claim_token"]
    done = await api.call(
        "POST",
        f"/v1/approvals/{record['id']}/complete",
        {"claim_token": token, "outcome": "succeeded"},
    )
    assert (done.status, done.body["state"]) == (200, "executed")


async def test_concurrent_retries_of_one_completion_record_it_once(api: Api) -> None:
    record = await api.approved()
    token = (await api.claim(record["id"])).body["claim_token"]
    done = {"claim_token": token, "outcome": "succeeded", "result": {"refund": "re_1"}}
    replies = await asyncio.gather(
        *(api.call("POST", f"/v1/approvals/{record['id']}/complete", done) for _ in range(10))
    )
    assert [r.status for r in replies] == [200] * 10, [r.body for r in replies]
    assert all(r.body == replies[0].body for r in replies)
    async with api.store.read() as tx:
        events = [e.type for e in await tx.events_for(record["id"])]
    assert events.count("executed") == 1


async def test_claim_racing_cancel_has_one_winner(api: Api) -> None:
    record = await api.approved()
    claim, cancel = await asyncio.gather(
        api.claim(record["id"]),
        api.call("POST", f"/v1/approvals/{record['id']}/cancel", {"reason": "withdrawn"}),
    )
    assert sorted([claim.status, cancel.status]) == [200, 409], (claim.body, cancel.body)
    final = (await api.get(record["id"]))["state"]
    assert final == ("executing" if claim.status == 200 else "cancelled")


# -- recoverable claims, renew, release, and what claim re-checks, over HTTP ----------------


async def test_a_claim_retried_with_its_idempotency_key_gets_the_same_claim(api: Api) -> None:
    record = await api.approved()
    path = f"/v1/approvals/{record['id']}/claim"
    first = await api.call("POST", path, {}, headers={"Idempotency-Key": "agent-7:try"})
    again = await api.call("POST", path, {}, headers={"Idempotency-Key": "agent-7:try"})
    assert first.status == again.status == 200, (first.body, again.body)
    assert again.body["claim_token"] == first.body["claim_token"]
    assert again.body["lease_until"] == first.body["lease_until"]
    other = await api.call("POST", path, {}, headers={"Idempotency-Key": "agent-8"})
    assert assert_error(other, 409, "not_pending")["state"] == "executing"
    bad = await api.call("POST", path, {}, headers={"Idempotency-Key": "käse"})
    assert error_fields(assert_error(bad, 422, "invalid_request")) == ["Idempotency-Key"]


async def test_renew_and_release_over_http(api: Api) -> None:
    record = await api.approved()
    token = (await api.claim(record["id"], {"lease": "5m"})).body["claim_token"]
    base = f"/v1/approvals/{record['id']}"
    renewed = await api.call("POST", f"{base}/renew", {"claim_token": token, "lease": "1h"})
    assert renewed.status == 200, renewed.body
    assert renewed.body["lease_until"] == utc_iso(api.clock.now() + timedelta(hours=1))
    too_long = await api.call("POST", f"{base}/renew", {"claim_token": token, "lease": "25h"})
    assert error_fields(assert_error(too_long, 422, "invalid_request")) == ["lease"]
    wrong = await api.call("POST", f"{base}/release", {"claim_token": token + "x"})
    assert_error(wrong, 409, "claim_mismatch")
    released = await api.call("POST", f"{base}/release", {"claim_token": token})
    assert released.status == 200, released.body
    assert (released.body["state"], released.body["lease_until"]) == ("approved", None)
    assert_error(
        await api.call("POST", f"{base}/release", {"claim_token": token}), 409, "not_pending"
    )
    token = (await api.claim(record["id"])).body["claim_token"]
    api.clock.advance(hours=1)
    late = await api.call("POST", f"{base}/renew", {"claim_token": token})
    assert_error(late, 409, "lease_exhausted")


async def test_claim_of_an_altered_row_is_409_approval_corrupt(api: Api) -> None:
    record = await api.approved()
    await tamper(
        api.store,
        "UPDATE approvals SET tool_args = :v WHERE id = :id",
        v='{"charge": "ch_attacker", "amount": 999999}',
        id=record["id"],
    )
    assert_error(await api.claim(record["id"]), 409, "approval_corrupt")
    assert (await api.get(record["id"]))["state"] == "approved"


async def test_the_record_names_what_replaced_it_and_its_escalation_level(api: Api) -> None:
    old = await api.approved(step={"node": "refund"})
    new = await api.create(step={"node": "refund"}, tool={"name": "t", "arguments": {"a": 2}})
    replaced = await api.get(old["id"])
    assert (replaced["state"], replaced["superseded_by"]) == ("superseded", new["id"])
    assert (new["superseded_by"], new["follow_up_id"], new["escalation_level"]) == (None, None, 0)
    assert_error(await api.claim(old["id"]), 409, "not_pending")
