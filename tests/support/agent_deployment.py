"""A signoff deployment for the agent integrations' tests: `signoff serve` as a subprocess on a
real database, a webhook receiver on loopback, the humans deciding through the `signoff` CLI.

The routes add two capabilities the integrations ask for: `mcp.*` (the MCP gateway's default
capabilities are `mcp.<server>.<tool>`) and `tools.*` (the framework adapters' examples);
alice and bob may decide, edit (any argument) and answer both. Requests filed by an agent
are requested by `agent`, a principal who decides nothing.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.cli import Cli, Result
from tests.support.samples import TEST_CONFIG
from tests.support.service import (
    API_KEYS,
    WEBHOOK_SECRET,
    Delivery,
    Fleet,
    ServerProcess,
    WebhookReceiver,
    service_config,
    service_env,
    write_config,
)

AGENT_ROUTES = [
    {"tenant": "acme", "capability": "mcp.*", "approvers": ["alice", "bob"], "edits": "any"},
    {"tenant": "acme", "capability": "tools.*", "approvers": ["alice", "bob"], "edits": "any"},
]


@dataclass
class Deployment:
    """One signoff service the way an agent meets it: a URL, an API key, a webhook secret,
    the webhooks it sent, and humans who decide with the CLI."""

    fleet: Fleet
    hooks: WebhookReceiver
    server: ServerProcess
    api_key: str = API_KEYS["acme"]
    webhook_secret: str = WEBHOOK_SECRET

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def env(self) -> dict[str, str]:
        """The environment a `signoff` CLI (or an agent subprocess) of this deployment uses."""
        return service_env(self.fleet.config_path)

    def cli(self, *args: str) -> Result:
        return Cli(cwd=self.fleet.cwd, env=self.env).run(*args)

    def approve(self, approval_id: str, shown_hash: str, who: str = "alice") -> Result:
        """A human approves exactly what was shown; fails the test if refused."""
        result = self.cli("approvals", "approve", approval_id, "--hash", shown_hash, "--as", who)
        assert result.returncode == 0, str(result)
        return result

    def reject(self, approval_id: str, shown_hash: str, reason: str, who: str = "alice") -> Result:
        result = self.cli(
            "approvals", "reject", approval_id, "--hash", shown_hash, "--as", who,
            "--note", reason,
        )  # fmt: skip
        assert result.returncode == 0, str(result)
        return result

    def approve_edited(
        self,
        approval_id: str,
        shown_hash: str,
        edited_hash: str,
        who: str = "alice",
        **changes: Any,
    ) -> Result:
        """A human changes arguments (`changes`: key -> JSON value) and approves the revision
        whose hash the preview showed them (`edited_hash`)."""
        sets = [f"--set={key}={json.dumps(value)}" for key, value in changes.items()]
        result = self.cli(
            "approvals", "approve", approval_id, "--hash", shown_hash, "--as", who, *sets,
            "--edited-hash", edited_hash,
        )  # fmt: skip
        assert result.returncode == 0, str(result)
        return result

    def answer(
        self,
        approval_id: str,
        shown_hash: str,
        who: str = "alice",
        *,
        text: str | None = None,
        option: str | None = None,
    ) -> Result:
        """A human answers instead of deciding: in words (`text`) or with an option."""
        said = ["--text", text] if text is not None else ["--option", str(option)]
        result = self.cli(
            "approvals", "answer", approval_id, "--hash", shown_hash, "--as", who, *said
        )
        assert result.returncode == 0, str(result)
        return result

    async def approve_edited_async(
        self, approval_id: str, shown_hash: str, edited_hash: str, **changes: Any
    ) -> Result:
        return await asyncio.to_thread(
            lambda: self.approve_edited(approval_id, shown_hash, edited_hash, **changes)
        )

    async def answer_async(self, approval_id: str, shown_hash: str, **said: Any) -> Result:
        return await asyncio.to_thread(lambda: self.answer(approval_id, shown_hash, **said))

    async def approve_async(self, approval_id: str, shown_hash: str, who: str = "alice") -> Result:
        return await asyncio.to_thread(self.approve, approval_id, shown_hash, who)

    async def reject_async(
        self, approval_id: str, shown_hash: str, reason: str, who: str = "alice"
    ) -> Result:
        return await asyncio.to_thread(self.reject, approval_id, shown_hash, reason, who)

    def restart(self) -> ServerProcess:
        """SIGKILL the server and start a new one on the same database (a deploy)."""
        self.server.kill9()
        self.server = self.fleet.start()
        return self.server

    def webhooks_for(self, approval_id: str) -> list[Delivery]:
        return [d for d in self.hooks.snapshot() if d.json()["approval"]["id"] == approval_id]


def deployment_config(database_url: str, webhook_url: str, **sections: Any) -> dict[str, Any]:
    config = service_config(database_url, webhook_url, **sections)
    config["principals"] = {**TEST_CONFIG["principals"], "agent": {"name": "Support Agent"}}
    config["routes"] = [*AGENT_ROUTES, *config["routes"]]
    return config


def deploy(tmp_path: Path, database_url: str, **sections: Any) -> Iterator[Deployment]:
    """Start a deployment on a migrated database; stop it (and its receiver) after."""
    with WebhookReceiver() as hooks:
        config = deployment_config(database_url, hooks.url, **sections)
        with Fleet(write_config(tmp_path / "signoff.toml", config), tmp_path) as fleet:
            yield Deployment(fleet, hooks, fleet.start())
