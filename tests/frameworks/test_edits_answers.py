"""Edits, answers and questions on the agent's side, against a real `signoff serve` (SQLite:
these are not database tests) with the humans at the `signoff` CLI, and the real frameworks
driven by scripted models.

What a user relies on: a call approved as edited runs with the approver's arguments exactly
once, and the model is told its call was replaced and what changed; a call answered instead
never runs, and the model reads the person's words as the tool's result; a question asked
with `ask()` (or the MCP gateway's `ask_human`) comes back with its answer. The adapters send
the tool's argument schema, so an edit that breaks it is refused.

LangChain's `HumanInTheLoopMiddleware` (a real `create_agent` agent on a SQLite checkpoint
file): the agent pauses and a new agent object on the same checkpoint, as a new process
would build it, is resumed by signoff's decisions given to the middleware as its own; an
edit runs the revision once, an answer is the tool's result without running it, a
redelivered resume runs nothing, and per-call mode honours a review's allowed decisions.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest
from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult
from pydantic import BaseModel

from signoff_client import SignoffClient, approval_hash, record_hash
from signoff_client.client import ApprovalRecord
from signoff_client.langchain import file_reviews
from signoff_client.langchain import resume as resume_review
from signoff_client.langgraph import SignoffGate, asignoff_interrupt
from signoff_client.langgraph import resume as resume_thread
from signoff_client.openai_agents import file_interruptions
from signoff_client.openai_agents import resume as resume_run
from tests.support import prefork
from tests.support.agent_deployment import Deployment

pytestmark = pytest.mark.shared_deployment
set_tracing_disabled(True)


def edited_hash(record: ApprovalRecord, **changes: Any) -> str:
    """The hash of the revision an approver previews: the call with `changes` applied."""
    assert record.tool is not None
    arguments = {**record.tool["arguments"], **changes}
    return approval_hash(
        record.kind, record.capability, record.presentation, record.tool["name"], arguments
    )


# --- The client: ask() ------------------------------------------------------------------


async def test_a_question_is_asked_and_answered(deployment: Deployment) -> None:
    async with SignoffClient(deployment.url, deployment.api_key) as client:
        asked = await client.ask(
            "Close ticket 8812?",
            ["Yes", "No"],
            capability="tools.ask",
            run_id="ask-1",
            fields=[{"label": "Ticket", "value": "8812"}],
            requested_by="agent",
        )
        assert (asked.kind, asked.tool, asked.options) == ("question", None, ["Yes", "No"])
        assert record_hash(asked) == asked.hash  # the client hashes a question as signoff does
        again = await client.ask(
            "Close ticket 8812?",
            ["Yes", "No"],
            capability="tools.ask",
            run_id="ask-1",
            fields=[{"label": "Ticket", "value": "8812"}],
        )
        assert again.id == asked.id  # asked again: the same question
        assert await client.answer(asked.id, max_wait=0) is None  # nobody answered yet

        words = await client.ask("What should the refund note say?", capability="tools.ask",
                                 run_id="ask-2")  # fmt: skip
        assert words.question == {} and record_hash(words) == words.hash

        await deployment.answer_async(asked.id, asked.hash, option="No")
        await deployment.answer_async(words.id, words.hash, text="Sorry for the delay.")
        assert await client.answer(asked.id, max_wait=5) == "No"
        assert await client.answer(words.id, max_wait=5) == "Sorry for the delay."
        record = await client.get(asked.id)
        assert (record.state, record.answer, record.decided_by) == (
            "answered",
            {"option": "No"},
            "alice",
        )


# --- OpenAI Agents ------------------------------------------------------------------------


def _refund_tool(ran: list[dict[str, Any]]) -> Any:
    @function_tool(needs_approval=True)
    def refund(charge: str, amount: int) -> str:
        """Refund `amount` cents of the card charge `charge`."""
        ran.append({"charge": charge, "amount": amount})
        return f"refunded {amount} of {charge}"

    return refund


def _listening(saw: list[list[Any]]) -> ScriptedModel:
    """The resumed model: keeps what it was told about the gated call, then replies."""

    def answer(call: ModelCall) -> Any:
        outputs = [i["output"] for i in call.input if i.get("type") == "function_call_output"]
        saw.append(outputs)
        return [assistant_message("done")]

    return ScriptedModel([ModelStep.respond(answer)])


async def test_openai_agents_runs_the_edited_call_once_and_says_so(
    deployment: Deployment,
) -> None:
    ran: list[dict[str, Any]] = []
    refund = _refund_tool(ran)
    asks = ScriptedModel(
        [[function_call("refund", {"charge": "ch_1", "amount": 12000}, call_id="c1")]]
    )
    paused = await Runner.run(Agent(name="support", tools=[refund], model=asks), "Refund")
    async with SignoffClient(deployment.url, deployment.api_key) as client:
        [record] = await file_interruptions(
            client, paused, run_id="oa-edit", capability="tools.refund", requested_by="agent"
        )
        # The tool's schema went with the request: an edit that breaks it is refused.
        broken = deployment.cli("approvals", "edit", record.id, '--set=amount="lots"')
        assert broken.returncode != 0 and "amount" in broken.stderr, str(broken)

        revision = edited_hash(record, amount=9000)
        await deployment.approve_edited_async(record.id, record.hash, revision, amount=9000)
        saw: list[list[Any]] = []
        agent = Agent(name="support", tools=[refund], model=_listening(saw))
        resumed = await resume_run(client, agent, record.id)
        assert resumed.status == "resumed"
        assert ran == [{"charge": "ch_1", "amount": 9000}]
        [[told]] = saw
        assert "was replaced" in told and "amount: 12000 -> 9000" in told
        assert "refunded 9000 of ch_1" in told
        [call] = resumed.calls
        assert call.edited and call.tool["arguments"] == {"charge": "ch_1", "amount": 9000}
        assert call.asked == {"name": "refund", "arguments": {"charge": "ch_1", "amount": 12000}}
        done = await client.get(record.id)
        assert (done.state, done.hash, done.original_hash) == ("executed", revision, record.hash)
        # What signoff keeps is the tool's own output, not the note for the model.
        assert done.raw["outcome"]["result"] == {"output": "refunded 9000 of ch_1"}
        again = await resume_run(client, agent, record.id)
        assert again.status == "already_resumed" and len(ran) == 1


async def test_openai_agents_returns_an_answer_and_the_tool_never_runs(
    deployment: Deployment,
) -> None:
    ran: list[dict[str, Any]] = []
    refund = _refund_tool(ran)
    asks = ScriptedModel(
        [[function_call("refund", {"charge": "ch_2", "amount": 500}, call_id="c2")]]
    )
    paused = await Runner.run(Agent(name="support", tools=[refund], model=asks), "Refund")
    async with SignoffClient(deployment.url, deployment.api_key) as client:
        [record] = await file_interruptions(
            client, paused, run_id="oa-answer", capability="tools.refund", requested_by="agent"
        )
        await deployment.answer_async(record.id, record.hash, text="Offer store credit instead.")
        saw: list[list[Any]] = []
        agent = Agent(name="support", tools=[refund], model=_listening(saw))
        resumed = await resume_run(client, agent, record.id)
    assert resumed.status == "resumed" and ran == []
    [[told]] = saw
    assert "did NOT run" in told and "Offer store credit instead." in told
    [call] = resumed.calls
    assert (call.decision, call.answer, call.execution) == (
        "answered",
        "Offer store credit instead.",
        "not_started",
    )


# --- LangGraph ------------------------------------------------------------------------------


class RefundArgs(BaseModel):
    charge: str
    amount: int


class Said(TypedDict, total=False):
    said: str


def _refund_graph(gate: SignoffGate, ran: list[dict[str, Any]], charge: str) -> Any:
    async def node(state: Said) -> Said:
        decision = await asignoff_interrupt(
            tool={"name": "refund", "arguments": {"charge": charge, "amount": 12000}},
            capability="tools.refund",
            presentation={"title": f"Refund {charge}"},
            requested_by="agent",
            gate=gate,
            input_schema=RefundArgs,
        )
        if not decision.approved:
            return {"said": decision.tool_result()}

        def refund(arguments: dict[str, Any]) -> str:
            ran.append(arguments)
            return f"refunded {arguments['amount']}"

        return {"said": decision.tool_result(await decision.arun(refund))}

    builder = StateGraph(Said)
    builder.add_node("refund", node)
    builder.add_edge(START, "refund")
    builder.add_edge("refund", END)
    return builder.compile(checkpointer=InMemorySaver())


async def test_langgraph_runs_the_edited_call_once_and_answers_reach_the_node(
    deployment: Deployment,
) -> None:
    gate = SignoffGate(deployment.url, deployment.api_key)
    ran: list[dict[str, Any]] = []
    edited, answered = _refund_graph(gate, ran, "ch_1"), _refund_graph(gate, ran, "ch_2")
    paused = {}
    for name, graph in (("edit", edited), ("answer", answered)):
        output = await graph.ainvoke({}, {"configurable": {"thread_id": f"lg-{name}"}})
        paused[name] = output["__interrupt__"][0].value["signoff"]
    async with gate.client() as client:
        record = await client.get(paused["edit"]["approval_id"])
    broken = deployment.cli("approvals", "edit", record.id, '--set=amount="lots"')
    assert broken.returncode != 0 and "amount" in broken.stderr, str(broken)  # the schema's
    await deployment.approve_edited_async(
        record.id, record.hash, edited_hash(record, amount=9000), amount=9000
    )
    answer = paused["answer"]
    await deployment.answer_async(answer["approval_id"], answer["hash"], text="Not this one.")

    result = await resume_thread(edited, record.id, gate=gate)
    assert result.status == "resumed"
    assert ran == [{"charge": "ch_1", "amount": 9000}]
    said = result.output["said"]
    assert "was replaced" in said and "amount: 12000 -> 9000" in said
    assert said.endswith("Tool output: refunded 9000")
    assert (await resume_thread(edited, record.id, gate=gate)).status == "not_waiting"

    result = await resume_thread(answered, answer["approval_id"], gate=gate)
    assert result.status == "resumed" and len(ran) == 1  # the answered refund never ran
    assert "did NOT run" in result.output["said"]
    assert result.output["said"].endswith("Their answer: Not this one.")


# --- The MCP gateway ------------------------------------------------------------------------

POLICY = """\
[gateway]
server = "mail"
requested_by = "agent"
ask_human = true

