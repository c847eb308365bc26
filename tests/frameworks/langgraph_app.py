"""A LangGraph program for the adapter's tests, run as separate processes so that a paused
thread outlives the process that paused it: `start` runs a new thread until the refund node
pauses on signoff and exits; `resume` and `webhook` resume it later, from a new process, on
the same SQLite checkpoint file.

    python -m tests.frameworks.langgraph_app start --db CKPT --thread T [--amount N] [--ttl 2s]
    python -m tests.frameworks.langgraph_app resume --db CKPT --approval ID
    python -m tests.frameworks.langgraph_app webhook --db CKPT --delivery FILE

Environment: SIGNOFF_URL, SIGNOFF_API_KEY, SIGNOFF_WEBHOOK_SECRET (for `webhook`), and
REFUND_LOG (each execution of the refund tool appends a JSON line: the side effect the tests
count) and NODE_LOG (each execution of the refund node appends one: LangGraph re-runs it on
resume). Prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import sys
from pathlib import Path
from typing import Any, TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from signoff_client.langgraph import (
    SignoffGate,
    resume,
    resume_from_webhook,
    signoff_interrupt,
)


class RefundState(TypedDict, total=False):
    order: str
    amount: int
    ttl: str | None
    outcome: str
    note: str | None
    refund: Any
    transcript: list[str]


def _append(variable: str, entry: dict[str, Any]) -> None:
    with open(os.environ[variable], "a", encoding="utf-8") as log:
        log.write(json.dumps(entry, sort_keys=True) + "\n")


def refund_tool(arguments: dict[str, Any], idempotency_key: str | None) -> dict[str, Any]:
    """The gated side effect: a refund, recorded as a line of REFUND_LOG."""
    _append("REFUND_LOG", {"arguments": arguments, "idempotency_key": idempotency_key})
    return {"refund_id": f"re_{arguments['order']}", "amount": arguments["amount"]}


def refund_node(state: RefundState) -> RefundState:
    _append("NODE_LOG", {"pid": os.getpid()})
    decision = signoff_interrupt(
        tool={"name": "refund", "arguments": {"order": state["order"], "amount": state["amount"]}},
        capability="tools.refund",
        presentation={
            "title": f"Refund {state['amount']} cents on order {state['order']}",
            "fields": [{"label": "Order", "value": state["order"]}],
        },
        reason="the customer asked for a refund",
        requested_by="agent",
        approval_ttl=state.get("ttl"),
    )
    if not decision.approved:
        return {"outcome": decision.state, "note": decision.note}
    result = decision.run(lambda arguments: refund_tool(arguments, decision.idempotency_key))
    return {"outcome": "refunded", "refund": result}


def notify_node(state: RefundState) -> RefundState:
    return {"transcript": [f"customer told: {state['outcome']}"]}


def build(checkpointer: SqliteSaver) -> Any:
    graph = StateGraph(RefundState)
    graph.add_node("refund", refund_node)
    graph.add_node("notify", notify_node)
    graph.add_edge(START, "refund")
    graph.add_edge("refund", "notify")
    graph.add_edge("notify", END)
    return graph.compile(checkpointer=checkpointer)


def _jsonable(output: Any) -> Any:
    """The graph's output with its interrupts as their payloads."""
    if not isinstance(output, dict):
        return output
    plain = {k: v for k, v in output.items() if k != "__interrupt__"}
    plain["interrupts"] = [i.value for i in output.get("__interrupt__", ())]
    return plain


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["start", "resume", "webhook"])
    parser.add_argument("--db", required=True)
    parser.add_argument("--thread")
    parser.add_argument("--order", default="8812")
    parser.add_argument("--amount", type=int, default=12000)
    parser.add_argument("--ttl")
    parser.add_argument("--approval")
    parser.add_argument("--delivery")
    args = parser.parse_args(argv)

    gate = SignoffGate.from_env()
    with SqliteSaver.from_conn_string(args.db) as checkpointer:
        graph = build(checkpointer)
        if args.command == "start":
            config = {"configurable": {"thread_id": args.thread, "signoff": gate}}
            state = {"order": args.order, "amount": args.amount, "ttl": args.ttl}
            print(json.dumps({"output": _jsonable(graph.invoke(state, config))}))
            return 0
        if args.command == "resume":
            result = asyncio.run(resume(graph, args.approval, gate=gate))
        else:
            delivery = json.loads(Path(args.delivery).read_text("utf-8"))
            result = asyncio.run(
                resume_from_webhook(
                    graph,
                    delivery["headers"],
                    base64.b64decode(delivery["body"]),
                    os.environ["SIGNOFF_WEBHOOK_SECRET"],
                    gate=gate,
                )
            )
    print(
        json.dumps(
            {
                "status": result.status,
                "state": result.state,
                "approval_id": result.approval_id,
                "output": _jsonable(result.output),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
