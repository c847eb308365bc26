"""The integration examples, run end to end the way their docstrings tell a user to: each
example is a subprocess against a real `signoff serve` on the example configuration
(config/signoff.example.toml, copied as it is and started with the README's variables: only
the folder and the port differ), a human decides with the `signoff` CLI, and the test reads
the transcript the example prints (and the record signoff keeps).

What a user must be able to read in each transcript: the gated call never ran before the
decision, an approved call finished and ran exactly once (a second resume or retry runs
nothing), and a rejected call never ran and the agent was told why.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

from signoff_client import SignoffClient
from tests.support import prefork
from tests.support.agent_deployment import Deployment
from tests.support.cli import REPO_ROOT
from tests.support.service import Fleet, WebhookReceiver

T = TypeVar("T")
EXAMPLES = REPO_ROOT / "examples"
EXAMPLE_CONFIG = REPO_ROOT / "config" / "signoff.example.toml"
TIMEOUT = 60
REASON = "not this one"
# What the examples print for the human to run: `signoff approvals approve ID --hash HASH ...`.
DECIDE_COMMAND = re.compile(
    r"signoff approvals approve (?P<id>[0-9a-f-]{36}) --hash (?P<hash>[0-9a-f]{64})"
)


def readme_variables() -> dict[str, str]:
    """The variables the README's quick start sets on its `signoff serve` line."""
    readme = (REPO_ROOT / "README.md").read_text("utf-8")
    [line] = [
        line for line in readme.splitlines()
        if line.startswith("SIGNOFF_CONFIG=config/signoff.example.toml ")
        and line.endswith("signoff serve")
    ]  # fmt: skip
    return dict(word.split("=", 1) for word in shlex.split(line) if "=" in word)


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    """`signoff serve` as the README starts it: config/signoff.example.toml as it is (copied,
    so its SQLite database, beside it, is this test's), the README's variables, a free port."""
    config = tmp_path / "signoff.toml"
    shutil.copy(EXAMPLE_CONFIG, config)
    variables = readme_variables()
    del variables["SIGNOFF_CONFIG"]  # the copy's path, as service_env sets it
    # No webhook arrives (the example tenant has no webhook URL); the receiver only fills the
    # Deployment, which checks that none did.
    with WebhookReceiver() as hooks, Fleet(config, tmp_path, variables) as fleet:
        server = fleet.start(args=("--listen", "127.0.0.1:0"))
        yield Deployment(
            fleet, hooks, server,
            api_key=variables["SIGNOFF_ACME_API_KEY"],
            webhook_secret=variables["SIGNOFF_ACME_WEBHOOK_SECRET"],
        )  # fmt: skip
        # Nothing was posted anywhere, so nothing failed and was retried into the log.
        assert "webhook" not in server.log, server.log[-4000:]


@dataclass(frozen=True)
class Run:
    """One finished example process: its command line and what it printed."""

    args: tuple[str, ...]
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return [line.strip() for line in self.stdout.splitlines()]

    def __str__(self) -> str:  # every assertion message: the whole transcript
        return f"$ {' '.join(self.args)}\n--- stdout\n{self.stdout}--- stderr\n{self.stderr}"


def run_example(deployment: Deployment, cwd: Path, script: str, *args: str, **env: str) -> Run:
    """Run examples/<script> as a user would, against `deployment`; fail on a non-zero exit."""
    command = [prefork.python(), str(EXAMPLES / script), *args]
    environment = {
        **deployment.env,  # SIGNOFF_CONFIG: for the `signoff` CLI the examples tell you to use
        "SIGNOFF_URL": deployment.url,
        "SIGNOFF_API_KEY": deployment.api_key,
        # The interpreter's scripts directory, where `pip install` put `signoff` (the MCP
        # example runs it by name, as a user's shell would).
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        **env,
    }
    shown = (script, *args)
    try:
        done = subprocess.run(
            command,
            env=environment,
            cwd=cwd,
            capture_output=True,
            encoding="utf-8",
            timeout=TIMEOUT,
        )
    except subprocess.TimeoutExpired as exc:
        # TimeoutExpired carries bytes, whatever the encoding asked for.
        out, err = (
            s.decode("utf-8", "replace") if isinstance(s, bytes) else s or ""
            for s in (exc.stdout, exc.stderr)
        )
        pytest.fail(f"timed out after {TIMEOUT}s\n{Run(shown, out, err)}")
    run = Run(shown, done.stdout, done.stderr)
    assert done.returncode == 0, f"exit {done.returncode}\n{run}"
    return run


