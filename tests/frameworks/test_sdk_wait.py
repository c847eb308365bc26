"""An agent with no public URL waits for its decision through the SDK, against a real
`signoff serve` with no webhook configured: the wait is held on the server and answers on the
decision's commit, so the waiter returns within about a second of a person deciding at the
CLI. Every client here is built with a polling fallback whose first delay is 30 s: had the
client polled instead of holding the wait, it could not return in time, and the test fails.

The client's `wait`, `wait_any` and `answer` run on both databases; the adapters (LangGraph,
LangChain's middleware, the OpenAI Agents SDK) resume by approval id with `wait=` on SQLite.
The edges a real server does not reach on demand (no waits offered, 429 too_many_waits) are
tests/integration/test_client_waits.py.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypedDict, TypeVar

import aiohttp
import pytest
from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from signoff_client import SignoffClient
from signoff_client.langchain import file_reviews
from signoff_client.langchain import resume as resume_review
from signoff_client.langgraph import Decision, SignoffGate, asignoff_interrupt
from signoff_client.langgraph import resume as resume_thread
from signoff_client.openai_agents import file_interruptions
from signoff_client.openai_agents import resume as resume_run
from tests.support import prefork
from tests.support.agent_deployment import Deployment, deployment_config
from tests.support.cli import REPO_ROOT
from tests.support.databases import SQLITE_ONLY
from tests.support.service import Fleet, WebhookReceiver, write_config

set_tracing_disabled(True)
T = TypeVar("T")
# Polling would first look again after 30 s: a waiter back within PROMPT of the decision held
# a wait that the commit woke.
SLOW_POLLING = {"poll_first": 30.0, "poll_most": 30.0}
PROMPT = 1.0
# An adapter's resume also claims the call and runs the agent after the wait returns.
PROMPT_RESUME = 2.0


@pytest.fixture
def quiet(tmp_path: Path, db_url: str) -> Iterator[Deployment]:
    """signoff serve with no webhook for the agent's tenant: nothing reaches the agent but
    the answers to its own requests."""
    with WebhookReceiver() as hooks:
        config = deployment_config(db_url, hooks.url)
        for tenant in config["tenants"]:
            tenant.pop("webhook_url", None)
            tenant.pop("webhook_secret_env", None)
        with Fleet(write_config(tmp_path / "signoff.toml", config), tmp_path) as fleet:
            deployment = Deployment(fleet, hooks, fleet.start())
            yield deployment
            assert hooks.snapshot() == []  # no webhook was sent anywhere


async def promptly(
    waiter: Awaitable[T], decide: Callable[[], Awaitable[Any]], within: float = PROMPT
) -> T:
    """Start `waiter`, let it wait, `decide` (a person at the CLI), and check the waiter
    returned within `within` seconds of the decision (the CLI returns after its commit)."""
    finished: list[float] = []
    task = asyncio.ensure_future(waiter)
    task.add_done_callback(lambda _: finished.append(time.monotonic()))
    await asyncio.sleep(1.0)
    assert not task.done(), "returned before anyone decided"
    await decide()
    decided = time.monotonic()
    result = await asyncio.wait_for(task, 20)
    assert finished[0] - decided < within, f"returned {finished[0] - decided:.2f} s after"
    return result


def refund_body(run_id: str, amount: int = 12000) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "capability": "tools.refund",
        "tool": {"name": "refund", "arguments": {"charge": "ch_1", "amount": amount}},
        "presentation": {"title": f"Refund {amount} cents"},
        "requested_by": "agent",
    }


async def test_the_client_waits_on_the_commit(quiet: Deployment) -> None:
    async with SignoffClient(quiet.url, quiet.api_key) as client:
        first = await client.request(**refund_body("probe"))
    async with aiohttp.ClientSession() as raw:  # the server offers waits
        async with raw.get(
            f"{quiet.url}/v1/approvals/{first.id}",
            params={"wait": "0.2"},
            headers={"Authorization": f"Bearer {quiet.api_key}"},
        ) as answer:
            assert answer.status == 200 and float(answer.headers["Signoff-Wait"]) == 0.2

    async with SignoffClient(quiet.url, quiet.api_key, **SLOW_POLLING) as client:
        approval = await client.request(**refund_body("wait-one"))
        decided = await promptly(
            client.wait(approval.id, max_wait=30),
            lambda: quiet.approve_async(approval.id, approval.hash),
        )
        assert (decided.state, decided.decided_by) == ("approved", "alice")

        # Many requests, one held wait: back when any of them is decided.
        asked = [await client.request(**refund_body("wait-many", n)) for n in (1, 2, 3)]
        found = await promptly(
            client.wait_any([a.id for a in asked], max_wait=30),
            lambda: quiet.reject_async(asked[1].id, asked[1].hash, "no"),
        )
        assert [(r.id, r.state) for r in found] == [
            (asked[0].id, "pending"),
            (asked[1].id, "rejected"),
            (asked[2].id, "pending"),
        ]

        question = await client.ask(
            "Which warehouse ships the replacement?", capability="tools.ask", run_id="wait-q"
        )
        answer = await promptly(
            client.answer(question.id, max_wait=30),
            lambda: quiet.answer_async(question.id, question.hash, text="Leeds"),
        )
        assert answer == "Leeds"

        # Nobody decides: the deadline, not a poll interval, ends the wait.
        started = time.monotonic()
        still = await client.wait(asked[0].id, max_wait=1.5)
        assert still.state == "pending" and 1.5 <= time.monotonic() - started < 3


@SQLITE_ONLY
async def test_the_readme_agent_waits_for_the_decision_and_runs_it(quiet: Deployment) -> None:
    """examples/agent_loop.py, the README's first agent example, as a user runs it: it asks,
    waits with no public URL, and runs the call once a person approves at the CLI."""
    agent = await asyncio.create_subprocess_exec(
        prefork.python(), str(REPO_ROOT / "examples" / "agent_loop.py"), "readme-run",
        env={**quiet.env, "SIGNOFF_URL": quiet.url, "SIGNOFF_API_KEY": quiet.api_key},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert agent.stdout is not None
    asked = (await asyncio.wait_for(agent.stdout.readline(), 30)).decode()
    found = re.search(r"approve (\S+) --hash (\S+)", asked)
    assert found, asked
    approval_id, shown = found.groups()
    out, err = await promptly(
        agent.communicate(),
        lambda: quiet.approve_async(approval_id, shown),
        PROMPT_RESUME,
    )
    assert agent.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert lines[0].startswith("executing stripe.refunds.create({'charge': 'ch_1', 'amount'")
    assert lines[-1] == "outcome: executed"
    async with SignoffClient(quiet.url, quiet.api_key) as client:
        assert (await client.get(approval_id)).state == "executed"


class Paid(TypedDict, total=False):
    paid: str


@SQLITE_ONLY
async def test_langgraph_resumes_by_id_through_the_wait(quiet: Deployment) -> None:
    gate = SignoffGate(quiet.url, quiet.api_key, **SLOW_POLLING)
    ran: list[dict[str, Any]] = []

    async def pay(state: Paid) -> Paid:
        decision = await asignoff_interrupt(
            tool={"name": "refund", "arguments": {"charge": "ch_1", "amount": 12000}},
            capability="tools.refund",
            presentation={"title": "Refund €120.00"},
            requested_by="agent",
            gate=gate,
        )
        assert isinstance(decision, Decision)
        if not decision.approved:
            return {"paid": decision.state}

        async def execute(arguments: dict[str, Any]) -> str:
            ran.append(arguments)
            return "re_1"

        return {"paid": await decision.arun(execute)}

    builder = StateGraph(Paid)
    builder.add_node("pay", pay)
    builder.add_edge(START, "pay")
    builder.add_edge("pay", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "lg-wait"}}
    asked = (await graph.ainvoke({}, config))["__interrupt__"][0].value["signoff"]
    assert ran == []

    resumed = await promptly(
        resume_thread(graph, asked["approval_id"], gate=gate, wait=30),
        lambda: quiet.approve_async(asked["approval_id"], asked["hash"]),
        PROMPT_RESUME,
    )
    assert resumed.status == "resumed" and resumed.output == {"paid": "re_1"}
    assert ran == [{"charge": "ch_1", "amount": 12000}]
    again = await resume_thread(graph, asked["approval_id"], gate=gate, wait=30)
    assert again.status == "not_waiting" and len(ran) == 1  # decided already: no wait


@SQLITE_ONLY
async def test_openai_agents_resumes_by_id_through_the_wait(quiet: Deployment) -> None:
    ran: list[dict[str, Any]] = []

    @function_tool(needs_approval=True)
    def refund(charge: str, amount: int) -> str:
        """Refund `amount` cents of the card charge `charge`."""
        ran.append({"charge": charge, "amount": amount})
        return f"refunded {amount} of {charge}"

    asked = function_call("refund", {"charge": "ch_1", "amount": 12000}, call_id="c1")
    asks = ScriptedModel([[asked]])
    paused = await Runner.run(Agent(name="support", tools=[refund], model=asks), "Refund")
    saw: list[Any] = []

    def reply(call: ModelCall) -> Any:
        saw.extend(i["output"] for i in call.input if i.get("type") == "function_call_output")
        return [assistant_message("done")]

    agent = Agent(name="support", tools=[refund], model=ScriptedModel([ModelStep.respond(reply)]))
    async with SignoffClient(quiet.url, quiet.api_key, **SLOW_POLLING) as client:
        [record] = await file_interruptions(
            client, paused, run_id="oa-wait", capability="tools.refund", requested_by="agent"
        )
        resumed = await promptly(
            resume_run(client, agent, record.id, wait=30),
            lambda: quiet.approve_async(record.id, record.hash),
            PROMPT_RESUME,
        )
        assert resumed.status == "resumed"
        assert ran == [{"charge": "ch_1", "amount": 12000}] and saw == ["refunded 12000 of ch_1"]
        assert (await client.get(record.id)).state == "executed"


class Scripted(GenericFakeChatModel):
    """The model: its next scripted message each call (tools are not bound: it is told)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


