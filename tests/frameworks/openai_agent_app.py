"""The agent program tests/frameworks/test_openai_agents.py runs as subprocesses: a support
agent (OpenAI Agents SDK, real Runner, a scripted model instead of an LLM) with a `refund`
tool that needs approval.

    python openai_agent_app.py turn1 WORKDIR RUN_ID CALLS_JSON [--store]
        The model asks for one refund per entry of CALLS_JSON ([{"charge", "amount"}, ...]) in
        one turn; the run stops at the approvals, which are filed with signoff; their records
        go to WORKDIR/filed.json and the process exits.
    python openai_agent_app.py resume WORKDIR WEBHOOK_NAME [--store]
        Reads the webhook as received (WORKDIR/WEBHOOK_NAME.headers.json and .body), verifies
        it and resumes the run; prints the outcome as JSON (exit status 3 when refused).

The tests also call `turn1` and `resume` in their own process where crossing a process
boundary is not what they check (a redelivery, say), to stay fast.

Every refund that succeeds appends a line to WORKDIR/refunds.jsonl (its arguments, the claim's
idempotency key, the pid). The resumed model appends what it was told about each gated call
to WORKDIR/model-saw.jsonl. Signoff is reached through SIGNOFF_URL, SIGNOFF_API_KEY and
SIGNOFF_WEBHOOK_SECRET.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from agents import Agent, RunContextWrapper, Runner, function_tool, set_tracing_disabled
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from signoff_client import SignoffClient
from signoff_client.openai_agents import (
    FileStateStore,
    ResumeRefused,
    file_interruptions,
    idempotency_key,
    resume_from_webhook,
)

set_tracing_disabled(True)  # no trace export: nothing leaves this machine but signoff calls
WORKDIR = Path(".")


@function_tool(needs_approval=True)
def refund(ctx: RunContextWrapper[Any], charge: str, amount: int) -> str:
    """Refund `amount` cents of the card charge `charge`."""
    if amount <= 0:
        raise ValueError(f"cannot refund {amount}")  # the payment API refuses it
    with (WORKDIR / "refunds.jsonl").open("a", encoding="utf-8") as out:
        line = {"charge": charge, "amount": amount, "key": idempotency_key(ctx), "pid": os.getpid()}
        out.write(json.dumps(line) + "\n")
    return f"refunded {amount} of {charge}"


def support_agent(model: ScriptedModel) -> Agent[Any]:
    return Agent(
        name="support", instructions="Refund what the user asks.", tools=[refund], model=model
    )


def answer(call: ModelCall) -> Any:
    """The resumed model: record what it was told about the gated calls, then reply."""
    outputs = [
        {"call_id": item["call_id"], "output": item["output"]}
        for item in call.input
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]
    with (WORKDIR / "model-saw.jsonl").open("a", encoding="utf-8") as out:
        out.write(json.dumps(outputs) + "\n")
    return [assistant_message("; ".join(str(o["output"]) for o in outputs))]


def client() -> SignoffClient:
    return SignoffClient(os.environ["SIGNOFF_URL"], os.environ["SIGNOFF_API_KEY"])


async def turn1(run_id: str, calls: list[dict[str, Any]], store: FileStateStore | None) -> None:
    model = ScriptedModel(
        [[function_call("refund", c, call_id=f"call_{run_id}_{i}") for i, c in enumerate(calls)]]
    )
    result = await Runner.run(support_agent(model), "Please refund my orders.")
    async with client() as signoff:
        records = await file_interruptions(
            signoff,
            result,
            run_id=run_id,
            capability="tools.refund",
            requested_by="agent",
            state_store=store,
        )
    filed = [{"id": r.id, "hash": r.hash, "state": r.state, "tool": r.tool} for r in records]
    (WORKDIR / "filed.json").write_text(json.dumps(filed), "utf-8")


async def resume(webhook: str, store: FileStateStore | None) -> dict[str, Any]:
    """Resume on the webhook kept as received; what it did as JSON (status "error" when the
    adapter refused the paused run)."""
    headers = json.loads((WORKDIR / f"{webhook}.headers.json").read_text("utf-8"))
    body = (WORKDIR / f"{webhook}.body").read_bytes()
    agent = support_agent(ScriptedModel([ModelStep.respond(answer)]))
    secret = os.environ["SIGNOFF_WEBHOOK_SECRET"]
    async with client() as signoff:
        try:
            resumed = await resume_from_webhook(
                signoff, agent, headers, body, secret, state_store=store
            )
        except ResumeRefused as exc:
            return {"status": "error", "error": str(exc)}
    return {
        "status": resumed.status,
        "detail": resumed.detail,
        "delivery_id": resumed.delivery_id,
        "final_output": resumed.result.final_output if resumed.result is not None else None,
        "calls": [
            {
                "approval_id": c.approval_id,
                "decision": c.decision,
                "execution": c.execution,
                "outcome": c.outcome,
                "output": c.output,
                "message": c.message,
            }
            for c in resumed.calls
        ],
    }


def main(argv: list[str]) -> int:
    global WORKDIR
    command, WORKDIR = argv[0], Path(argv[1])
    store = FileStateStore(WORKDIR / "states") if "--store" in argv else None
    if command == "turn1":
        asyncio.run(turn1(argv[2], json.loads(argv[3]), store))
        return 0
    if command == "resume":
        report = asyncio.run(resume(argv[2], store))
        print(json.dumps(report))
        return 3 if report["status"] == "error" else 0
    raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
