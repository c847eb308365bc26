"""The OpenAI Agents SDK adapter against a real `signoff serve`: the real Runner and RunState,
a scripted model instead of an LLM, and the agent program (openai_agent_app.py) in processes
of its own.

Turn 1 runs in one process that files its approval and exits; a human decides with the CLI;
a new process verifies the decision webhook as received and resumes the run. (Steps whose
point is not the process boundary, such as a redelivery, run the same program in this one.)

What a user cares about: the refund does not run before approval, runs exactly once with the
approved arguments (and the claim's idempotency key) after it, not again on a redelivered
webhook nor with two resumers at once; a rejection reaches the model as a rejection and the
refund never runs; a paused run whose call was altered after the decision is refused.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from signoff_client import ApprovalRecord, SignoffClient
from tests.support import prefork
from tests.support.agent_deployment import Deployment

APP = Path(__file__).with_name("openai_agent_app.py")


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "agent"
    path.mkdir()
    return path


def app(deployment: Deployment, workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """One run of the agent program, in its own process."""
    env = deployment.env | {
        "SIGNOFF_URL": deployment.url,
        "SIGNOFF_API_KEY": deployment.api_key,
        "SIGNOFF_WEBHOOK_SECRET": deployment.webhook_secret,
    }
    return subprocess.run(
        [prefork.python(), str(APP), args[0], str(workdir), *args[1:]],
        env=env, cwd=workdir, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def turn1(
    deployment: Deployment, workdir: Path, run_id: str, *calls: dict[str, Any]
) -> list[dict[str, Any]]:
    done = app(deployment, workdir, "turn1", run_id, json.dumps(calls))
    assert done.returncode == 0, done.stderr
    return json.loads((workdir / "filed.json").read_text("utf-8"))


def resume(deployment: Deployment, workdir: Path, webhook: str) -> dict[str, Any]:
    done = app(deployment, workdir, "resume", webhook)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def inline(deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The agent program in this process (its module, environment set): for the steps whose
    point is not a new process, so the file stays fast."""
    from tests.frameworks import openai_agent_app

    monkeypatch.setenv("SIGNOFF_URL", deployment.url)
    monkeypatch.setenv("SIGNOFF_API_KEY", deployment.api_key)
    monkeypatch.setenv("SIGNOFF_WEBHOOK_SECRET", deployment.webhook_secret)
    return openai_agent_app


def resume_inline(app_module: Any, workdir: Path, webhook: str, *, store: bool = False) -> Any:
    app_module.WORKDIR = workdir
    states = app_module.FileStateStore(workdir / "states") if store else None
    return asyncio.run(app_module.resume(webhook, states))


def turn1_inline(
    app_module: Any, workdir: Path, run_id: str, *calls: dict[str, Any], store: bool = False
) -> Any:
    app_module.WORKDIR = workdir
    states = app_module.FileStateStore(workdir / "states") if store else None
    asyncio.run(app_module.turn1(run_id, list(calls), states))
    return json.loads((workdir / "filed.json").read_text("utf-8"))


def webhook(deployment: Deployment, workdir: Path, approval_id: str, event: str) -> str:
    """Wait for the approval's webhook of `event` and keep it as received (headers and raw
    body), for a resuming process to read. Returns its name."""

    def matches(delivery: Any) -> bool:
        body = delivery.json()
        return bool(body["approval"]["id"] == approval_id and body["event"] == event)

    deployment.hooks.wait_for(lambda seen: any(matches(d) for d in seen), 15)
    delivery = next(d for d in deployment.hooks.snapshot() if matches(d))
    name = f"{event}-{approval_id}"
    (workdir / f"{name}.headers.json").write_text(json.dumps(delivery.headers), "utf-8")
    (workdir / f"{name}.body").write_bytes(delivery.body)
    return name


def lines(path: Path) -> list[Any]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


def get(deployment: Deployment, approval_id: str) -> ApprovalRecord:
    async def fetch() -> ApprovalRecord:
        async with SignoffClient(deployment.url, deployment.api_key) as client:
            return await client.get(approval_id)

    return asyncio.run(fetch())


