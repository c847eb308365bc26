"""Which pause a LangGraph request belongs to, against a real `signoff serve` and real LangGraph.

A run that fails before its pause is saved (here the docs' SqliteSaver on a connection opened
without `check_same_thread=False`: LangGraph writes the checkpoint from another thread) and is
run again, each time through a node whose RetryPolicy retries a flaky step before its gated
call, asks signoff for the same pause again: approvers must see one request, not one per try;
a retry that computes another call replaces the request nobody decided. Pauses that are not
the same must stay apart: the same node reached again later in the thread, two gated calls in
one execution of a node, and two `Send` packets to one node in the same step.
"""

from __future__ import annotations

import asyncio
import operator
import sqlite3
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import RetryPolicy, Send

from signoff_client import ApprovalRecord
from signoff_client.langgraph import SignoffGate, asignoff_interrupt, resume, signoff_interrupt
from tests.support.agent_deployment import Deployment


class Ticket(TypedDict, total=False):
    amount: int
    ran: Annotated[list[Any], operator.add]


class FlakyLedger(ConnectionError):
    """What the node's RetryPolicy retries."""


def retrying_refund_graph(checkpointer: Any, amounts: list[int], log: list[str]) -> Any:
    """A sync node that reads a flaky ledger (one timeout per execution, retried by its
    RetryPolicy) before it asks for the refund; each execution asks for the next amount."""
    timeouts: set[int] = set()

    def refund(ticket: Ticket) -> Ticket:
        execution = len(log)
        if execution not in timeouts:
            timeouts.add(execution)
            raise FlakyLedger("the ledger timed out")
        log.append("asked")
        decision = signoff_interrupt(
            tool={
                "name": "refund",
                "arguments": {"amount": amounts[min(execution, len(amounts) - 1)]},
            },
            capability="tools.refund",
            presentation={"title": "Refund"},
            requested_by="agent",
        )
        return {"ran": decision.run(lambda arguments: [arguments])}

    builder = StateGraph(Ticket)
    retry = RetryPolicy(max_attempts=3, initial_interval=0.01, retry_on=FlakyLedger)
    builder.add_node("refund", refund, retry_policy=retry)
    builder.add_edge(START, "refund")
    builder.add_edge("refund", END)
    return builder.compile(checkpointer=checkpointer)


def run_until_saved(path: Path, gate: SignoffGate, amounts: list[int], failures: int) -> Any:
    """Run thread `t-1` `failures` times with the connection the docs once showed (each run
    files its request, then fails to save the pause), then once with check_same_thread=False;
    returns the paused graph (on its open connection) and what it paused on."""
    config = {"configurable": {"thread_id": "t-1", "signoff": gate}}
    log: list[str] = []
    for _ in range(failures):
        wrong = sqlite3.connect(path)
        graph = retrying_refund_graph(SqliteSaver(wrong), amounts, log)
        with pytest.raises(sqlite3.ProgrammingError, match="same thread"):
            graph.invoke({"amount": 0}, config)
        wrong.close()
    graph = retrying_refund_graph(
        SqliteSaver(sqlite3.connect(path, check_same_thread=False)), amounts, log
    )
    output = graph.invoke({"amount": 0}, config)
    assert log == ["asked"] * (failures + 1)  # every try reached the gated call
    return graph, output["__interrupt__"][0].value["signoff"]


def listed(gate: SignoffGate, **filters: Any) -> list[ApprovalRecord]:
    async def fetch() -> list[ApprovalRecord]:
        async with gate.client() as client:
            return (await client.list(**filters))[0]

    return asyncio.run(fetch())


def test_retries_of_a_run_that_failed_before_its_pause_was_saved_file_one_request(
    deployment: Deployment, tmp_path: Path
) -> None:
    gate = SignoffGate(deployment.url, deployment.api_key)
    graph, paused = run_until_saved(tmp_path / "checkpoints.sqlite", gate, [120], failures=3)

    [pending] = listed(gate, state="pending")  # one request in the approvers' inboxes
    assert pending.id == paused["approval_id"]
    assert pending.raw["run_id"] == paused["run_id"] == "langgraph:t-1:refund:1:0"

    deployment.approve(paused["approval_id"], paused["hash"])
    result = asyncio.run(resume(graph, paused["approval_id"], gate=gate))
    assert result.output["ran"] == [{"amount": 120}]
    assert [r.state for r in listed(gate, run_id=paused["run_id"])] == ["executed"]


def test_a_retry_that_asks_for_another_call_replaces_the_request_nobody_decided(
    deployment: Deployment, tmp_path: Path
) -> None:
    """The first try asked for 100 and failed; the retry computes 250 (a model, the clock):
    signoff's one-grant-per-step rule withdraws the 100, so only the 250 waits."""
    gate = SignoffGate(deployment.url, deployment.api_key)
    _, paused = run_until_saved(tmp_path / "checkpoints.sqlite", gate, [100, 250], failures=1)

    records = {r.tool["arguments"]["amount"]: r for r in listed(gate, run_id=paused["run_id"])}
    assert {amount: r.state for amount, r in records.items()} == {
        100: "superseded",
        250: "pending",
    }
    assert records[100].raw["superseded_by"] == records[250].id == paused["approval_id"]
    assert len(listed(gate, state="pending")) == 1


# --- Pauses that are not the same --------------------------------------------------------------


class Loop(TypedDict, total=False):
    ran: Annotated[list[Any], operator.add]
    amount: int


