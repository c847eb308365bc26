"""`pip install ./clients/python` into an empty virtual environment, as an agent's project would:
it brings aiohttp, rfc8785 and standardwebhooks and nothing of the server (no SQLAlchemy,
slack-bolt or python-telegram-bot), and the installed package talks to a running server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.agent_deployment import Deployment
from tests.support.cli import REPO_ROOT

SERVER_DISTRIBUTIONS = {
    "signoff", "sqlalchemy", "alembic", "asyncpg", "aiosqlite", "slack-bolt", "slack-sdk",
    "python-telegram-bot", "pydantic", "prometheus-client",
}  # fmt: skip

# The agent program, run by the new environment's interpreter. It also names every
# distribution installed there (what `pip list` would print, without a pip process more).
AGENT = """
import asyncio, json, sys
from importlib import metadata
import signoff_client

async def main(url, key):
    async with signoff_client.SignoffClient(url, key) as client:
        record = await client.request(
            run_id="installed-1", capability="tools.echo", requested_by="agent",
            tool={"name": "echo", "arguments": {"text": "hi"}},
            presentation={"title": "Echo hi"},
        )
        again = await client.get(record.id)
        print(json.dumps({
            "state": again.state, "hash_ok": signoff_client.record_hash(again) == again.hash,
            "file": signoff_client.__file__,
            "installed": sorted({d.metadata["Name"] for d in metadata.distributions()}),
        }))

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def test_the_client_installs_alone_and_talks_to_a_server(
    tmp_path: Path, deployment: Deployment
) -> None:
    venv = tmp_path / "agent-venv"
    # Without a pip of its own (bootstrapping one costs more than the rest of the test): this
    # environment's pip installs into it (`--python`).
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    pip = [sys.executable, "-m", "pip", "--python", python]
    subprocess.run(
        [*pip, "install", "-q", str(REPO_ROOT / "clients" / "python")],
        check=True,
        cwd=tmp_path,  # not the repository: nothing of the server is importable from here
    )
    ran = subprocess.run(
        [python, "-c", AGENT, deployment.url, deployment.api_key],
        capture_output=True, text=True, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    answer = json.loads(ran.stdout)
    installed = {name.lower().replace("_", "-") for name in answer["installed"]}
    assert {"signoff-client", "aiohttp", "rfc8785", "standardwebhooks"} <= installed
    assert installed & SERVER_DISTRIBUTIONS == set()
    assert answer["state"] == "pending" and answer["hash_ok"]
    assert answer["file"].startswith(str(venv))  # the installed copy, not the checkout's