def only(found: list[T], run: Run) -> T:
    """The one thing the transcript should show exactly once (else fail, showing it)."""
    assert len(found) == 1, f"expected exactly one, found {found!r}\n{run}"
    return found[0]


def fate(deployment: Deployment, approval_id: str) -> tuple[str, str]:
    """What signoff itself records (state, execution), to check the transcript against."""

    async def get() -> tuple[str, str]:
        async with SignoffClient(deployment.url, deployment.api_key) as client:
            record = await client.get(approval_id)
        return record.state, record.execution

    return asyncio.run(get())


def decide(deployment: Deployment, decision: str, approval_id: str, shown_hash: str) -> None:
    if decision == "approve":
        deployment.approve(approval_id, shown_hash)
    else:
        deployment.reject(approval_id, shown_hash, REASON)


RECORDED = {"approve": ("executed", "finished"), "reject": ("rejected", "not_started")}


def for_each_decision(tmp_path: Path, flow: Callable[[str, Path], None]) -> None:
    """Run `flow(decision, cwd)` for an approval and for a rejection at the same time: two
    conversations on one deployment, each in its own directory. The examples spend most of
    their time importing their framework, so this halves the wall time; every failure is
    reported, each under its decision."""
    with ThreadPoolExecutor(len(RECORDED)) as pool:
        futures = {}
        for decision in RECORDED:
            (cwd := tmp_path / decision).mkdir()
            futures[decision] = pool.submit(flow, decision, cwd)
    failures = [f"[{d}] {f.exception()}" for d, f in futures.items() if f.exception()]
    if failures:
        pytest.fail("\n\n".join(failures), pytrace=False)


# -- examples/mcp_gateway.py ----------------------------------------------------------------


def replies(run: Run, tool: str) -> list[str]:
    """What the agent read back from each call of `tool` (the `<-` line after its `->`)."""
    lines = run.lines
    return [
        lines[i + 1].removeprefix("<- ")
        for i, line in enumerate(lines[:-1])
        if line.startswith(f"agent  -> {tool} ")
    ]


WAITING = "isError: Waiting for human approval: this call has NOT been executed."
REFUNDED = "refunded 120.00 EUR on order 8812"
REJECTED = f"isError: Rejected by alice: {REASON}. The call was not executed."

MCP_CASES = {
    # the reply to each of the four refund_order calls, the gated call's fate after each
    # report, and the refunds the shop (the upstream) made
    "approve": (
        [WAITING, WAITING, REFUNDED, f"{REFUNDED} [signoff-mcp] Recorded result of approval"],
        ["never ran (approval pending)", "never ran (approval approved)",
         "finished (approval executed)"],
        1,
    ),
    "reject": (
        [WAITING, WAITING, REJECTED, REJECTED],
        ["never ran (approval pending)", "never ran (approval rejected)",
         "never ran (approval rejected)"],
        0,
    ),
}  # fmt: skip


def test_mcp_gateway_example(deployment: Deployment, tmp_path: Path) -> None:
    """The gateway example: reads run, the deletion is refused, the refund waits for alice;
    approved it runs once (a retry gets the recorded result), rejected it never runs."""
    for_each_decision(tmp_path, lambda decision, cwd: mcp_gateway_run(deployment, decision, cwd))


