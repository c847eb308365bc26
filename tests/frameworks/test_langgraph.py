"""The LangGraph adapter against a real `signoff serve` and real LangGraph (no model: the graphs
are plain functions).

A thread pauses on `signoff_interrupt` in one process, which exits; a human decides with the
`signoff` CLI; a new process resumes it from the decision webhook on the same SQLite
checkpoint. What a user relies on: the refund ran only after approval, once, with the
approved arguments; LangGraph's re-run of the node on resume filed no second request; a
redelivered webhook or a second resumer runs nothing; a rejection or an expiry reaches the
node and nothing runs. In process: a node with two gated calls, whose re-run on the second
resume must not repeat the first; a node whose re-run computes other arguments, which still
runs the approved ones; a node that fails after its decision, before the call,
which hands the claim back and runs the call once on retry (on SQLite and PostgreSQL
servers); a resumer lost after its claim, whose re-run a human approves and which then
resumes the same thread; and a decision made days later (a FakeClock on the real
application).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import hashlib
import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TypedDict

import pytest
from aiohttp import web
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from bot.app import build_app
from bot.clock import FakeClock
from bot.config import parse_config
from bot.operator import Actor, Operator
from bot.routing import Directory
from signoff_client import SignoffClient
from signoff_client.langgraph import Decision, SignoffGate, asignoff_interrupt, resume
from store.repository import Store
from tests.support import prefork
from tests.support.agent_deployment import Deployment
from tests.support.databases import SQLITE_ONLY
from tests.support.samples import TEST_CONFIG

APP = "tests.frameworks.langgraph_app"
TIMEOUT = 60


class App:
    """tests/frameworks/langgraph_app.py as the agent: each command a new process."""

    def __init__(self, deployment: Deployment, tmp_path: Path) -> None:
        self.deployment = deployment
        self.cwd = tmp_path
        self.db = tmp_path / "checkpoints.sqlite"
        self.refund_log = tmp_path / "refunds.log"
        self.node_log = tmp_path / "node-runs.log"
        self.env = {
            **deployment.env,
            "SIGNOFF_URL": deployment.url,
            "SIGNOFF_API_KEY": deployment.api_key,
            "SIGNOFF_WEBHOOK_SECRET": deployment.webhook_secret,
            "REFUND_LOG": str(self.refund_log),
            "NODE_LOG": str(self.node_log),
        }

    def _command(self, *args: str) -> list[str]:
        return [prefork.python(), "-m", APP, args[0], "--db", str(self.db), *args[1:]]

    def run(self, *args: str) -> dict[str, Any]:
        done = subprocess.run(
            self._command(*args),
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    def spawn(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self._command(*args),
            cwd=self.cwd,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def start(self, thread: str, *extra: str) -> dict[str, Any]:
        """Run a new thread until it pauses; returns what it paused on."""
        output = self.run("start", "--thread", thread, *extra)["output"]
        [paused] = output["interrupts"]
        return paused["signoff"]

    def webhook_file(self, approval_id: str, state: str) -> Path:
        """The decision webhook signoff sent for the approval, as the agent received it."""
        seen = self.deployment.hooks.wait_for(
            lambda ds: any(_is(d.json(), approval_id, state) for d in ds), 15
        )
        [delivery] = [d for d in seen if _is(d.json(), approval_id, state)]
        path = self.cwd / f"webhook-{approval_id}-{state}.json"
        body = base64.b64encode(delivery.body).decode()
        path.write_text(json.dumps({"headers": delivery.headers, "body": body}), "utf-8")
        return path

    def refunds(self) -> list[dict[str, Any]]:
        if not self.refund_log.exists():
            return []
        return [json.loads(line) for line in self.refund_log.read_text("utf-8").splitlines()]

    def node_runs(self) -> int:
        return len(self.node_log.read_text("utf-8").splitlines())


def _is(event: dict[str, Any], approval_id: str, state: str) -> bool:
    return event["approval"]["id"] == approval_id and event["approval"]["state"] == state


def _approvals(deployment: Deployment, run_id: str) -> list[Any]:
    async def fetch() -> list[Any]:
        async with SignoffClient(deployment.url, deployment.api_key) as client:
            records, _ = await client.list(run_id=run_id)
            return records

    return asyncio.run(fetch())


@pytest.fixture
def app(deployment: Deployment, tmp_path: Path) -> App:
    return App(deployment, tmp_path)


def test_approved_refund_runs_once_in_a_new_process(app: App, deployment: Deployment) -> None:
    paused = app.start("thread-approve", "--amount", "12000")
    assert (paused["state"], paused["tool"]["name"]) == ("pending", "refund")
    assert paused["tool"]["arguments"] == {"order": "8812", "amount": 12000}
    assert app.refunds() == []  # nothing ran before a human decided

    deployment.approve(paused["approval_id"], paused["hash"])
    webhook = app.webhook_file(paused["approval_id"], "approved")

    # The same delivery twice at once (a redelivery racing the first): one process claims
    # and runs the refund; the other claims nothing and runs nothing.
    first, second = (app.spawn("webhook", "--delivery", str(webhook)) for _ in range(2))
    answers = []
    for process in (first, second):
        out, err = process.communicate(timeout=TIMEOUT)
        assert process.returncode == 0, err
        answers.append(json.loads(out.strip().splitlines()[-1]))
    [resumed] = [a for a in answers if a["status"] == "resumed"]
    [other] = [a for a in answers if a is not resumed]
    # It found the thread resumed already, or lost the claim to the first.
    assert other["status"] in ("not_waiting", "taken"), answers
    assert resumed["output"]["outcome"] == "refunded"
    assert resumed["output"]["transcript"] == ["customer told: refunded"]

    [refund] = app.refunds()
    assert refund["arguments"] == {"order": "8812", "amount": 12000}
    # The effect got the approval's idempotency key, SHA-256 of "id:hash", to dedupe on.
    key = hashlib.sha256(f"{paused['approval_id']}:{paused['hash']}".encode()).hexdigest()
    assert refund["idempotency_key"] == key
    # LangGraph re-ran the node from its start, which asked signoff again: the same request.
    assert app.node_runs() == 2
    [record] = _approvals(deployment, paused["run_id"])
    assert record.id == paused["approval_id"]
    assert (record.state, record.execution) == ("executed", "finished")
    assert record.raw["outcome"]["result"] == {"refund_id": "re_8812", "amount": 12000}


def test_rejection_and_expiry_reach_the_node_and_nothing_runs(
    app: App, deployment: Deployment
) -> None:
    starting = {
        "reject": app.spawn("start", "--thread", "thread-reject"),
        "expire": app.spawn("start", "--thread", "thread-expire", "--ttl", "2s"),
    }
    paused = {}
    for name, process in starting.items():
        out, err = process.communicate(timeout=TIMEOUT)
        assert process.returncode == 0, err
        [interrupt] = json.loads(out.strip().splitlines()[-1])["output"]["interrupts"]
        paused[name] = interrupt["signoff"]
    rejected, expired = paused["reject"], paused["expire"]
    deployment.reject(rejected["approval_id"], rejected["hash"], "refund via store credit")
    webhooks = {
        "reject": app.webhook_file(rejected["approval_id"], "rejected"),
        "expire": app.webhook_file(expired["approval_id"], "expired"),  # the sweeper's
    }

    resuming = {n: app.spawn("webhook", "--delivery", str(w)) for n, w in webhooks.items()}
    answers = {}
    for name, process in resuming.items():
        out, err = process.communicate(timeout=TIMEOUT)
        assert process.returncode == 0, err
        answers[name] = json.loads(out.strip().splitlines()[-1])
    assert answers["reject"]["status"] == answers["expire"]["status"] == "resumed"
    assert answers["reject"]["output"]["outcome"] == "rejected"
    assert answers["reject"]["output"]["note"] == "refund via store credit"
    assert answers["reject"]["output"]["transcript"] == ["customer told: rejected"]
    assert answers["expire"]["output"]["outcome"] == "expired"
    assert app.refunds() == []
    for asked in paused.values():
        assert len(_approvals(deployment, asked["run_id"])) == 1


# --- In process -----------------------------------------------------------------------------


class TwoCalls(TypedDict, total=False):
    done: list[str]


def two_call_graph(gate: SignoffGate, ran: list[tuple[str, dict[str, Any]]]) -> Any:
    """An async node with two gated calls. Resuming the second re-runs the node from its
    start, through the first call's signoff_interrupt and `arun` again."""

    async def node(state: TwoCalls) -> TwoCalls:
        done = []
        for name, amount in (("refund", 100), ("credit", 5)):
            decision = await asignoff_interrupt(
                tool={"name": name, "arguments": {"amount": amount}},
                capability=f"tools.{name}",
                presentation={"title": f"{name} {amount}"},
                requested_by="agent",
                gate=gate,
            )
            assert isinstance(decision, Decision) and decision.approved, decision

            async def execute(arguments: dict[str, Any], name: str = name) -> dict[str, Any]:
                ran.append((name, arguments))
                return {"ok": name}

            assert await decision.arun(execute) == {"ok": name}
            done.append(name)
        return {"done": done}

    graph = StateGraph(TwoCalls)
    graph.add_node("pay", node)
    graph.add_edge(START, "pay")
    graph.add_edge("pay", END)
    return graph.compile(checkpointer=InMemorySaver())


