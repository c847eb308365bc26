"""A decision webhook from a real `signoff serve` verifies in another language with that
language's Standard Webhooks library: examples/verify_webhook.js on Node.js with the
`standardwebhooks` npm package (installed from the npm registry into a temporary folder)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from signoff_client import SignoffClient, new_secret
from tests.support.agent_deployment import Deployment
from tests.support.cli import REPO_ROOT

NODE, NPM = shutil.which("node"), shutil.which("npm")


@pytest.fixture(scope="session")
def node_modules(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if NODE is None or NPM is None:
        pytest.skip("Node.js and npm are not installed")
    folder = tmp_path_factory.mktemp("npm")
    subprocess.run(
        [NPM, "install", "--silent", "--no-audit", "--no-fund", "standardwebhooks@1"],
        cwd=folder, check=True, timeout=180,
    )  # fmt: skip
    return folder / "node_modules"


async def test_a_webhook_verifies_with_the_javascript_library(
    deployment: Deployment, node_modules: Path, tmp_path: Path
) -> None:
    async with SignoffClient(deployment.url, deployment.api_key) as client:
        record = await client.request(
            run_id="js-1",
            capability="tools.echo",
            tool={"name": "echo", "arguments": {"text": "Zoë €"}},
            presentation={"title": "Echo"},
            requested_by="agent",
        )
    await deployment.approve_async(record.id, record.hash)
    deployment.hooks.wait_for(lambda _: deployment.webhooks_for(record.id))
    [delivery] = deployment.webhooks_for(record.id)
    (tmp_path / "body").write_bytes(delivery.body)
    (tmp_path / "headers.json").write_text(
        json.dumps({k.lower(): v for k, v in delivery.headers.items()})
    )

    def node(secret: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [NODE or "node", str(REPO_ROOT / "examples" / "verify_webhook.js"),
             str(tmp_path / "body"), str(tmp_path / "headers.json")],
            capture_output=True, text=True, timeout=30,
            env={**os.environ, "NODE_PATH": str(node_modules),
                 "SIGNOFF_WEBHOOK_SECRET": secret},
        )  # fmt: skip

    verified = node(deployment.webhook_secret)
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.split() == [delivery.delivery_id, "approved"]
    refused = node(new_secret())
    assert refused.returncode == 1
    assert "does not verify" in refused.stderr
