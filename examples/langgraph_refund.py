"""A LangGraph refund agent gated by signoff: the graph pauses on the refund, the process ends,
a human decides (hours or days later), and a new process resumes the thread and runs exactly
the approved refund, once.

Start `signoff serve` as in the README's quick start (the example config routes
`payments.*` to alice and bob; tenant `acme`, API key `dev-key`), then:

    pip install './clients/python[langgraph]' langgraph-checkpoint-sqlite
    export SIGNOFF_URL=http://127.0.0.1:8700 SIGNOFF_API_KEY=dev-key
    python examples/langgraph_refund.py start                # pauses; prints the approval
    signoff approvals approve ID --hash HASH --as alice      # or: reject ... --note "why"
    python examples/langgraph_refund.py resume ID            # a new process resumes it
    python examples/langgraph_refund.py resume ID            # again: nothing runs twice

In production the decision webhook resumes the thread instead of a person typing `resume`:
`python examples/langgraph_refund.py webhooks --port 8701` with SIGNOFF_WEBHOOK_SECRET set to
the tenant's secret, and the tenant's `webhook_url` pointing at http://HOST:8701/hooks/signoff.

The graph's checkpoints live in ./langgraph-refund.sqlite (LANGGRAPH_DB to change), so the
paused thread survives the process. Nothing here calls a model: the "agent" is a function.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from typing import Any, TypedDict

from aiohttp import web
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from signoff_client.errors import BadWebhookSignature
from signoff_client.langgraph import ResumeResult, SignoffGate, resume, signoff_interrupt

GATE = SignoffGate(
    os.environ.get("SIGNOFF_URL", "http://127.0.0.1:8700"),
    os.environ.get("SIGNOFF_API_KEY", "dev-key"),
)
DB = os.environ.get("LANGGRAPH_DB", "langgraph-refund.sqlite")
EXECUTION = {
    "not_started": "never ran",
    "started": "started, outcome unknown (signoff will ask a human)",
    "finished": "finished",
}


class Ticket(TypedDict, total=False):
    customer: str
    charge: str
    amount: int
    outcome: str
    note: str | None
    refund: Any
    reply: str


def stripe_refund(charge: str, amount: int, idempotency_key: str | None) -> dict[str, Any]:
    """Stands in for the payment provider. Pass the idempotency key to the real API, so a
    retried execution cannot refund twice."""
    print(f"  >> refunding {amount} cents on {charge} (idempotency key {idempotency_key})")
    return {"refund": f"re_{uuid.uuid4().hex[:10]}", "amount": amount}


def refund(ticket: Ticket) -> Ticket:
    """The gated node. On resume LangGraph runs it again from the top: signoff_interrupt then
    finds the request it filed (no second one) and returns the decision."""
    decision = signoff_interrupt(
        tool={
            "name": "stripe.refunds.create",
            "arguments": {"charge": ticket["charge"], "amount": ticket["amount"]},
        },
        capability="payments.refund",
        presentation={
            "title": f"Refund €{ticket['amount'] / 100:.2f} to {ticket['customer']}",
            "fields": [{"label": "Charge", "value": ticket["charge"]}],
        },
        reason="the order arrived damaged",
        requested_by="support-agent",
    )
    if not decision.approved:
        return {"outcome": decision.state, "note": decision.note}
    # Exactly the stored call (decision.arguments), not this node's local values.
    result = decision.run(
        lambda args: stripe_refund(args["charge"], args["amount"], decision.idempotency_key)
    )
    return {"outcome": "refunded", "refund": result}


def reply(ticket: Ticket) -> Ticket:
    if ticket["outcome"] == "refunded":
        return {"reply": f"Your refund {ticket['refund']['refund']} is on its way."}
    return {"reply": f"We could not refund this time ({ticket['outcome']}: {ticket.get('note')})."}


def build(checkpointer: SqliteSaver) -> Any:
    graph = StateGraph(Ticket)
    graph.add_node("refund", refund)
    graph.add_node("reply", reply)
    graph.add_edge(START, "refund")
    graph.add_edge("refund", "reply")
    graph.add_edge("reply", END)
    return graph.compile(checkpointer=checkpointer)


def start(thread_id: str) -> None:
    with SqliteSaver.from_conn_string(DB) as checkpointer:
        graph = build(checkpointer)
        config = {"configurable": {"thread_id": thread_id, "signoff": GATE}}
        ticket = {"customer": "Zoë Martin", "charge": "ch_3PqK2L", "amount": 12000}
        output = graph.invoke(ticket, config)
    [paused] = output["__interrupt__"]
    asked = paused.value["signoff"]
    print(f"thread {thread_id} paused on approval {asked['approval_id']} ({asked['state']})")
    print(f"  {asked['title']}: {asked['tool']['name']}({json.dumps(asked['tool']['arguments'])})")
    print("  the refund never ran. Decide it, then resume:")
    print(f"  signoff approvals approve {asked['approval_id']} --hash {asked['hash']} --as alice")
    print(f"  python {sys.argv[0]} resume {asked['approval_id']}")


async def transcript(result: ResumeResult) -> None:
    async with GATE.client() as client:
        record = await client.get(result.approval_id)
    print(f"resume: {result.status} (approval {record.id} is {record.state})")
    note = record.raw.get("decision_note")
    print(f"  decided by {record.decided_by or 'nobody'}" + (f": {note}" if note else ""))
    print(f"  the gated refund {EXECUTION.get(record.execution, record.execution)}")
    if record.raw.get("outcome"):
        print(f"  recorded outcome: {json.dumps(record.raw['outcome'])}")
    if result.output:
        print(f"  reply to the customer: {result.output.get('reply')}")


async def resume_run(approval_id: str) -> None:
    with SqliteSaver.from_conn_string(DB) as checkpointer:
        result = await resume(build(checkpointer), approval_id, gate=GATE)
    await transcript(result)


def webhooks(port: int) -> None:
    secret = os.environ["SIGNOFF_WEBHOOK_SECRET"]
    with SqliteSaver.from_conn_string(DB) as checkpointer:
        graph = build(checkpointer)

        async def handle(request: web.Request) -> web.Response:
            body = await request.read()
            try:
                result = await GATE.resume_webhook(graph, dict(request.headers), body, secret)
            except BadWebhookSignature:
                return web.Response(status=401)
            if result.status != "ignored":
                await transcript(result)
            return web.Response(text="ok")  # any 2xx: signoff stops retrying

        app = web.Application()
        app.router.add_post("/hooks/signoff", handle)
        web.run_app(app, host="127.0.0.1", port=port)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("start").add_argument("--thread", default=f"ticket-{uuid.uuid4().hex[:8]}")
    sub.add_parser("resume").add_argument("approval_id")
    sub.add_parser("webhooks").add_argument("--port", type=int, default=8701)
    args = parser.parse_args()
    if args.command == "start":
        start(args.thread)
    elif args.command == "resume":
        asyncio.run(resume_run(args.approval_id))
    else:
        webhooks(args.port)


if __name__ == "__main__":
    main()