async def test_rerun_after_a_call_ran_does_not_run_it_again(deployment: Deployment) -> None:
    gate = SignoffGate(deployment.url, deployment.api_key)
    ran: list[tuple[str, dict[str, Any]]] = []
    graph = two_call_graph(gate, ran)
    config = {"configurable": {"thread_id": "two-calls"}}

    first = (await graph.ainvoke({}, config))["__interrupt__"][0].value["signoff"]
    await deployment.approve_async(first["approval_id"], first["hash"])
    result = await resume(graph, first["approval_id"], gate=gate)
    assert ran == [("refund", {"amount": 100})]
    second = result.output["__interrupt__"][0].value["signoff"]
    assert second["tool"]["name"] == "credit"

    await deployment.approve_async(second["approval_id"], second["hash"])
    result = await resume(graph, second["approval_id"], gate=gate)
    assert result.output == {"done": ["refund", "credit"]}
    assert ran == [("refund", {"amount": 100}), ("credit", {"amount": 5})]  # refund once
    # Resuming either again (a late retry): the thread no longer waits on it; nothing runs.
    for asked in (first, second):
        again = await resume(graph, asked["approval_id"], gate=gate)
        assert again.status == "not_waiting"
    assert len(ran) == 2
    async with gate.client() as client:
        records = [(await client.list(run_id=a["run_id"]))[0] for a in (first, second)]
    # Each gated call of the node is a pause of its own, and its one request ran.
    assert [[r.state for r in listed] for listed in records] == [["executed"], ["executed"]]