def mcp_gateway_run(deployment: Deployment, decision: str, cwd: Path) -> None:
    args = ("--reject", REASON) if decision == "reject" else ()
    run = run_example(deployment, cwd, "mcp_gateway.py", *args)
    refund_replies, fates, refunds = MCP_CASES[decision]

    orders = only(replies(run, "list_orders"), run)
    assert orders == '{ "8812": { "customer": "Zoë", "total_cents": 12000 } }', run
    refused = only(replies(run, "delete_customer"), run)
    assert refused.startswith("isError: Refused by policy"), run
    assert "deleted" not in run.stdout, run  # the denied call never reached the shop

    got = replies(run, "refund_order")
    assert len(got) == len(refund_replies), run
    for reply, expected in zip(got, refund_replies, strict=True):
        assert reply.startswith(expected), f"{reply!r} is not {expected!r}\n{run}"
    said = [line.split(": ", 1)[1] for line in run.lines if line.startswith("the gated call: ")]
    assert said == fates, run

    # The shop's own ledger: exactly one refund after approval (none after rejection), so
    # neither asking twice, nor the approved call, nor the retry after it refunded twice.
    ledger = only(replies(run, "list_refunds"), run)
    assert ledger.count('"order": "8812"') == refunds, run
    if not refunds:
        assert ledger == "(empty)", run

    asked = re.findall(r"approval ([0-9a-f-]{36}): group:finance decides", run.stdout)
    approval_id = only(asked, run)
    assert fate(deployment, approval_id) == RECORDED[decision], run


# -- examples/openai_agents_refund.py, langgraph_refund.py and langchain_refund.py ----------------


@dataclass(frozen=True)
class Resumable:
    """An example whose run pauses in one process (filing the approval) and is resumed by a
    later one. `{id}` in an expected line stands for the approval's id."""

    script: str
    start: str  # the subcommand that runs until the gated call and files it
    ran: str  # a regex for the line the gated tool prints when it really runs
    paused: tuple[str, ...]  # lines of the first process
    resumed: dict[str, tuple[str, ...]]  # per decision, lines of the first resume
    again: dict[str, tuple[str, ...]]  # per decision, lines of a second resume (if checked)
    checkpoints: str | None = None  # the variable naming the file its paused runs live in


OPENAI = Resumable(
    script="openai_agents_refund.py",
    start="turn1",
    # The tool got the claim's idempotency key (it prints the first 12 characters).
    ran=r"\[refund tool\] refunding 12000 of ch_3LmN \(idempotency key [0-9a-f]{12}…\)",
    paused=("turn 1 of example-refund-", "the run stopped at 1 gated call(s)",
            "filed approval {id} for refund(charge='ch_3LmN', amount=12000)",
            "turn 1 ends here; nothing ran."),
    resumed={
        "approve": ("resume: resumed",
                    "refund(charge='ch_3LmN', amount=12000): approved, finished (succeeded): "
                    "refund re_",
                    "agent: Update on your refund: refund re_"),
        "reject": ("resume: resumed",
                   "refund(charge='ch_3LmN', amount=12000): rejected, never ran; the model was "
                   f"told: The call was not run: alice rejected it: {REASON}.",
                   "agent: Update on your refund: The call was not run: alice rejected it: "
                   f"{REASON}."),
    },
    # A rejected run has nothing to claim, so resuming it again continues the run again (the
    # adapter documents this; nothing gated runs either way): only the approved path is checked.
    again={"approve": ("resume: already_resumed (it is executed)", "refund: executed, finished")},
)  # fmt: skip