def test_an_approved_call_runs_once_in_a_new_process_with_the_approved_arguments(
    deployment: Deployment, workdir: Path, inline: Any
) -> None:
    [filed] = turn1(deployment, workdir, "oa-approve", {"charge": "ch_1", "amount": 12000})
    assert filed["state"] == "pending"
    assert filed["tool"] == {"name": "refund", "arguments": {"charge": "ch_1", "amount": 12000}}
    assert lines(workdir / "refunds.jsonl") == []  # turn 1 ended without running it

    deployment.approve(filed["id"], filed["hash"])
    approved = webhook(deployment, workdir, filed["id"], "approved")
    report = resume(deployment, workdir, approved)

    assert report["status"] == "resumed"
    [refund] = lines(workdir / "refunds.jsonl")
    assert (refund["charge"], refund["amount"]) == ("ch_1", 12000)
    # The tool got the claim's idempotency key, to hand to the payment API.
    assert refund["key"] == hashlib.sha256(f"{filed['id']}:{filed['hash']}".encode()).hexdigest()
    [call] = report["calls"]
    assert (call["execution"], call["outcome"]) == ("finished", "succeeded")
    record = get(deployment, filed["id"])
    assert (record.state, record.execution) == ("executed", "finished")
    assert record.raw["outcome"]["result"] == {"output": "refunded 12000 of ch_1"}
    [seen] = lines(workdir / "model-saw.jsonl")
    assert [s["output"] for s in seen] == ["refunded 12000 of ch_1"]

    # The same webhook again (a redelivery, or a second replica): nothing runs twice.
    again = resume_inline(inline, workdir, approved)
    assert again["status"] == "already_resumed"
    assert len(lines(workdir / "refunds.jsonl")) == 1
    assert len(lines(workdir / "model-saw.jsonl")) == 1


def test_two_resumers_at_once_run_the_call_once(
    deployment: Deployment, workdir: Path, inline: Any
) -> None:
    [filed] = turn1_inline(inline, workdir, "oa-race", {"charge": "ch_3", "amount": 100})
    deployment.approve(filed["id"], filed["hash"])
    approved = webhook(deployment, workdir, filed["id"], "approved")

    async def both() -> list[Any]:
        inline.WORKDIR = workdir
        return list(
            await asyncio.gather(inline.resume(approved, None), inline.resume(approved, None))
        )

    reports = asyncio.run(both())
    # Both loaded the paused run; the claim let exactly one of them run it.
    assert sorted(r["status"] for r in reports) == ["already_resumed", "resumed"]
    assert len(lines(workdir / "refunds.jsonl")) == 1
    assert len(lines(workdir / "model-saw.jsonl")) == 1


def test_a_tool_that_fails_is_completed_as_failed(
    deployment: Deployment, workdir: Path, inline: Any
) -> None:
    [filed] = turn1_inline(inline, workdir, "oa-fail", {"charge": "ch_4", "amount": 0})
    deployment.approve(filed["id"], filed["hash"])
    report = resume_inline(inline, workdir, webhook(deployment, workdir, filed["id"], "approved"))

    [call] = report["calls"]
    assert (call["execution"], call["outcome"]) == ("finished", "failed")
    record = get(deployment, filed["id"])
    assert (record.state, record.execution) == ("failed", "finished")
    assert record.raw["outcome"]["result"]["error"] == "the tool raised"
    # The model was told it failed (the SDK's default message), not that it succeeded.
    [seen] = lines(workdir / "model-saw.jsonl")
    assert "error" in seen[0]["output"]


def test_a_rejection_reaches_the_model_and_the_call_never_runs(
    deployment: Deployment, workdir: Path, inline: Any
) -> None:
    [filed] = turn1_inline(inline, workdir, "oa-reject", {"charge": "ch_9", "amount": 90000})
    deployment.reject(filed["id"], filed["hash"], "over the refund limit")
    report = resume_inline(inline, workdir, webhook(deployment, workdir, filed["id"], "rejected"))

    assert report["status"] == "resumed"
    [call] = report["calls"]
    assert (call["decision"], call["execution"]) == ("rejected", "not_started")
    assert lines(workdir / "refunds.jsonl") == []
    [seen] = lines(workdir / "model-saw.jsonl")
    [told] = [s["output"] for s in seen]
    assert "alice rejected it: over the refund limit" in told
    assert "over the refund limit" in report["final_output"]
    assert get(deployment, filed["id"]).execution == "not_started"