async def test_the_approved_call_runs_even_if_the_rerun_computes_another(
    deployment: Deployment,
) -> None:
    """A node whose arguments are not deterministic (a model, the clock) asks for another
    amount when LangGraph re-runs it on resume: the approved amount is what runs, and the
    new request nobody decided is withdrawn."""
    gate = SignoffGate(deployment.url, deployment.api_key)
    amounts = iter([100, 250])
    ran: list[dict[str, Any]] = []

    async def node(state: TwoCalls) -> TwoCalls:
        decision = await asignoff_interrupt(
            tool={"name": "refund", "arguments": {"amount": next(amounts)}},
            capability="tools.refund",
            presentation={"title": "Refund"},
            requested_by="agent",
            gate=gate,
        )
        await decision.arun(ran.append)
        return {"done": ["refund"]}

    builder = StateGraph(TwoCalls)
    builder.add_node("refund", node)
    builder.add_edge(START, "refund")
    graph = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "drifting"}}
    paused = (await graph.ainvoke({}, config))["__interrupt__"][0].value["signoff"]
    await deployment.approve_async(paused["approval_id"], paused["hash"])

    assert (await resume(graph, paused["approval_id"], gate=gate)).resumed
    assert ran == [{"amount": 100}]
    async with gate.client() as client:
        records, _ = await client.list(run_id=paused["run_id"])
    states = {r.tool["arguments"]["amount"]: r.state for r in records}
    assert states == {100: "executed", 250: "cancelled"}


async def test_a_node_failing_before_the_call_hands_the_claim_back(
    deployment_on: Deployment,
) -> None:
    deployment = deployment_on  # on SQLite and PostgreSQL: claim, release, claim again
    gate = SignoffGate(deployment.url, deployment.api_key)
    ran: list[dict[str, Any]] = []
    outages = ["the ledger is down"]

    async def node(state: TwoCalls) -> TwoCalls:
        decision = await asignoff_interrupt(
            tool={"name": "refund", "arguments": {"amount": 7}},
            capability="tools.refund",
            presentation={"title": "Refund 7"},
            requested_by="agent",
            gate=gate,
        )
        if outages:
            raise RuntimeError(outages.pop())  # after the decision, before the call
        await decision.arun(ran.append)
        return {"done": ["refund"]}

    builder = StateGraph(TwoCalls)
    builder.add_node("refund", node)
    builder.add_edge(START, "refund")
    graph = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "flaky"}}
    paused = (await graph.ainvoke({}, config))["__interrupt__"][0].value["signoff"]
    await deployment.approve_async(paused["approval_id"], paused["hash"])

    with pytest.raises(RuntimeError, match="the ledger is down"):
        await resume(graph, paused["approval_id"], gate=gate)
    async with gate.client() as client:
        record = await client.get(paused["approval_id"])
    # The call never ran, and signoff knows: the grant is handed back, not left executing
    # until its lease lapses and a human is asked about a call that never started.
    assert (ran, record.state, record.execution) == ([], "approved", "not_started")

    result = await resume(graph, paused["approval_id"], gate=gate)  # the retry
    assert (result.status, result.output) == ("resumed", {"done": ["refund"]})
    assert ran == [{"amount": 7}]
    async with gate.client() as client:
        assert (await client.get(paused["approval_id"])).state == "executed"