[tools]
send_email = "ask"
"""


UPSTREAM = Path(__file__).with_name("mcp_upstream.py")


def _text(result: CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


async def test_mcp_gateway_forwards_edits_returns_answers_and_asks_humans(
    deployment: Deployment, tmp_path: Path
) -> None:
    (tmp_path / "policy.toml").write_text(POLICY, "utf-8")
    env = {**deployment.env, "SIGNOFF_URL": deployment.url, "SIGNOFF_API_KEY": deployment.api_key}
    calls = tmp_path / "calls.jsonl"  # every call the upstream received
    gateway = StdioServerParameters(
        command=prefork.python(),
        args=["-m", "signoff_client.mcp.cli", "serve", "--policy", str(tmp_path / "policy.toml"),
              "--", prefork.python(), str(UPSTREAM), str(calls)],
        env=env,
        cwd=tmp_path,
    )  # fmt: skip
    email = {"to": "zoe@example.com", "subject": "Q3 numbers", "body": "attached"}
    other = {"to": "sam@example.com", "subject": "Lunch?", "body": ""}
    question = {"question": "Send the Q3 numbers today?", "options": ["Yes", "Tomorrow"]}
    async with (
        Client(gateway, mode="legacy") as agent,
        SignoffClient(deployment.url, deployment.api_key) as signoff,
    ):
        listed = {tool.name for tool in (await agent.list_tools()).tools}
        assert {"send_email", "ask_human"} <= listed
        waiting = {}
        for name, arguments in (("send_email", email), ("send_email", other),
                                ("ask_human", question)):  # fmt: skip
            result = await agent.call_tool(name, arguments)
            assert result.is_error and "Waiting" in _text(result), _text(result)
            waiting[arguments.get("to") or "question"] = await signoff.get(
                result.meta["signoff/approval"]["id"]
            )
        record = waiting["zoe@example.com"]
        await deployment.approve_edited_async(
            record.id, record.hash, edited_hash(record, subject="Q3 (draft)"), subject="Q3 (draft)"
        )
        rerouted = waiting["sam@example.com"]
        await deployment.answer_async(rerouted.id, rerouted.hash, text="Sam is away this week.")
        asked = waiting["question"]
        await deployment.answer_async(asked.id, asked.hash, option="Tomorrow")

        ran = await agent.call_tool("send_email", email)
        assert not ran.is_error, _text(ran)
        assert "was replaced" in _text(ran) and 'subject: "Q3 numbers" -> "Q3 (draft)"' in _text(
            ran
        )
        assert "sent to zoe@example.com: Q3 (draft)" in _text(ran)
        replayed = await agent.call_tool("send_email", email)  # asked again: not run again
        assert "was replaced" in _text(replayed) and "not run again" in _text(replayed)

        told = await agent.call_tool("send_email", other)
        # send_email declares an outputSchema, which words cannot satisfy: isError, so an
        # MCP client does not refuse the answer (a tool without one gets a plain result).
        assert told.is_error and "did NOT run" in _text(told)
        assert "Sam is away this week." in _text(told)

        chosen = await agent.call_tool("ask_human", question)
        assert (chosen.is_error, _text(chosen)) == (False, "Tomorrow")
    # Once, as edited; the answered email was never sent.
    executed = [json.loads(line) for line in calls.read_text("utf-8").splitlines()]
    assert executed == [{"tool": "send_email", "arguments": {**email, "subject": "Q3 (draft)"}}]


# --- LangChain's HumanInTheLoopMiddleware ----------------------------------------------


class Scripted(GenericFakeChatModel):
    """The model: its next scripted message each call (tools are not bound: it is told)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def _calls(*calls: tuple[str, str, int]) -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[
            {"name": "refund", "args": {"charge": c, "amount": a}, "id": i} for i, c, a in calls
        ],
    )


