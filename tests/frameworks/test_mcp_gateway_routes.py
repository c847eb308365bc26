"""Routes for what the MCP gateway asks, checked before the first gated call is refused
`no_route`: `signoff-mcp check` asks a real `signoff serve` (GET /v1/routes/match, scoped to
the key's tenant) whether each capability of a policy has a route, and the example config
routes every capability the example policy asks for.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

from bot.config import load_config
from signoff_client import SignoffClient
from signoff_client.mcp import load_policy
from signoff_client.mcp.routes import probes
from tests.support import prefork
from tests.support.agent_deployment import Deployment
from tests.support.service import API_KEYS

ROOT = Path(__file__).resolve().parents[2]

POLICY = """\
[gateway]
server = "mail"

[tools]
read_note = "allow"
send_email = "ask"
refund = { action = "ask", capability = "billing.refund" }
"archive_*" = "ask"
"""


def check(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "policy.toml").write_text(POLICY, "utf-8")
    return subprocess.run(
        [prefork.python(), "-m", "signoff_client.mcp.cli", "check", "policy.toml", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_check_warns_about_a_capability_no_route_covers(
    deployment: Deployment, tmp_path: Path
) -> None:
    env = {**os.environ, "SIGNOFF_API_KEY": deployment.api_key}
    env.pop("SIGNOFF_URL", None)
    done = check(tmp_path, env, "--signoff-url", deployment.url)
    assert done.returncode == 0, done.stderr  # the policy is valid; a missing route is a warning
    # The deployment routes mcp.* for acme, and nothing matches billing.refund.
    assert "'send_email' ask for mcp.mail.send_email: route 'mcp.*'" in done.stdout
    assert "tools matching 'archive_*' ask for mcp.mail.archive_x" in done.stdout
    assert "any other tool ask for mcp.mail.tool" in done.stdout
    [warning] = [line for line in done.stderr.splitlines() if "warning" in line]
    assert "'refund' ask for billing.refund: no route matches it" in warning
    assert "no_route" in warning

    # Without a URL it says the routes were not checked, and asks nothing.
    offline = check(tmp_path, {k: v for k, v in env.items() if k != "SIGNOFF_API_KEY"})
    assert offline.returncode == 0 and "routes: not checked" in offline.stdout


def test_the_route_answer_is_the_tenants_own(deployment: Deployment) -> None:
    async def ask(key: str, capability: str) -> object:
        async with SignoffClient(deployment.url, key) as signoff:
            return await signoff.route(capability)

    # acme has no route for it; globex routes everything ("*") to dave.
    assert asyncio.run(ask(API_KEYS["acme"], "billing.refund")) is None
    assert asyncio.run(ask(API_KEYS["globex"], "billing.refund")) == {
        "capability": "*",
        "approvers": ["dave"],
        "required_approvals": 1,
    }
    assert asyncio.run(ask(API_KEYS["acme"], "mcp.mail.send_email"))["capability"] == "mcp.*"


def test_the_example_config_routes_what_the_example_policy_asks() -> None:
    directory = load_config(ROOT / "config" / "signoff.example.toml").directory()
    policy = load_policy(ROOT / "examples" / "mcp" / "policy.toml")
    asked = [probe.capability for probe in probes(policy)]
    assert asked == ["payments.refund", "mcp.shop.tool"]
    for capability in asked:
        directory.route_for("acme", capability)  # NoRoute if the first gated call would fail