@SQLITE_ONLY
async def test_langchain_resumes_by_id_once_the_whole_review_is_decided(
    quiet: Deployment,
) -> None:
    ran: list[dict[str, Any]] = []

    @tool
    def refund(charge: str, amount: int) -> str:
        """Refund `amount` cents of the card charge `charge`."""
        ran.append({"charge": charge, "amount": amount})
        return f"refunded {amount} of {charge}"

    def agent(*replies: AIMessage) -> Any:
        return create_agent(
            Scripted(messages=iter(replies)),
            tools=[refund],
            middleware=[HumanInTheLoopMiddleware(interrupt_on={"refund": True})],
            checkpointer=saver,
        )

    saver = InMemorySaver()
    config = {"configurable": {"thread_id": "lc-wait"}}
    calls = [
        {"name": "refund", "args": {"charge": c, "amount": a}, "id": i}
        for i, c, a in (("t1", "ch_1", 12000), ("t2", "ch_2", 500))
    ]
    paused = agent(AIMessage(content="", tool_calls=calls))
    await paused.ainvoke({"messages": [{"role": "user", "content": "Refund both"}]}, config)
    async with SignoffClient(quiet.url, quiet.api_key, **SLOW_POLLING) as client:
        first, second = await file_reviews(
            client, paused, config, capability="tools.refund", requested_by="agent"
        )
        resumer = agent(AIMessage(content="done"))
        waiting = asyncio.ensure_future(resume_review(client, resumer, first.id, wait=30))
        await quiet.approve_async(first.id, first.hash)
        await asyncio.sleep(0.5)
        assert not waiting.done()  # one action of the review is still undecided
        resumed = await promptly(
            waiting, lambda: quiet.reject_async(second.id, second.hash, "no"), PROMPT_RESUME
        )
        assert resumed.status == "resumed", resumed
        assert [d["type"] for d in resumed.decisions] == ["approve", "reject"]
        assert ran == [{"charge": "ch_1", "amount": 12000}]