async def test_a_resumer_lost_after_its_claim_leaves_the_rerun_to_a_human(
    deployment: Deployment,
) -> None:
    gate = SignoffGate(deployment.url, deployment.api_key)
    ran: list[dict[str, Any]] = []

    async def node(state: TwoCalls) -> TwoCalls:
        decision = await asignoff_interrupt(
            tool={"name": "refund", "arguments": {"amount": 9}},
            capability="tools.refund",
            presentation={"title": "Refund 9"},
            requested_by="agent",
            gate=gate,
        )
        await decision.arun(ran.append)
        return {"done": [decision.approval_id]}

    builder = StateGraph(TwoCalls)
    builder.add_node("refund", node)
    builder.add_edge(START, "refund")
    graph = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "lost-resumer"}}
    paused = (await graph.ainvoke({}, config))["__interrupt__"][0].value["signoff"]
    await deployment.approve_async(paused["approval_id"], paused["hash"])
    async with gate.client() as client:
        # A resumer claims, then dies before resuming the thread; its lease lapses.
        await client.claim(paused["approval_id"], lease="1s")
        assert (await resume(graph, paused["approval_id"], gate=gate)).status == "taken"
        for _ in range(100):
            original = await client.get(paused["approval_id"])
            if original.follow_up_id:
                break
            await asyncio.sleep(0.1)
        assert original.state == "outcome_unknown" and ran == []
        follow_up = await client.get(original.follow_up_id)

    # signoff asks a human whether to run it again; approving resumes the same thread.
    await deployment.approve_async(follow_up.id, follow_up.hash)
    result = await resume(graph, follow_up.id, gate=gate)
    assert (result.status, result.output) == ("resumed", {"done": [follow_up.id]})
    assert ran == [{"amount": 9}]
    async with gate.client() as client:
        assert (await client.get(follow_up.id)).state == "executed"


@pytest.fixture
async def fake_clock_gate(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[SignoffGate]:
    """The real application on a loopback port, on a clock the test moves."""
    config = copy.deepcopy(TEST_CONFIG)
    config["tenants"] = [
        {"name": "acme", "api_key_env": "LANGGRAPH_TEST_KEY"},
        {"name": "globex"},
    ]
    monkeypatch.setenv("LANGGRAPH_TEST_KEY", "acme-key")
    runner = web.AppRunner(build_app(parse_config(config), store, clock=clock, background=False))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield SignoffGate(f"http://127.0.0.1:{runner.addresses[0][1]}", "acme-key")
    await runner.cleanup()


@SQLITE_ONLY
async def test_a_decision_days_later_resumes_the_thread(
    fake_clock_gate: SignoffGate, store: Store, directory: Directory, clock: FakeClock
) -> None:
    ran: list[dict[str, Any]] = []

    async def node(state: TwoCalls) -> TwoCalls:
        decision = await asignoff_interrupt(
            tool={"name": "stripe.refunds.create", "arguments": {"charge": "ch_1"}},
            capability="payments.refund",
            presentation={"title": "Refund ch_1"},
            requested_by="sam",
        )
        await decision.arun(ran.append)
        return {"done": [decision.decided_by or ""]}

    builder = StateGraph(TwoCalls)
    builder.add_node("refund", node)
    builder.add_edge(START, "refund")
    graph = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "slow-human", "signoff": fake_clock_gate}}
    paused = (await graph.ainvoke({}, config))["__interrupt__"][0].value["signoff"]

    clock.advance(days=2, hours=23)  # inside the route's 72 h
    await Operator(store, directory, clock).approve_shown(
        paused["approval_id"], paused["hash"], Actor("alice", "cli")
    )
    clock.advance(hours=20)  # inside the grant's 24 h
    result = await resume(graph, paused["approval_id"], gate=fake_clock_gate)
    assert result.output == {"done": ["alice"]} and ran == [{"charge": "ch_1"}]


def test_the_deprecated_name_resume_thread_is_resume() -> None:
    """Code written before the two adapters shared their names keeps working."""
    from signoff_client.langgraph import resume_thread

    assert resume_thread is resume
