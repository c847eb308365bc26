"""An OpenAI Agents SDK agent whose `refund` tool waits for a human's approval in signoff,
across processes: turn 1 files the request and exits; a human decides with the `signoff` CLI;
a later process resumes the run, which runs the approved refund exactly once (or tells the
model it was rejected).

The model is scripted (agents.testing.ScriptedModel), so this runs without an OpenAI key and
calls no LLM; swap in a real model to use it for real. Run it against a local `signoff serve`
whose routes cover `payments.refund` (config/signoff.example.toml does) or the capability in
SIGNOFF_CAPABILITY:

    pip install './clients/python[openai-agents]'
    export SIGNOFF_URL=http://127.0.0.1:8700 SIGNOFF_API_KEY=<the tenant's API key>
    python examples/openai_agents_refund.py turn1
        # files the approval, prints its id and the commands to decide it, and exits
    signoff approvals approve <ID> --hash <HASH> --as alice     # or: approvals reject ...
    python examples/openai_agents_refund.py resume <ID>
        # resumes the run and prints the transcript

In production nothing polls: the decision webhook reaches your endpoint, which calls
`resume_from_webhook(client, agent, headers, raw_body, webhook_secret)` (any replica; a
redelivery or a second replica finds the call already claimed and runs nothing).
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from typing import Any

from agents import Agent, RunContextWrapper, Runner, function_tool, set_tracing_disabled
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from signoff_client import SignoffClient
from signoff_client.openai_agents import file_interruptions, idempotency_key, resume

SIGNOFF_URL = os.environ.get("SIGNOFF_URL", "http://127.0.0.1:8700")
API_KEY = os.environ.get("SIGNOFF_API_KEY", "dev-key")
CAPABILITY = os.environ.get("SIGNOFF_CAPABILITY", "payments.refund")

set_tracing_disabled(True)  # the scripted model has nothing to trace to OpenAI


@function_tool(needs_approval=True)
def refund(ctx: RunContextWrapper[Any], charge: str, amount: int) -> str:
    """Refund `amount` cents of the card charge `charge`."""
    # A real tool passes the claim's idempotency key to the payment API (Stripe's
    # Idempotency-Key), so even a re-run after an unknown outcome refunds once.
    key = idempotency_key(ctx)
    print(f"  [refund tool] refunding {amount} of {charge} (idempotency key {key[:12]}…)")
    return f"refund re_{key[:8]} created: {amount} cents of {charge}"


def reply(call: ModelCall) -> Any:
    """The resumed model reads what became of its refund call and answers the customer."""
    outputs = [i for i in call.input if isinstance(i, dict) and "output" in i]
    told = [i["output"] for i in outputs if i.get("type") == "function_call_output"]
    return [assistant_message(f"Update on your refund: {'; '.join(map(str, told))}")]


def support_agent(model: ScriptedModel) -> Agent[Any]:
    # Turn 1 and the resume must build the same agent (name and tools): the paused run
    # is loaded against it.
    return Agent(name="support", instructions="Handle refunds.", tools=[refund], model=model)


async def turn1() -> None:
    run_id = f"example-refund-{uuid.uuid4().hex[:8]}"
    model = ScriptedModel(
        [[function_call("refund", {"charge": "ch_3LmN", "amount": 12000}, call_id="call_1")]]
    )
    result = await Runner.run(support_agent(model), "Please refund order 8812 (€120).")
    print(f"turn 1 of {run_id}: the run stopped at {len(result.interruptions)} gated call(s)")
    async with SignoffClient(SIGNOFF_URL, API_KEY) as client:
        records = await file_interruptions(
            client,
            result,
            run_id=run_id,
            capability=CAPABILITY,
            reason="refunds need a budget owner",
            requested_by="support-agent",
        )
    for record in records:
        print(f"filed approval {record.id} for {call_text(record.tool)}")
        print("decide it with one of:")
        print(f"  signoff approvals approve {record.id} --hash {record.hash} --as alice")
        print(f"  signoff approvals reject {record.id} --hash {record.hash} --as alice --note WHY")
        print(f"then: python {sys.argv[0]} resume {record.id}")
    print("turn 1 ends here; nothing ran.")


WHAT_HAPPENED = {
    "not_started": "never ran",
    "started": "started, outcome unknown",
    "finished": "finished",
}


def call_text(tool: dict[str, Any]) -> str:
    """A tool call as a person reads it: refund(charge='ch_3LmN', amount=12000)."""
    args = ", ".join(f"{k}={v!r}" for k, v in tool["arguments"].items())
    return f"{tool['name']}({args})"


async def resume_run(approval_id: str) -> None:
    agent = support_agent(ScriptedModel([ModelStep.respond(reply)]))
    async with SignoffClient(SIGNOFF_URL, API_KEY) as client:
        record = await client.wait(approval_id, max_wait=5)  # stands in for the webhook
        if record.state == "pending":
            print(f"approval {approval_id} is still pending: decide it first")
            return
        resumed = await resume(client, agent, approval_id)
        print(f"resume: {resumed.status}{f' ({resumed.detail})' if resumed.detail else ''}")
        for call in resumed.calls:
            line = f"  {call_text(call.tool)}: {call.decision}, "
            line += WHAT_HAPPENED[call.execution]
            if call.outcome:
                line += f" ({call.outcome}): {call.output}"
            elif call.message:
                line += f"; the model was told: {call.message}"
            print(line)
        if resumed.result is not None:
            print(f"  agent: {resumed.result.final_output}")
        else:
            record = await client.get(approval_id)
            print(f"  {record.tool['name']}: {record.state}, {WHAT_HAPPENED[record.execution]}")


def main(argv: list[str]) -> None:
    if argv[:1] == ["turn1"]:
        asyncio.run(turn1())
    elif argv[:1] == ["resume"] and len(argv) == 2:
        asyncio.run(resume_run(argv[1]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
