"""Resuming an approved call (issue 12) as an agent does it: through the SDK
(`signoff_client.SignoffClient`) against `signoff serve` as a subprocess, with the humans' decisions
made by the `signoff` CLI, on SQLite and on PostgreSQL (every test runs on both).

What this proves, with real processes, real HTTP and the server's real clock:

- A claim whose answer is lost on the way back is recovered: the SDK retries it with its
  idempotency key and gets the same claim (the trail records one `claimed`), and so does a
  restarted agent that claims again with the key it stored; a caller with another key is
  refused. `renew` extends the lease, up to 24 h from the claim and not beyond; `release`
  hands the grant back `approved` (its grant clock unchanged) for another caller, whose claim
  gets a new token and leaves the old one dead.
- Only the newest request of a run's step is a grant: asking again for the same run and step
  with other arguments supersedes the older request (approved or pending), `superseded_by`
  names the newer one, its webhook says so and its claim is refused; a request of another
  step, or without a step, is left alone.
- A completion reported after the lease ran out is recorded as the truth, after the sweeper
  made the row `outcome_unknown` (the `interrupted_side_effect` follow-up is superseded and no
  human can approve it any more) and before the sweeper came round; the report is marked
  late in the trail, and each transition sends exactly one webhook.
- An approval whose tool arguments, tool name or presentation were edited in the database
  after it was approved is never handed out: the claim (and a completion) answers
  `approval_corrupt`, the row stays where it was, the trail and the server's error log say
  why, and `signoff audit verify` exits non-zero naming every altered approval and no other.
- A grant that today's configuration no longer allows (the decider left the route's group,
  or the route was removed), found by a server restarted with that configuration, is
  superseded at claim with `policy_changed`, a reason naming what changed, and a webhook; a
  grant whose decider is still entitled is claimed as before.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from signoff_client import ApprovalRecord, SignoffClient, verify_webhook
from signoff_client.errors import (
    ApprovalCorrupt,
    ClaimMismatch,
    LeaseExhausted,
    NotPending,
    PolicyChanged,
)
from store.records import Event
from store.repository import Store
from tests.support.cli import Result
from tests.support.lossy_proxy import LossyProxy
from tests.support.samples import request_body, tamper
from tests.support.service import (
    API_KEYS,
    WEBHOOK_SECRET,
    Delivery,
    Fleet,
    ServerProcess,
    WebhookReceiver,
    cli_for,
    deploy,
    service_config,
    write_config,
)

ACME = API_KEYS["acme"]
STEP = {"node": "refund", "cursor": 4}
WAIT = 10.0  # the longest any one wait for the server (a state, a webhook) may take

# -- the deployment and its humans -------------------------------------------------------------


async def start(fleet: Fleet) -> ServerProcess:
    return await asyncio.to_thread(fleet.start)


async def signoff(fleet: Fleet, *args: str) -> Result:
    """Run the `signoff` CLI of this deployment (off the event loop)."""
    return await asyncio.to_thread(cli_for(fleet).run, *args)


async def approve(fleet: Fleet, *records: ApprovalRecord, who: str = "alice") -> None:
    """A human approves each, exactly as shown, with `signoff approvals approve` (concurrent
    processes)."""
    commands = [["approvals", "approve", r.id, "--hash", r.hash, "--as", who] for r in records]
    results = await asyncio.to_thread(cli_for(fleet).run_all, commands)
    for record, result in zip(records, results, strict=True):
        assert result.returncode == 0, str(result)
        assert f"{record.id} approved" in result.stdout, str(result)


# -- the agent ---------------------------------------------------------------------------------


async def ask(
    agent: SignoffClient,
    run_id: str,
    *,
    amount: int = 12000,
    step: Any = None,
    capability: str = "payments.refund",
) -> ApprovalRecord:
    """Ask for a refund of `amount` (requested by sam, so alice or bob may decide it)."""
    body = request_body(
        run_id=run_id,
        capability=capability,
        step=step,
        tool={"name": "stripe.refunds.create", "arguments": {"charge": "ch_1", "amount": amount}},
    )
    record = await agent.request(**body)
    assert record.state == "pending", record
    return record


async def reaches(agent: SignoffClient, approval_id: str, state: str) -> ApprovalRecord:
    """Poll the approval as an agent would until it is in `state` (for at most WAIT s)."""
    deadline = time.monotonic() + WAIT
    while True:
        record = await agent.get(approval_id)
        if record.state == state:
            return record
        assert time.monotonic() < deadline, (
            f"{approval_id} still {record.state} after {WAIT} s, waiting for {state}"
        )
        await asyncio.sleep(0.1)


def when(text: str | None) -> datetime:
    assert text is not None
    return datetime.fromisoformat(text)


# -- what the database and the agent's webhook endpoint saw -------------------------------------


async def trail(store: Store, approval_id: str) -> list[Event]:
    async with store.read() as tx:
        return list(await tx.events_for(approval_id))


async def trail_types(store: Store, approval_id: str) -> list[str]:
    return [event.type for event in await trail(store, approval_id)]


def hook_of(delivery: Delivery) -> dict[str, Any]:
    """A delivery's body, after checking its signature as the agent's endpoint would."""
    assert verify_webhook(delivery.headers, delivery.body, WEBHOOK_SECRET) == delivery.delivery_id
    body: dict[str, Any] = delivery.json()
    return body


async def webhook(hooks: WebhookReceiver, approval_id: str, event: str) -> dict[str, Any]:
    """Wait (at most WAIT s) for the webhook announcing one transition of one approval; its body."""

    def matches(delivery: Delivery) -> bool:
        body = delivery.json()
        return bool(body["approval"]["id"] == approval_id and body["event"] == event)

    seen = await asyncio.to_thread(
        hooks.wait_for, lambda deliveries: any(matches(d) for d in deliveries), WAIT
    )
    return hook_of(next(d for d in seen if matches(d)))


def announced(hooks: WebhookReceiver, *approval_ids: str) -> Counter[tuple[str, str]]:
    """How many times each (approval, event) of these approvals was delivered."""
    bodies = [hook_of(d) for d in hooks.snapshot()]
    return Counter(
        (b["approval"]["id"], b["event"]) for b in bodies if b["approval"]["id"] in approval_ids
    )


# -- 1. a claim the agent can recover, renew and release ----------------------------------------


async def test_a_lost_claim_answer_is_recovered_and_the_claim_renewed_and_released(
    db_url: str, tmp_path: Path, store: Store
) -> None:
    with WebhookReceiver() as hooks, deploy(tmp_path, db_url, hooks) as fleet:
        server = await start(fleet)
        async with (
            SignoffClient(server.url, ACME) as agent,
            LossyProxy(server.port or 0) as proxy,
            SignoffClient(proxy.url, ACME) as agent_on_a_bad_network,
        ):
            asked = await ask(agent, "run-recover", step=STEP)
            await approve(fleet, asked)
            approved = await agent.get(asked.id)
            assert (approved.state, approved.execution) == ("approved", "not_started")
            assert approved.lease_until is None

            # The claim commits and its answer is lost: the SDK retries with the same key and
            # is handed the same claim.
            proxy.lose_next_answer()
            key = "run-recover/refund/attempt-1"
            claim = await agent_on_a_bad_network.claim(asked.id, idempotency_key=key)
            assert proxy.lost == 1
            assert (claim.approval.state, claim.approval.execution) == ("executing", "started")
            assert claim.tool == asked.tool
            assert claim.step == STEP
            # The agent's process restarts and claims again with the key it stored: same claim.
            again = await agent.claim(asked.id, idempotency_key=key)
            assert (again.claim_token, again.lease_until, again.idempotency_key) == (
                claim.claim_token,
                claim.lease_until,
                claim.idempotency_key,
            )
            # Anyone else (another key, or the SDK's own fresh one) is refused.
            for other_key in ("someone-else", None):
                with pytest.raises(NotPending) as refused:
                    await agent.claim(asked.id, idempotency_key=other_key)
                assert type(refused.value) is NotPending
                assert refused.value.state == "executing"
            assert (await trail_types(store, asked.id)).count("claimed") == 1

            held = await agent.get(asked.id)
            assert (held.state, held.lease_until) == ("executing", claim.lease_until)
            assert "claim_token" not in held.raw

            # Renew: a longer lease than the default 10 min, visible on the record.
            with pytest.raises(ClaimMismatch):
                await agent.renew(asked.id, "not-the-token", "20m")
            renewed = await agent.renew(asked.id, claim.claim_token, "20m")
            assert renewed.state == "executing"
            assert when(renewed.lease_until) - when(claim.lease_until) > timedelta(minutes=9)
            assert (await agent.get(asked.id)).lease_until == renewed.lease_until
            # ... up to 24 h from the claim, and then no further.
            longest = await agent.renew(asked.id, claim.claim_token, "24h")
            claimed_at = when(longest.raw["claimed_at"])
            assert when(longest.lease_until) == claimed_at + timedelta(hours=24)
            with pytest.raises(LeaseExhausted):
                await agent.renew(asked.id, claim.claim_token, "1h")

            # Release: "never started", approved again with its grant clock unchanged.
            with pytest.raises(ClaimMismatch):
                await agent.release(asked.id, "not-the-token")
            released = await agent.release(asked.id, claim.claim_token)
            assert (released.state, released.execution) == ("approved", "not_started")
            assert (released.lease_until, released.raw["claimed_at"]) == (None, None)
            assert released.raw["grant_expires_at"] == approved.raw["grant_expires_at"]
            assert released.decided_by == "alice"

            # Another caller claims it now: a new token; the released one is dead.
            async with SignoffClient(server.url, ACME) as another_worker:
                taken = await another_worker.claim(asked.id, idempotency_key="worker-2")
                assert taken.claim_token != claim.claim_token
                # The effect's idempotency key belongs to the call, not to the claim.
                assert taken.idempotency_key == claim.idempotency_key
                with pytest.raises(ClaimMismatch):
                    await agent.complete(asked.id, claim.claim_token, "succeeded")
                with pytest.raises(ClaimMismatch):
                    await agent.renew(asked.id, claim.claim_token)
                with pytest.raises(ClaimMismatch):
                    await agent.release(asked.id, claim.claim_token)
                done = await another_worker.complete(
                    asked.id, taken.claim_token, "succeeded", {"refund": "re_1"}
                )
            assert (done.state, done.execution) == ("executed", "finished")
            assert done.raw["outcome"] == {"status": "succeeded", "result": {"refund": "re_1"}}

        assert await trail_types(store, asked.id) == [
            "requested",
            "approved",
            "claimed",
            "renewed",
            "renewed",
            "released",
            "claimed",
            "executed",
        ]
        verified = await signoff(fleet, "audit", "verify")
        assert verified.returncode == 0, str(verified)
        assert "Traceback" not in server.log, server.log


# -- 2. the newest request of a step is the only grant -----------------------------------------


async def test_only_the_newest_request_of_a_step_is_a_grant(
    db_url: str, tmp_path: Path, store: Store
) -> None:
    with WebhookReceiver() as hooks, deploy(tmp_path, db_url, hooks) as fleet:
        server = await start(fleet)
        async with SignoffClient(server.url, ACME) as agent:
            first = await ask(agent, "run-step", step=STEP, amount=10000)
            other_step = await ask(agent, "run-step", step={"node": "notify"}, amount=500)
            no_step = await ask(agent, "run-step", amount=700)
            await approve(fleet, first, other_step, no_step)

            # The same run and step again (the step's keys in another order), 250 not 100.
            second = await ask(
                agent, "run-step", step={"cursor": 4, "node": "refund"}, amount=25000
            )
            replaced = await agent.get(first.id)
            assert (replaced.state, replaced.execution) == ("superseded", "not_started")
            assert replaced.superseded_by == second.id
            assert second.id in replaced.raw["decision_note"]
            with pytest.raises(NotPending) as refused:
                await agent.claim(first.id)
            assert refused.value.state == "superseded"
            hook = await webhook(hooks, first.id, "superseded")
            assert hook["approval"]["state"] == "superseded"
            assert hook["approval"]["superseded_by"] == second.id

            # A new request without a step replaces nothing; neither does another step's.
            await ask(agent, "run-step", amount=800)
            for kept in (other_step, no_step):
                record = await agent.get(kept.id)
                assert (record.state, record.superseded_by) == ("approved", None), record

            # A still-pending request of the step is replaced the same way.
            third = await ask(agent, "run-step", step=STEP, amount=30000)
            assert (await agent.get(second.id)).superseded_by == third.id
            assert (await agent.get(second.id)).state == "superseded"
            await webhook(hooks, second.id, "superseded")

            # A human can approve the newest request, and no longer the one it replaced.
            _, refused_decision = await asyncio.gather(
                approve(fleet, third),
                signoff(
                    fleet, "approvals", "approve", second.id, "--hash", second.hash, "--as", "alice"
                ),
            )
            assert refused_decision.returncode == 1, str(refused_decision)
            assert "superseded" in refused_decision.stderr, str(refused_decision)
            claim = await agent.claim(third.id)
            assert claim.tool["arguments"]["amount"] == 30000
            done = await agent.complete(third.id, claim.claim_token, "succeeded")
            assert done.state == "executed"

        assert await trail_types(store, first.id) == ["requested", "approved", "superseded"]
        assert await trail_types(store, second.id) == ["requested", "superseded"]
        assert announced(hooks, first.id, second.id) == Counter(
            {(first.id, "approved"): 1, (first.id, "superseded"): 1, (second.id, "superseded"): 1}
        )


# -- 3. a late completion is the truth ------------------------------------------------------------


async def test_a_completion_after_the_sweeper_lapsed_the_lease_is_recorded(
    db_url: str, tmp_path: Path, store: Store
) -> None:
    # The sweeper runs every 0.2 s (service_config), so a 2 s lease lapses within ~2.2 s.
    with WebhookReceiver() as hooks, deploy(tmp_path, db_url, hooks) as fleet:
        server = await start(fleet)
        async with SignoffClient(server.url, ACME) as agent:
            asked = await ask(agent, "run-late")
            await approve(fleet, asked)
            claim = await agent.claim(asked.id, lease="2s")
            lease = when(claim.lease_until) - when(claim.approval.raw["claimed_at"])
            assert lease == timedelta(seconds=2)

            # The call runs longer than its lease; the sweeper records outcome_unknown and asks
            # a human whether to run it again.
            lapsed = await reaches(agent, asked.id, "outcome_unknown")
            assert lapsed.execution == "started"
            assert lapsed.follow_up_id is not None
            hook = await webhook(hooks, asked.id, "lease_lapsed")
            assert hook["follow_up_id"] == lapsed.follow_up_id
            assert hook["approval"]["follow_up_id"] == lapsed.follow_up_id
            follow_up = await agent.get(lapsed.follow_up_id)
            assert (follow_up.kind, follow_up.state) == ("interrupted_side_effect", "pending")
            assert (follow_up.origin_id, follow_up.tool) == (asked.id, asked.tool)
            # A call that may have run cannot be handed back or held longer.
            with pytest.raises(NotPending):
                await agent.release(asked.id, claim.claim_token)
            with pytest.raises(NotPending):
                await agent.renew(asked.id, claim.claim_token)

            # Then the agent reports what really happened.
            result = {"refund": "re_late"}
            done = await agent.complete(asked.id, claim.claim_token, "succeeded", result)
            assert (done.state, done.execution) == ("executed", "finished")
            assert done.raw["outcome"] == {"status": "succeeded", "result": result}
            assert done.follow_up_id == follow_up.id
            closed = await agent.get(follow_up.id)
            assert closed.state == "superseded"
            assert closed.raw["decision_note"] == "outcome reported by the agent"
            # Repeating the report (a lost answer) returns the recorded outcome.
            repeated = await agent.complete(asked.id, claim.claim_token, "succeeded", result)
            assert (repeated.state, repeated.raw["version"]) == ("executed", done.raw["version"])
            # ... and no human can approve running it again any more.
            decision = await signoff(
                fleet,
                "approvals",
                "approve",
                follow_up.id,
                "--hash",
                follow_up.hash,
                "--as",
                "alice",
            )
            assert decision.returncode == 1, str(decision)
            assert "superseded" in decision.stderr, str(decision)
            await webhook(hooks, follow_up.id, "superseded")

        events = await trail(store, asked.id)
        assert [e.type for e in events] == [
            "requested",
            "approved",
            "claimed",
            "lease_lapsed",
            "executed",
        ]
        assert events[-1].data.get("late") is True, events[-1]
        assert await trail_types(store, follow_up.id) == ["requested", "superseded"]
        await asyncio.sleep(0.3)  # the outbox polls every 0.1 s: room for a duplicate to show
        assert announced(hooks, asked.id, follow_up.id) == Counter(
            {
                (asked.id, "approved"): 1,
                (asked.id, "lease_lapsed"): 1,
                (follow_up.id, "superseded"): 1,
            }
        )
        assert "Traceback" not in server.log, server.log


async def test_a_completion_after_the_lease_but_before_the_sweep_is_recorded(
    db_url: str, tmp_path: Path, store: Store
) -> None:
    # The sweeper's pass at startup is its only one during this test.
    with (
        WebhookReceiver() as hooks,
        deploy(tmp_path, db_url, hooks, sweeper={"interval": 3600}) as fleet,
    ):
        server = await start(fleet)
        async with SignoffClient(server.url, ACME) as agent:
            asked = await ask(agent, "run-late-unswept")
            await approve(fleet, asked)
            key = "run-late-unswept/attempt-1"
            claim = await agent.claim(asked.id, lease="1s", idempotency_key=key)
            past = (when(claim.lease_until) - datetime.now(UTC)).total_seconds() + 0.2
            await asyncio.sleep(max(past, 0.0))

            still = await agent.get(asked.id)
            assert (still.state, still.lease_until) == ("executing", claim.lease_until)
            assert when(still.lease_until) < datetime.now(UTC)
            # The lease ran out: the claim is not handed out again, nor renewed or released.
            with pytest.raises(NotPending):
                await agent.claim(asked.id, idempotency_key=key)
            with pytest.raises(LeaseExhausted):
                await agent.renew(asked.id, claim.claim_token)
            with pytest.raises(LeaseExhausted):
                await agent.release(asked.id, claim.claim_token)

            done = await agent.complete(asked.id, claim.claim_token, "failed", {"error": "card"})
            assert (done.state, done.execution) == ("failed", "finished")
            assert done.raw["outcome"] == {"status": "failed", "result": {"error": "card"}}
            assert done.follow_up_id is None

        events = await trail(store, asked.id)
        assert [e.type for e in events] == ["requested", "approved", "claimed", "failed"]
        assert events[-1].data.get("late") is True, events[-1]
        assert announced(hooks, asked.id) == Counter({(asked.id, "approved"): 1})
        assert "Traceback" not in server.log, server.log


# -- 4. an approval altered in the database ------------------------------------------------------


async def test_an_approval_altered_after_approval_is_never_handed_out(
    db_url: str, tmp_path: Path, store: Store
) -> None:
    with WebhookReceiver() as hooks, deploy(tmp_path, db_url, hooks) as fleet:
        server = await start(fleet)
        async with SignoffClient(server.url, ACME) as agent:
            args_edited = await ask(agent, "run-tamper-args")
            name_edited = await ask(agent, "run-tamper-name")
            shown_edited = await ask(agent, "run-tamper-presentation")
            running = await ask(agent, "run-tamper-running")
            bystander = await ask(agent, "run-bystander")  # left alone (and pending)
            await approve(fleet, args_edited, name_edited, shown_edited, running)

            edits = {
                args_edited.id: ("tool_args", '{"charge": "ch_attacker", "amount": 999999}'),
                name_edited.id: ("tool_name", "stripe.payouts.create"),
                shown_edited.id: ("presentation", '{"title": "Refund €1.20 to Zoë"}'),
            }
            for approval_id, (column, value) in edits.items():
                await tamper(
                    store,
                    f"UPDATE approvals SET {column} = :v WHERE id = :id",
                    v=value,
                    id=approval_id,
                )
                with pytest.raises(ApprovalCorrupt) as refused:
                    await agent.claim(approval_id)
                assert refused.value.code == "approval_corrupt"
                assert approval_id in refused.value.message
                record = await agent.get(approval_id)
                assert (record.state, record.execution) == ("approved", "not_started")
                assert (record.raw["claimed_at"], record.lease_until) == (None, None)
                assert (await trail_types(store, approval_id))[-1] == "integrity_failed"
                errors = [
                    line
                    for line in server.log.splitlines()
                    if " ERROR " in line and approval_id in line
                ]
                assert errors, server.log[-3000:]

            # An intact grant is claimed as before; altered while it runs, its outcome report
            # is refused too, and nothing moves.
            claim = await agent.claim(running.id)
            assert claim.tool == running.tool
            await tamper(
                store,
                "UPDATE approvals SET tool_args = :v WHERE id = :id",
                v='{"charge": "ch_attacker", "amount": 999999}',
                id=running.id,
            )
            with pytest.raises(ApprovalCorrupt):
                await agent.complete(running.id, claim.claim_token, "succeeded")
            assert (await agent.get(running.id)).state == "executing"
            assert (await trail_types(store, running.id))[-1] == "integrity_failed"

        verify = await signoff(fleet, "audit", "verify")
        assert verify.returncode == 1, str(verify)
        broken = sorted([*edits, running.id])
        for approval_id in broken:
            assert f"audit chain BROKEN at approval {approval_id}" in verify.stderr, str(verify)
        assert bystander.id not in verify.stderr, str(verify)
        assert f"{len(broken)} of 5 approvals broken" in verify.stderr, str(verify)
        assert "Traceback" not in verify.stderr + server.log


# -- 5. the policy changed between approval and claim -----------------------------------------


async def test_a_grant_todays_policy_no_longer_allows_is_superseded_at_claim(
    db_url: str, tmp_path: Path, store: Store
) -> None:
    with WebhookReceiver() as hooks, deploy(tmp_path, db_url, hooks) as fleet:
        server = await start(fleet)
        async with SignoffClient(server.url, ACME) as agent:
            by_alice = await ask(agent, "run-policy-alice")
            by_bob = await ask(agent, "run-policy-bob")
            contract = await ask(agent, "run-policy-contract", capability="contracts.sign")
        await asyncio.gather(approve(fleet, by_alice, contract), approve(fleet, by_bob, who="bob"))
        assert server.terminate() == 0, server.log

        # Alice leaves finance, and contracts no longer have a route.
        config = service_config(db_url, hooks.url)
        config["groups"]["finance"]["members"] = ["bob", "sam"]
        config["routes"] = [r for r in config["routes"] if r["capability"] != "contracts.*"]
        write_config(fleet.config_path, config)
        restarted = await start(fleet)

        async with SignoffClient(restarted.url, ACME) as agent:
            with pytest.raises(PolicyChanged) as refused:
                await agent.claim(by_alice.id)
            assert refused.value.code == "policy_changed"
            assert isinstance(refused.value, NotPending)
            assert refused.value.state == "superseded"
            record = await agent.get(by_alice.id)
            assert (record.state, record.execution) == ("superseded", "not_started")
            note = record.raw["decision_note"]
            assert "policy changed" in note and "alice" in note, note
            hook = await webhook(hooks, by_alice.id, "superseded")
            assert hook["approval"]["decision_note"] == note

            with pytest.raises(PolicyChanged):
                await agent.claim(contract.id)
            record = await agent.get(contract.id)
            assert record.state == "superseded"
            note = record.raw["decision_note"]
            assert "policy changed" in note and "no route" in note, note
            await webhook(hooks, contract.id, "superseded")

            # Asking again is refused as what it now is.
            with pytest.raises(NotPending) as again:
                await agent.claim(by_alice.id)
            assert again.value.state == "superseded"

            # Bob is still in finance: his grant holds.
            claim = await agent.claim(by_bob.id)
            done = await agent.complete(by_bob.id, claim.claim_token, "succeeded")
            assert done.state == "executed"

        for superseded in (by_alice, contract):
            events = await trail(store, superseded.id)
            assert [e.type for e in events] == ["requested", "approved", "superseded"]
            assert events[-1].actor == "signoff:policy"
        await asyncio.sleep(0.3)  # the outbox polls every 0.1 s: room for a duplicate to show
        assert announced(hooks, by_alice.id, contract.id) == Counter(
            {
                (by_alice.id, "approved"): 1,
                (by_alice.id, "superseded"): 1,
                (contract.id, "approved"): 1,
                (contract.id, "superseded"): 1,
            }
        )
        assert "Traceback" not in restarted.log, restarted.log
