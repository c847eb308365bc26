"""signoff-mcp between a real MCP client and a real upstream MCP server, on a real `signoff
serve`: gated tools never run before a human approves them, run exactly once with the
approved arguments after, and a rejection reaches the agent. Both ways of serving: the
gateway on stdio (launched by the client, upstream on stdio, the 2025-11-25 handshake most
clients speak) and on streamable HTTP (upstream over HTTP too, the 2026-07-28 protocol).

The upstream (mcp_upstream.py) appends every call it receives to a file, so executions are
counted across processes, gateway restarts included.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from mcp_types import CallToolRequest, CallToolRequestParams, CallToolResult, TaskMetadata

from signoff_client import SignoffClient
from signoff_client.mcp import parse_policy
from tests.support import prefork
from tests.support.agent_deployment import Deployment
from tests.support.mcp_gateway import META, Gateway

POLICY = """\
[gateway]
server = "mail"
requested_by = "agent"

[tools]
read_note = "allow"
"delete_*" = "deny"
send_email = "ask"
"""


@pytest.fixture(params=["stdio", "streamable-http"])
def gateway(
    request: pytest.FixtureRequest, deployment: Deployment, tmp_path: Path
) -> Iterator[Gateway]:
    (tmp_path / "policy.toml").write_text(POLICY, "utf-8")
    env = {
        **deployment.env,
        "SIGNOFF_URL": deployment.url,
        "SIGNOFF_API_KEY": deployment.api_key,
    }
    gw = Gateway(request.param, tmp_path, env, tmp_path / "calls.jsonl")
    gw.start()
    yield gw
    gw.stop()


def text(result: CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


def approval(result: CallToolResult) -> dict[str, Any]:
    assert result.meta and META in result.meta, result
    return result.meta[META]


async def test_gated_calls_wait_for_a_human_and_run_once(
    gateway: Gateway, deployment: Deployment
) -> None:
    email = {"to": "zoe@example.com", "subject": "Q3 numbers", "body": "attached"}
    async with (
        gateway.agent() as agent,
        SignoffClient(deployment.url, deployment.api_key) as signoff,
    ):
        legacy = gateway.transport == "stdio"
        assert agent.protocol_version == ("2025-11-25" if legacy else "2026-07-28")
        tools = {tool.name: tool for tool in (await agent.list_tools()).tools}
        assert set(tools) == {"send_email", "read_note", "delete_repo", "count_slowly"}
        assert tools["send_email"].description == (
            "Send an email to one recipient. It cannot be taken back."
        )
        assert "to" in tools["send_email"].input_schema["properties"]

        # allow: forwarded as is. deny: refused, the upstream never sees it.
        allowed = await agent.call_tool("read_note", {"name": "groceries"})
        assert not allowed.is_error and text(allowed) == "note groceries: buy milk"
        denied = await agent.call_tool("delete_repo", {"name": "prod"})
        assert denied.is_error and "denied by this gateway's policy" in text(denied)
        assert gateway.executed("delete_repo") == []
        assert gateway.executed("read_note") == [{"name": "groceries"}]

        # ask: pending, nothing ran; the approval holds exactly the MCP call.
        pending = await agent.call_tool("send_email", email)
        assert pending.is_error and "has NOT been executed" in text(pending)
        first = approval(pending)
        assert first["state"] == "pending" and first["assignee"] in text(pending)
        record = await signoff.get(first["id"])
        assert record.tool == {"name": "send_email", "arguments": email}
        assert record.capability == "mcp.mail.send_email"
        assert record.presentation["summary"] == tools["send_email"].description
        # The arguments, then the tool as the approver is shown it: its input schema and the
        # digest of its definition (docs/hashing.md), which the approval binds.
        listed = tools["send_email"]
        definition = {
            "name": listed.name,
            "title": listed.title,
            "description": listed.description,
            "inputSchema": listed.input_schema,
        }
        schema = rfc8785.dumps(listed.input_schema).decode()
        digest = "sha256:" + hashlib.sha256(rfc8785.dumps(definition)).hexdigest()
        assert record.presentation["fields"] == [
            {"label": 'Argument "body"', "value": "attached"},
            {"label": 'Argument "subject"', "value": "Q3 numbers"},
            {"label": 'Argument "to"', "value": "zoe@example.com"},
            {"label": "MCP tool input schema", "value": schema},
            {"label": "MCP tool definition", "value": digest},
        ]

        # The same call again (keys in another order) is the same approval; a changed
        # argument is a new one. On 2025-11-25, a client asking for a task gets the plain
        # answer: the gateway declares no tasks capability (the SDK carries no tasks).
        reordered = dict(reversed(email.items()))
        again = (
            await agent.session.send_request(
                CallToolRequest(
                    params=CallToolRequestParams(
                        name="send_email", arguments=reordered, task=TaskMetadata(ttl=60_000)
                    )
                ),
                CallToolResult,
            )
            if legacy
            else await agent.call_tool("send_email", reordered)
        )
        assert approval(again)["id"] == first["id"]
        changed = await agent.call_tool("send_email", {**email, "subject": "Q4 numbers"})
        second = approval(changed)
        assert second["id"] != first["id"]
        listed, _ = await signoff.list(capability="mcp.mail.send_email")
        assert sorted(r.id for r in listed) == sorted([first["id"], second["id"]])
        assert gateway.executed() == []

        # Two more that the upstream will fail: an isError result, and a JSON-RPC error.
        bounce = {"to": "nobody@bounce.invalid", "subject": "hello"}
        refuse = {"to": "x@refuse.invalid", "subject": "hello"}
        bounced = approval(await agent.call_tool("send_email", bounce))
        refused_upstream = approval(await agent.call_tool("send_email", refuse))
        assert gateway.executed() == []

        # The humans decide (in parallel: each decision is a `signoff` CLI process).
        await asyncio.gather(
            deployment.approve_async(first["id"], first["hash"]),
            deployment.reject_async(second["id"], second["hash"], "not before the board meets"),
            deployment.approve_async(bounced["id"], bounced["hash"]),
            deployment.approve_async(refused_upstream["id"], refused_upstream["hash"]),
        )

        # Approved: the next identical call runs it once, with the approved arguments.
        done = await agent.call_tool("send_email", email)
        assert not done.is_error and text(done) == "sent to zoe@example.com: Q3 numbers"
        assert approval(done)["state"] == "executed"
        assert gateway.executed() == [email]
        outcome = (await signoff.get(first["id"])).raw["outcome"]
        assert outcome["status"] == "succeeded"
        assert outcome["result"]["content"][0]["text"] == "sent to zoe@example.com: Q3 numbers"
        # Asked once more: the recorded result, not a second email.
        replay = await agent.call_tool("send_email", email)
        assert "sent to zoe@example.com: Q3 numbers" in text(replay)
        assert "not run again" in text(replay) and not replay.is_error
        assert gateway.executed() == [email]

        # Rejected: the agent hears why; the upstream never saw the call.
        refused = await agent.call_tool("send_email", {**email, "subject": "Q4 numbers"})
        assert refused.is_error
        assert "Rejected by alice: not before the board meets" in text(refused)

        # The upstream fails an approved call: the approval ends failed with the upstream's
        # error, and asking again returns that error without running the call again.
        for call, asked, says in [
            (bounce, bounced, "does not exist"),
            (refuse, refused_upstream, "recipient x@refuse.invalid refused"),
        ]:
            failed = await agent.call_tool("send_email", call)
            assert failed.is_error and says in text(failed)
            assert (await signoff.get(asked["id"])).state == "failed"
            again = await agent.call_tool("send_email", call)
            assert again.is_error and says in text(again) and "not run again" in text(again)
        assert [c["to"] for c in gateway.executed()] == [
            "zoe@example.com", "nobody@bounce.invalid", "x@refuse.invalid"
        ]  # fmt: skip

        # Pending when the gateway is SIGKILLed: nothing is lost.
        late = {"to": "ops@example.com", "subject": "after the restart"}
        waiting = approval(await agent.call_tool("send_email", late))
        gateway.kill9()

    await deployment.approve_async(waiting["id"], waiting["hash"])
    gateway.start()
    async with gateway.agent() as agent:
        resumed = await agent.call_tool("send_email", late)
        assert (
            not resumed.is_error and text(resumed) == "sent to ops@example.com: after the restart"
        )
        assert approval(resumed)["id"] == waiting["id"]
        assert gateway.executed()[-1] == {**late, "body": ""}
        assert len(gateway.executed()) == 4


@pytest.mark.parametrize(
    ("edit", "exit_code", "says"),
    [
        (lambda p: p, 0, "'send_email' +ask -> capability mcp.mail.send_email"),
        (lambda p: p.replace('= "deny"', '= "refuse"'), 1, r':7: tools."delete_\*": action must'),
        (lambda p: p.replace("requested_by", "requester"), 1, ":3: gateway.requester: unknown"),
        (lambda p: p.replace('"mail"', '"mail'), 1, ":2: not valid TOML"),
    ],
)
def test_check_validates_a_policy(tmp_path: Path, edit: Any, exit_code: int, says: str) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(edit(POLICY), "utf-8")
    done = subprocess.run(
        [prefork.python(), "-m", "signoff_client.mcp.cli", "check", str(path)],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == exit_code, done
    assert re.search(says, done.stdout if exit_code == 0 else done.stderr), done


def test_the_policy_picks_the_exact_name_then_the_first_glob_then_the_default() -> None:
    policy = parse_policy(
        POLICY
        + '"delete_draft" = { action = "ask", capability = "mail.drafts", approvers = ["bob"] }\n'
        + '"*" = "allow"\n'
    )
    assert policy.decide("delete_draft").capability == "mail.drafts"
    assert policy.decide("delete_draft").approvers == ("bob",)
    assert policy.decide("delete_all").action == "deny"
    assert policy.decide("anything.else").action == "allow"
    assert parse_policy(POLICY).decide("fs.write/x").capability == "mcp.mail.fs_write_x"
    assert parse_policy(POLICY).decide("unknown").action == "ask"