async def approve_and_resume(deployment: Deployment, graph: Any, output: Any, gate: Any) -> Any:
    """Approve every approval the thread waits on, one resume each; the last output."""
    for interrupt in output["__interrupt__"]:
        asked = interrupt.value["signoff"]
        await deployment.approve_async(asked["approval_id"], asked["hash"])
        output = (await resume(graph, asked["approval_id"], gate=gate)).output
    return output


async def test_the_node_reached_again_asks_anew(deployment: Deployment) -> None:
    """The same call from the same node, visited again after its first approval ran: a new
    request for a human, not the finished one."""
    gate = SignoffGate(deployment.url, deployment.api_key)

    async def pay(state: Loop) -> Loop:
        decision = await asignoff_interrupt(
            tool={"name": "payout", "arguments": {"amount": 5}},
            capability="tools.payout",
            presentation={"title": "Pay out 5"},
            requested_by="agent",
            gate=gate,
        )
        return {"ran": [await decision.arun(lambda arguments: decision.approval_id)]}

    builder = StateGraph(Loop)
    builder.add_node("pay", pay)
    builder.add_edge(START, "pay")
    builder.add_conditional_edges("pay", lambda s: END if len(s["ran"]) == 2 else "pay")
    graph = builder.compile(checkpointer=InMemorySaver())

    output = await graph.ainvoke({}, {"configurable": {"thread_id": "loop"}})
    first = output["__interrupt__"][0].value["signoff"]
    output = await approve_and_resume(deployment, graph, output, gate)
    second = output["__interrupt__"][0].value["signoff"]
    assert (second["state"], second["hash"]) == ("pending", first["hash"])
    assert second["approval_id"] != first["approval_id"]
    output = await approve_and_resume(deployment, graph, output, gate)
    assert output["ran"] == [first["approval_id"], second["approval_id"]]  # ran twice


async def test_two_gated_calls_in_one_node_are_two_requests(deployment: Deployment) -> None:
    """Two instalments of the same amount in one node: two decisions, two payouts."""
    gate = SignoffGate(deployment.url, deployment.api_key)

    async def pay(state: Loop) -> Loop:
        ran = []
        for _ in range(2):
            decision = await asignoff_interrupt(
                tool={"name": "payout", "arguments": {"amount": 5}},
                capability="tools.payout",
                presentation={"title": "Pay out 5"},
                requested_by="agent",
                gate=gate,
            )
            ran.append(await decision.arun(lambda arguments, d=decision: d.approval_id))
        return {"ran": ran}

    builder = StateGraph(Loop)
    builder.add_node("pay", pay)
    builder.add_edge(START, "pay")
    graph = builder.compile(checkpointer=InMemorySaver())
    output = await graph.ainvoke({}, {"configurable": {"thread_id": "instalments"}})
    first = output["__interrupt__"][0].value["signoff"]
    output = await approve_and_resume(deployment, graph, output, gate)
    second = output["__interrupt__"][0].value["signoff"]
    assert second["approval_id"] != first["approval_id"]
    assert second["state"] == "pending"
    output = await approve_and_resume(deployment, graph, output, gate)
    assert output["ran"] == [first["approval_id"], second["approval_id"]]


async def test_two_sends_to_one_node_in_one_step_are_two_requests(deployment: Deployment) -> None:
    """A fan-out: two packets to the same node in the same step ask for two calls, both
    waiting for a human (neither replaces the other)."""
    gate = SignoffGate(deployment.url, deployment.api_key)

    async def pay(state: Loop) -> Loop:
        decision = await asignoff_interrupt(
            tool={"name": "payout", "arguments": {"amount": state["amount"]}},
            capability="tools.payout",
            presentation={"title": f"Pay out {state['amount']}"},
            requested_by="agent",
            gate=gate,
        )
        return {"ran": [await decision.arun(lambda arguments: arguments["amount"])]}

    builder = StateGraph(Loop)
    builder.add_node("pay", pay)
    builder.add_conditional_edges(START, lambda s: [Send("pay", {"amount": a}) for a in (5, 7)])
    graph = builder.compile(checkpointer=InMemorySaver())
    output = await graph.ainvoke({}, {"configurable": {"thread_id": "fan-out"}})
    asked = [i.value["signoff"] for i in output["__interrupt__"]]
    assert sorted(a["tool"]["arguments"]["amount"] for a in asked) == [5, 7]
    async with gate.client() as client:
        states = [(await client.get(a["approval_id"])).state for a in asked]
    assert states == ["pending", "pending"]
    assert len({a["run_id"] for a in asked}) == 2
    output = await approve_and_resume(deployment, graph, output, gate)
    assert sorted(output["ran"]) == [5, 7]


def test_the_documented_checkpointer_saves_the_pause(
    deployment: Deployment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/integrations.md's SqliteSaver connection, as written there, keeps the pause."""
    docs = (Path(__file__).parents[2] / "docs" / "integrations.md").read_text("utf-8")
    langgraph = docs.split("\n## LangGraph\n", 1)[1].split("\n## ", 1)[0]
    [line] = [ln for ln in langgraph.splitlines() if ln.startswith("conn = sqlite3.connect(")]
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"sqlite3": sqlite3}
    exec(line, namespace)
    gate = SignoffGate(deployment.url, deployment.api_key)
    graph = retrying_refund_graph(SqliteSaver(namespace["conn"]), [120], [])
    config = {"configurable": {"thread_id": "t-991", "signoff": gate}}
    asked = graph.invoke({"amount": 0}, config)["__interrupt__"][0].value["signoff"]
    [saved] = graph.get_state(config).interrupts
    assert saved.value["signoff"]["approval_id"] == asked["approval_id"]
