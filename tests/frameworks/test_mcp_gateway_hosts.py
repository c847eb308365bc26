"""signoff-mcp as real MCP hosts launch it, with the official `mcp` client against a real
upstream process (mcp_upstream.py) and a real `signoff serve`.

Hosts that rewrite the arguments they pass (the MCP Inspector drops `--`) must still start
the gateway in front of its upstream: the upstream command is also accepted without `--` and
as `--upstream-command` with `--upstream-arg`. An `allow` tool must behave through the
gateway as it does directly: the upstream's progress notifications and log messages reach
the caller, and so does the progress of an approved gated call when it runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from tests.support import prefork
from tests.support.agent_deployment import Deployment

# One signoff serve per database for the module, emptied before each test.
pytestmark = pytest.mark.shared_deployment

UPSTREAM = str(Path(__file__).with_name("mcp_upstream.py"))

POLICY = """\
[gateway]
server = "mail"
requested_by = "agent"

[tools]
read_note = "allow"
count_slowly = "allow"
"delete_*" = "deny"
"""


def gateway_client(
    deployment: Deployment,
    tmp_path: Path,
    upstream: list[str],
    policy: str = POLICY,
    **options: Any,
) -> Client:
    """The official client launching `signoff-mcp serve --policy P <upstream>` on stdio."""
    (tmp_path / "policy.toml").write_text(policy, "utf-8")
    params = StdioServerParameters(
        command=prefork.python(),
        args=["-m", "signoff_client.mcp.cli", "serve", "--policy", "policy.toml", *upstream],
        env={
            **deployment.env,
            "SIGNOFF_URL": deployment.url,
            "SIGNOFF_API_KEY": deployment.api_key,
        },
        cwd=tmp_path,
    )
    return Client(params, **options)


def executed(calls: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in calls.read_text("utf-8").splitlines()]


@pytest.mark.parametrize(
    "form",
    ["upstream-command", "no-dashes"],
    ids=["--upstream-command with --upstream-arg", "the command without --"],
)
async def test_the_upstream_command_survives_hosts_that_drop_the_dashes(
    deployment: Deployment, tmp_path: Path, form: str
) -> None:
    calls = tmp_path / "calls.jsonl"
    # `-u` starts with `-`: as an --upstream-arg it is written --upstream-arg=-u.
    upstream = (
        ["--upstream-command", prefork.python(), "--upstream-arg=-u", "--upstream-arg", UPSTREAM,
         "--upstream-arg", str(calls)]
        if form == "upstream-command"
        else [prefork.python(), "-u", UPSTREAM, str(calls)]
    )  # fmt: skip
    async with gateway_client(deployment, tmp_path, upstream, mode="legacy") as agent:
        result = await agent.call_tool("read_note", {"name": "groceries"})
    assert not result.is_error, result
    assert result.content[0].text == "note groceries: buy milk"
    assert executed(calls) == [{"tool": "read_note", "arguments": {"name": "groceries"}}]


@pytest.mark.parametrize("mode", ["legacy", "auto"], ids=["2025-11-25", "2026-07-28"])
async def test_progress_and_log_messages_of_an_allowed_call_reach_the_caller(
    deployment: Deployment, tmp_path: Path, mode: str
) -> None:
    calls = tmp_path / "calls.jsonl"
    logged: list[tuple[str, Any, str | None]] = []
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_log(params: Any) -> None:
        logged.append((params.level, params.data, params.logger))

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    client = gateway_client(
        deployment,
        tmp_path,
        ["--", prefork.python(), UPSTREAM, str(calls)],
        mode=mode,
        logging_callback=on_log,
        log_level="info",  # 2026-07-28: log messages are sent only to a request that asks
    )
    async with client as agent:
        result = await agent.call_tool("count_slowly", {"steps": 3}, progress_callback=on_progress)
    assert result.content[0].text == "counted to 3"
    assert progress == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]
    assert logged == [("info", f"counted {n} of 3", "counter") for n in (1, 2, 3)]
    assert executed(calls) == [{"tool": "count_slowly", "arguments": {"steps": 3}}]


async def test_the_approved_run_of_a_gated_call_relays_progress(
    deployment: Deployment, tmp_path: Path
) -> None:
    """Gated: the first call only waits (no progress, nothing ran); the call that runs the
    approved request passes the upstream's progress on to its caller."""
    calls = tmp_path / "calls.jsonl"
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    gated = POLICY.replace('count_slowly = "allow"', 'count_slowly = "ask"')
    upstream = ["--", prefork.python(), UPSTREAM, str(calls)]
    client = gateway_client(deployment, tmp_path, upstream, gated, mode="legacy")
    async with client as agent:
        waiting = await agent.call_tool("count_slowly", {"steps": 2}, progress_callback=on_progress)
        assert waiting.is_error and progress == [] and not calls.exists()
        asked = waiting.meta["signoff/approval"]
        await deployment.approve_async(asked["id"], asked["hash"])
        ran = await agent.call_tool("count_slowly", {"steps": 2}, progress_callback=on_progress)
    assert ran.content[0].text == "counted to 2"
    assert progress == [(1, 2, "step 1"), (2, 2, "step 2")]
    assert executed(calls) == [{"tool": "count_slowly", "arguments": {"steps": 2}}]