def _agent(ran: list[dict[str, Any]], replies: list[AIMessage], saver: Any, **hitl: Any) -> Any:
    @tool
    def refund(charge: str, amount: int) -> str:
        """Refund `amount` cents of the card charge `charge`."""
        ran.append({"charge": charge, "amount": amount})
        return f"refunded {amount} of {charge}"

    return create_agent(
        Scripted(messages=iter(replies)),
        tools=[refund],
        middleware=[HumanInTheLoopMiddleware(**hitl)],
        checkpointer=saver,
    ), refund


@pytest.fixture
def checkpoint(tmp_path: Path) -> Iterator[Any]:
    """A SQLite checkpoint file, opened again for each agent as each process would."""
    connections: list[sqlite3.Connection] = []

    def open_saver() -> SqliteSaver:
        connections.append(sqlite3.connect(tmp_path / "ckpt.sqlite", check_same_thread=False))
        return SqliteSaver(connections[-1])

    yield open_saver
    for connection in connections:
        connection.close()


async def test_edits_and_answers_resume_the_middleware_as_its_own_decisions(
    deployment: Deployment, checkpoint: Any
) -> None:
    ran: list[dict[str, Any]] = []
    config = {"configurable": {"thread_id": "lc-batched"}}
    paused, refund = _agent(
        ran,
        [_calls(("t1", "ch_1", 12000), ("t2", "ch_2", 500))],
        checkpoint(),
        interrupt_on={"refund": True},
    )
    # SqliteSaver has no async side: turn 1 runs the agent as a sync program would.
    asked = {"messages": [{"role": "user", "content": "Refund both"}]}
    await asyncio.to_thread(paused.invoke, asked, config)
    async with SignoffClient(deployment.url, deployment.api_key) as client:
        first, second = await file_reviews(
            client, paused, config, capability="tools.refund", tools=[refund],
            requested_by="agent",
        )  # fmt: skip
        assert [r.tool for r in (first, second)] == [
            {"name": "refund", "arguments": {"charge": "ch_1", "amount": 12000}},
            {"name": "refund", "arguments": {"charge": "ch_2", "amount": 500}},
        ]
        again = await file_reviews(client, paused, config, capability="tools.refund")
        assert [r.id for r in again] == [first.id, second.id]  # filed once
        # The tool's schema went with the request: an edit that breaks it is refused.
        broken = deployment.cli("approvals", "edit", first.id, '--set=amount="lots"')
        assert broken.returncode != 0 and "amount" in broken.stderr, str(broken)

        revision = approval_hash(
            first.kind, first.capability, first.presentation, "refund",
            {"charge": "ch_1", "amount": 9000},
        )  # fmt: skip
        await deployment.approve_edited_async(first.id, first.hash, revision, amount=9000)
        resumer, _ = _agent(ran, [AIMessage(content="done")], checkpoint(),
                            interrupt_on={"refund": True})  # fmt: skip
        assert (await resume_review(client, resumer, first.id)).status == "waiting"  # t2 undecided
        await deployment.answer_async(second.id, second.hash, text="ch_2 was a gift card.")

        resumed = await resume_review(client, resumer, second.id)
        assert resumed.status == "resumed", resumed
        assert resumed.decisions == (
            {"type": "edit", "edited_action": {"name": "refund",
                                               "args": {"charge": "ch_1", "amount": 9000}}},
            {"type": "respond", "message": "ch_2 was a gift card."},
        )  # fmt: skip
        assert ran == [{"charge": "ch_1", "amount": 9000}]  # once, as edited; ch_2 never
        told = {m.tool_call_id: m.content for m in resumed.output["messages"] if m.type == "tool"}
        assert "replaced this tool call" in told["t1"] and "refunded 9000 of ch_1" in told["t1"]
        assert told["t2"] == "ch_2 was a gift card."
        done = await client.get(first.id)
        assert (done.state, done.edited) == ("executed", True)
        assert "refunded 9000 of ch_1" in done.raw["outcome"]["result"]["output"]
        assert (await client.get(second.id)).state == "answered"

        for approval in (first.id, second.id):  # a redelivery: nothing runs again
            assert (await resume_review(client, resumer, approval)).status == "not_waiting"
    assert len(ran) == 1


