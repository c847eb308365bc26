"""Creating, reading and listing approvals through the agent-facing HTTP API, over real HTTP, on
real SQLite and PostgreSQL.

The real application (`build_app`, no background tasks, a FakeClock) is served on a loopback
port and driven with an aiohttp client (tests/support/api_server.py). What these tests prove:

- create is idempotent on (tenant, run_id, call); get and list return the truthful record
  (`state`, `execution`, `hash`); list filters and cursor pagination visit every row once;
- one tenant's key cannot see or touch another tenant's approvals: 404, indistinguishable
  from an id that does not exist;
- /metrics, /readyz and /healthz report the database's real state.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bot.app import build_app
from bot.clock import utc_iso
from bot.config import parse_config
from bot.errors import ConfigError
from store.migrate import head_revision
from store.repository import Store
from tests.support.api_server import GLOBEX_KEY, HEX64, NO_BODY, Api, Serve, assert_error, listing
from tests.support.samples import TEST_CONFIG, request_body

# -- create, get, list -----------------------------------------------------------------------


async def test_create_is_idempotent_per_run_and_call(api: Api) -> None:
    first = await api.call("POST", "/v1/approvals", request_body())
    assert first.status == 201, first.body
    record = first.body
    assert HEX64.match(record["hash"])
    assert (record["state"], record["execution"], record["tenant"]) == (
        "pending",
        "not_started",
        "acme",
    )

    again = await api.call("POST", "/v1/approvals", request_body())
    assert again.status == 200, again.body
    assert again.body == record

    # The same call with its argument keys in another order is the same call (canonical JSON).
    reordered = request_body(
        tool={"name": "stripe.refunds.create", "arguments": {"amount": 12000, "charge": "ch_1"}}
    )
    same = await api.call("POST", "/v1/approvals", reordered)
    assert (same.status, same.body["id"]) == (200, record["id"])

    other_run = await api.call("POST", "/v1/approvals", request_body(run_id="run-2"))
    assert other_run.status == 201
    assert other_run.body["id"] != record["id"]
    assert other_run.body["hash"] == record["hash"]

    other_call = await api.call(
        "POST",
        "/v1/approvals",
        request_body(tool={"name": "stripe.refunds.create", "arguments": {"charge": "ch_2"}}),
    )
    assert other_call.status == 201
    assert other_call.body["hash"] != record["hash"]

    # Asking again after a decision returns the decided record, not a new request.
    await api.approve(record)
    after = await api.call("POST", "/v1/approvals", request_body())
    assert (after.status, after.body["id"], after.body["state"]) == (200, record["id"], "approved")
    rows, _ = await api.snapshot()
    assert len(rows) == 3


async def test_ten_concurrent_identical_creates_make_one_approval(serve: Serve) -> None:
    api = await serve(max_creates_in_flight=10)  # all ten at once, none refused for load
    replies = await asyncio.gather(
        *(api.call("POST", "/v1/approvals", request_body()) for _ in range(10))
    )
    statuses = sorted(r.status for r in replies)
    assert statuses == [200] * 9 + [201], [(r.status, r.body) for r in replies]
    assert len({r.body["id"] for r in replies}) == 1
    rows, _ = await api.snapshot()
    assert len(rows) == 1


async def test_get_returns_the_truthful_record(api: Api) -> None:
    sent = request_body(
        step={"cursor": 4},
        resume={"thread": "t-1"},
        preconditions={"balance_at_least": 12000},
        approval_ttl="2h",
    )
    created = await api.call("POST", "/v1/approvals", sent)
    assert created.status == 201
    record = await api.get(created.body["id"])
    assert record == created.body
    assert record["state"] == "pending"
    assert record["execution"] == "not_started"
    assert record["tool"] == sent["tool"]
    assert record["presentation"] == sent["presentation"]
    assert (record["step"], record["resume"], record["preconditions"]) == (
        {"cursor": 4},
        {"thread": "t-1"},
        {"balance_at_least": 12000},
    )
    assert record["created_at"] == utc_iso(api.clock.now())
    assert record["expires_at"] == utc_iso(api.clock.now() + timedelta(hours=2))
    assert record["assignee"] == "group:finance"
    assert record["decided_by"] is None

    api.clock.advance(minutes=5)
    await api.approve(record)
    decided = await api.get(record["id"])
    assert (decided["state"], decided["execution"], decided["hash"]) == (
        "approved",
        "not_started",
        record["hash"],
    )
    assert decided["decided_by"] == "alice"
    assert decided["decided_at"] == utc_iso(api.clock.now())
    assert decided["grant_expires_at"] == utc_iso(api.clock.now() + timedelta(hours=24))

    missing = await api.call("GET", f"/v1/approvals/{uuid.uuid4()}")
    assert_error(missing, 404, "not_found")


async def test_list_filters_by_state_run_capability_and_assignee(api: Api) -> None:
    refund = await api.create(run_id="run-a")
    api.clock.advance(seconds=1)
    refund_b = await api.create(run_id="run-b")
    api.clock.advance(seconds=1)
    contract = await api.create(
        run_id="run-a",
        capability="contracts.cancel",
        tool={"name": "crm.contracts.cancel", "arguments": {"id": "c-9"}},
    )
    api.clock.advance(seconds=1)
    globex = await api.create(key=GLOBEX_KEY, run_id="run-a", capability="ops.restart")
    await api.approve(refund_b)

    def ids(page: dict[str, Any]) -> list[str]:
        return [a["id"] for a in page["approvals"]]

    assert ids(await listing(api)) == [contract["id"], refund_b["id"], refund["id"]]
    assert ids(await listing(api, "?state=pending")) == [contract["id"], refund["id"]]
    assert ids(await listing(api, "?state=approved")) == [refund_b["id"]]
    assert ids(await listing(api, "?state=executed")) == []
    assert ids(await listing(api, "?run_id=run-a")) == [contract["id"], refund["id"]]
    assert ids(await listing(api, "?capability=payments.refund")) == [refund_b["id"], refund["id"]]
    assert ids(await listing(api, "?assignee=alice")) == [contract["id"]]
    assert ids(await listing(api, "?assignee=group%3Afinance&state=pending")) == [refund["id"]]
    assert ids(await listing(api, "?run_id=run-a", key=GLOBEX_KEY)) == [globex["id"]]
    page = await listing(api, "?state=approved")
    assert page["approvals"][0]["execution"] == "not_started"
    assert page["approvals"][0]["hash"] == refund_b["hash"]


async def test_cursor_pagination_returns_every_approval_once_newest_first(api: Api) -> None:
    created = []
    for i in range(7):
        record = await api.create(run_id=f"run-{i}")
        created.append(record)
        if i % 2:  # pairs share a created_at, so the id breaks the tie
            api.clock.advance(seconds=1, microseconds=250)
    expected = [
        r["id"] for r in sorted(created, key=lambda r: (r["created_at"], r["id"]), reverse=True)
    ]

    seen: list[str] = []
    pages = 0
    query = "?limit=3"
    while True:
        page = await listing(api, query)
        pages += 1
        assert len(page["approvals"]) <= 3
        seen += [a["id"] for a in page["approvals"]]
        if page["next_cursor"] is None:
            break
        query = f"?limit=3&cursor={page['next_cursor']}"
        assert pages < 10
    assert pages == 3
    assert seen == expected
    assert len(set(seen)) == 7

    # A full last page says there is no more only if there truly is none.
    exact = await listing(api, "?limit=7")
    assert [a["id"] for a in exact["approvals"]] == expected
    assert exact["next_cursor"] is None


async def test_a_page_of_large_records_is_bounded_in_bytes_and_says_so(api: Api) -> None:
    made = {
        (
            await api.create(
                run_id=f"big-{i}", tool={"name": "t", "arguments": {"blob": "x" * 200_000}}
            )
        )["id"]
        for i in range(8)
    }
    seen: list[str] = []
    query = "?limit=500"
    while True:
        reply = await api.call("GET", f"/v1/approvals{query}")
        assert reply.status == 200, reply.body
        page = reply.body
        # About 1 MiB, never the 1.6 MB of all eight.
        assert len(json.dumps(page)) < 1.5 * 1024 * 1024
        seen += [a["id"] for a in page["approvals"]]
        if page["next_cursor"] is None:
            assert "truncated" not in page
            break
        assert page["truncated"] is True and 1 <= len(page["approvals"]) < 8
        query = f"?limit=500&cursor={page['next_cursor']}"
    assert sorted(seen) == sorted(made) and len(seen) == len(set(seen))


# -- tenant isolation ------------------------------------------------------------------------


_ACTIONS: list[tuple[str, str, Any]] = [
    ("GET", "", NO_BODY),
    ("POST", "/claim", {}),
    ("POST", "/complete", {"claim_token": "x", "outcome": "succeeded"}),
    ("POST", "/supersede", {"reason": "stale"}),
    ("POST", "/cancel", {}),
]


@pytest.mark.parametrize(
    ("method", "suffix", "body"), _ACTIONS, ids=[a[1] or "get" for a in _ACTIONS]
)
@pytest.mark.parametrize("acme_state", ["pending", "approved"])
async def test_another_tenants_approval_is_not_found(
    api: Api, method: str, suffix: str, body: Any, acme_state: str
) -> None:
    record = await api.create()
    if acme_state == "approved":
        await api.approve(record)
    before = await api.snapshot()

    theirs = await api.call(method, f"/v1/approvals/{record['id']}{suffix}", body, key=GLOBEX_KEY)
    nobody = str(uuid.uuid4())
    missing = await api.call(method, f"/v1/approvals/{nobody}{suffix}", body, key=GLOBEX_KEY)

    error = assert_error(theirs, 404, "not_found")
    assert_error(missing, 404, "not_found")
    # Indistinguishable: the same body but for the id it echoes.
    assert json.loads(json.dumps(theirs.body).replace(record["id"], nobody)) == missing.body
    assert "acme" not in json.dumps(error)
    assert await api.snapshot() == before
    assert (await api.get(record["id"]))["state"] == acme_state

    listed = await listing(api, "?limit=500", key=GLOBEX_KEY)
    assert record["id"] not in [a["id"] for a in listed["approvals"]]
    by_run = await listing(api, f"?run_id={record['run_id']}", key=GLOBEX_KEY)
    assert by_run["approvals"] == []


async def test_same_run_and_call_in_two_tenants_are_two_approvals(api: Api) -> None:
    body = request_body(capability="payments.refund")
    acme = await api.call("POST", "/v1/approvals", body)
    globex = await api.call("POST", "/v1/approvals", body, key=GLOBEX_KEY)
    assert (acme.status, globex.status) == (201, 201)
    assert acme.body["id"] != globex.body["id"]
    assert (acme.body["tenant"], globex.body["tenant"]) == ("acme", "globex")


async def test_two_tenants_with_the_same_key_value_refuse_to_start(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIGNOFF_TEST_ACME_KEY", "same")
    monkeypatch.setenv("SIGNOFF_TEST_GLOBEX_KEY", "same")
    tenants = [
        {"name": "acme", "api_key_env": "SIGNOFF_TEST_ACME_KEY"},
        {"name": "globex", "api_key_env": "SIGNOFF_TEST_GLOBEX_KEY"},
    ]
    config = parse_config({**TEST_CONFIG, "tenants": tenants})
    with pytest.raises(ConfigError, match="same API key"):
        build_app(config, store, background=False)


# -- metrics and readiness -------------------------------------------------------------------


def _samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                found[tuple(sorted(sample.labels.items()))] = sample.value
    return found


async def test_metrics_report_pending_and_outbox_backlog(api: Api) -> None:
    await api.create(run_id="r1")
    await api.create(run_id="r2")
    decided = await api.create(run_id="r3")
    await api.create(
        run_id="r1",
        capability="contracts.cancel",
        tool={"name": "crm.cancel", "arguments": {"id": "c-1"}},
    )
    await api.create(key=GLOBEX_KEY, capability="ops.restart")
    await api.approve(decided)  # acme has a webhook: one queued job

    reply = await api.call("GET", "/metrics", key=None)
    assert reply.status == 200
    assert reply.headers["Content-Type"].startswith("text/plain")
    pending = _samples(reply.body, "signoff_pending_approvals")
    assert pending == {
        (("capability", "payments.refund"), ("tenant", "acme")): 2.0,
        (("capability", "contracts.cancel"), ("tenant", "acme")): 1.0,
        (("capability", "ops.restart"), ("tenant", "globex")): 1.0,
    }
    async with api.store.read() as tx:
        queued = await tx.outbox_jobs(state="queued")
    assert queued
    backlog = _samples(reply.body, "signoff_outbox_backlog")
    assert sum(backlog.values()) == len(queued)
    assert backlog[(("kind", "webhook"),)] == len([j for j in queued if j.kind == "webhook"])


async def test_readyz_names_the_schema_revision(api: Api) -> None:
    reply = await api.call("GET", "/readyz", key=None)
    assert (reply.status, reply.body) == (200, {"status": "ready", "schema": head_revision()})
    health = await api.call("GET", "/healthz", key=None)
    assert (health.status, health.body) == (200, {"status": "ok"})