LANGGRAPH = Resumable(
    script="langgraph_refund.py",
    start="start",
    ran=r">> refunding 12000 cents on ch_3PqK2L \(idempotency key [0-9a-f]{12,}\)",
    paused=("paused on approval {id} (pending)",
            'Refund €120.00 to Zoë Martin: stripe.refunds.create({"charge": "ch_3PqK2L", '
            '"amount": 12000})',
            "the refund never ran. Decide it, then resume:"),
    resumed={
        "approve": ("resume: resumed (approval {id} is executed)", "decided by alice",
                    "the gated refund finished", 'recorded outcome: {"status": "succeeded"',
                    "reply to the customer: Your refund re_"),
        "reject": ("resume: resumed (approval {id} is rejected)", f"decided by alice: {REASON}",
                   "the gated refund never ran",
                   f"reply to the customer: We could not refund this time (rejected: {REASON})."),
    },
    again={
        "approve": ("resume: not_waiting (approval {id} is executed)",
                    "the gated refund finished"),
        "reject": ("resume: not_waiting (approval {id} is rejected)",
                   "the gated refund never ran"),
    },
    checkpoints="LANGGRAPH_DB",
)  # fmt: skip


LANGCHAIN = Resumable(
    script="langchain_refund.py",
    start="start",
    ran=r">> refunding 12000 cents on ch_3PqK2L",
    paused=("paused; the refund never ran", "filed approval {id} (pending): refund"),
    resumed={
        "approve": ("resume: resumed (approval {id} is executed)",
                    "agent: Update on your refund: refund re_"),
        "reject": ("resume: resumed (approval {id} is rejected)",
                   "agent: Update on your refund: ", REASON),
    },
    again={
        "approve": ("resume: not_waiting (approval {id} is executed)",),
        "reject": ("resume: not_waiting (approval {id} is rejected)",),
    },
    checkpoints="LANGCHAIN_DB",
)  # fmt: skip


def says(run: Run, expected: tuple[str, ...], approval_id: str) -> None:
    """The transcript says each expected phrase, in this order (two may share a line)."""
    lines, at = run.lines, 0
    for want in (phrase.replace("{id}", approval_id) for phrase in expected):
        found = [i for i in range(at, len(lines)) if want in lines[i]]
        assert found, f"missing {want!r}\n{run}"
        at = found[0]


@pytest.mark.parametrize(
    "example", [OPENAI, LANGGRAPH, LANGCHAIN], ids=["openai_agents", "langgraph", "langchain"]
)
def test_resumable_example(deployment: Deployment, tmp_path: Path, example: Resumable) -> None:
    """File in one process, decide with the CLI, resume in another: approved, the refund runs
    exactly once with the approved arguments and a second resume runs nothing; rejected, it
    never runs and the agent is told why."""
    for_each_decision(
        tmp_path, lambda decision, cwd: resumable_run(deployment, example, decision, cwd)
    )


def resumable_run(deployment: Deployment, example: Resumable, decision: str, cwd: Path) -> None:
    env = {example.checkpoints: str(cwd / "checkpoints.sqlite")} if example.checkpoints else {}
    ran = re.compile(example.ran)

    def times_ran(run: Run) -> int:
        return sum(bool(ran.fullmatch(line)) for line in run.lines)

    paused = run_example(deployment, cwd, example.script, example.start, **env)
    approval_id, shown_hash = only(DECIDE_COMMAND.findall(paused.stdout), paused)
    says(paused, example.paused, approval_id)
    assert times_ran(paused) == 0, paused
    assert fate(deployment, approval_id) == ("pending", "not_started"), paused

    decide(deployment, decision, approval_id, shown_hash)

    resumed = run_example(deployment, cwd, example.script, "resume", approval_id, **env)
    says(resumed, example.resumed[decision], approval_id)
    assert times_ran(resumed) == (1 if decision == "approve" else 0), resumed
    assert fate(deployment, approval_id) == RECORDED[decision], resumed

    if decision in example.again:
        again = run_example(deployment, cwd, example.script, "resume", approval_id, **env)
        says(again, example.again[decision], approval_id)
        assert times_ran(again) == 0, again
        assert fate(deployment, approval_id) == RECORDED[decision], again