async def test_per_call_reviews_honour_the_allowed_decisions(deployment: Deployment) -> None:
    ran: list[dict[str, Any]] = []
    saver = InMemorySaver()
    hitl = {
        "interrupt_on": {"refund": {"allowed_decisions": ["approve", "reject"]}},
        "interrupt_mode": "per_call",
    }
    config = {"configurable": {"thread_id": "lc-per-call"}}
    script = [_calls(("p1", "ch_3", 100)), _calls(("p2", "ch_4", 200)), AIMessage(content="ok")]
    agent, _ = _agent(ran, script, saver, **hitl)
    allowed = {"refund": ["approve", "reject"]}
    await agent.ainvoke({"messages": [{"role": "user", "content": "Refund"}]}, config)
    async with SignoffClient(deployment.url, deployment.api_key) as client:
        [asked] = await file_reviews(
            client, agent, config, capability="tools.refund", allowed_decisions=allowed
        )
        await deployment.approve_async(asked.id, asked.hash)
        resumed = await resume_review(client, agent, asked.id)
        assert resumed.decisions == ({"type": "approve"},) and ran == [
            {"charge": "ch_3", "amount": 100}
        ]
        assert (await client.get(asked.id)).state == "executed"

        # The model's next call: answered, but this review allows no `respond`.
        [answered] = await file_reviews(
            client, agent, config, capability="tools.refund", allowed_decisions=allowed
        )
        await deployment.answer_async(answered.id, answered.hash, text="Use store credit.")
        resumed = await resume_review(client, agent, answered.id)
    [decision] = resumed.decisions
    assert decision["type"] == "reject" and "Use store credit." in decision["message"]
    assert len(ran) == 1