def test_two_gated_calls_of_one_turn_resume_together_once_both_are_decided(
    deployment: Deployment, workdir: Path, inline: Any
) -> None:
    first, second = turn1_inline(
        inline, workdir, "oa-two",
        {"charge": "ch_1", "amount": 500}, {"charge": "ch_2", "amount": 70000}, store=True,
    )  # fmt: skip
    # The state went to the agent's own store; signoff keeps its key and digest only.
    meta = get(deployment, first["id"]).raw["resume"]["openai_agents"]
    assert "run_state" not in meta and (workdir / "states" / f"{meta['state_key']}.json").exists()

    deployment.approve(first["id"], first["hash"])
    approved = webhook(deployment, workdir, first["id"], "approved")
    waiting = resume_inline(inline, workdir, approved, store=True)
    assert waiting["status"] == "waiting"  # the other call is undecided: nothing runs yet
    assert lines(workdir / "refunds.jsonl") == [] and lines(workdir / "model-saw.jsonl") == []

    deployment.reject(second["id"], second["hash"], "too much", who="bob")
    rejected = webhook(deployment, workdir, second["id"], "rejected")
    report = resume_inline(inline, workdir, rejected, store=True)
    assert report["status"] == "resumed"
    assert [(r["charge"], r["amount"]) for r in lines(workdir / "refunds.jsonl")] == [("ch_1", 500)]
    [seen] = lines(workdir / "model-saw.jsonl")
    told = {s["call_id"]: s["output"] for s in seen}
    assert told["call_oa-two_0"] == "refunded 500 of ch_1"
    assert "bob rejected it: too much" in told["call_oa-two_1"]
    assert get(deployment, first["id"]).state == "executed"

    # The first decision's webhook delivered again later: the run is not continued twice.
    assert resume_inline(inline, workdir, approved, store=True)["status"] == "already_resumed"
    assert len(lines(workdir / "refunds.jsonl")) == 1


def test_a_paused_run_whose_call_was_altered_is_refused(
    deployment: Deployment, workdir: Path, tmp_path: Path, inline: Any
) -> None:
    [filed] = turn1_inline(inline, workdir, "oa-tamper", {"charge": "ch_1", "amount": 12000})
    # Someone with write access to signoff's database rewrites the paused run (its digest
    # too) so that it would refund more. The approved request itself is untouched. (The
    # deployment fixture keeps its SQLite file at tmp_path / "signoff.db".)
    with sqlite3.connect(tmp_path / "signoff.db", timeout=10) as db:
        [(raw,)] = db.execute("SELECT resume FROM approvals WHERE id = ?", (filed["id"],))
        resume_field = json.loads(raw)
        meta = resume_field["openai_agents"]
        meta["run_state"] = meta["run_state"].replace("12000", "99999")
        meta["state_sha256"] = hashlib.sha256(meta["run_state"].encode()).hexdigest()
        db.execute(
            "UPDATE approvals SET resume = ? WHERE id = ?", (json.dumps(resume_field), filed["id"])
        )
    deployment.approve(filed["id"], filed["hash"])

    refused = resume_inline(inline, workdir, webhook(deployment, workdir, filed["id"], "approved"))
    assert refused["status"] == "error"
    assert "do not hash to what was approved" in refused["error"]
    assert lines(workdir / "refunds.jsonl") == []
    record = get(deployment, filed["id"])
    assert (record.state, record.execution) == ("superseded", "not_started")
    # The withdrawal's own webhook is recognised, not refused again.
    superseded = webhook(deployment, workdir, filed["id"], "superseded")
    assert resume_inline(inline, workdir, superseded)["status"] == "refused"


def test_the_deprecated_name_resume_outcome_is_resume_result() -> None:
    """Code written before the two adapters shared their names keeps working."""
    from signoff_client.openai_agents import ResumeOutcome, ResumeResult

    assert ResumeOutcome is ResumeResult
