"""signoff-mcp as the MCP tests run it (tests/frameworks/test_mcp_gateway*.py): a gateway
deployment under test, on stdio or streamable HTTP, and what its upstream executed."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

from tests.support import prefork

UPSTREAM = Path(__file__).parents[1] / "frameworks" / "mcp_upstream.py"
META = "signoff/approval"


@dataclass
class Gateway:
    """One signoff-mcp deployment under test: how the agent connects, how it is killed and
    started again, and what the upstream actually executed."""

    transport: str
    tmp: Path
    env: dict[str, str]
    calls: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    url: str | None = None
    upstream_url: str | None = None

    def serve_args(self) -> list[str]:
        return ["-m", "signoff_client.mcp.cli", "serve", "--policy", str(self.tmp / "policy.toml")]

    def start(self) -> None:
        """Streamable HTTP: start the gateway process (stdio: the client launches it)."""
        if self.transport == "stdio":
            return
        if self.upstream_url is None:
            self.upstream_url = (
                self._spawn(
                    [str(UPSTREAM), str(self.calls), "--port", "0"],
                    "upstream",
                    r"Uvicorn running on (http://127\.0\.0\.1:\d+)",
                )
                + "/mcp"
            )
        self.url = self._spawn(
            [*self.serve_args(), "--transport", "streamable-http", "--port", "0",
             "--upstream-url", self.upstream_url],
            "gateway",
            r"signoff-mcp listening on (http://\S+)",
        )  # fmt: skip

    def _spawn(self, args: list[str], name: str, ready: str) -> str:
        log = self.tmp / f"{name}-{len(self.procs)}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [prefork.python(), *args], cwd=self.tmp, env=self.env, stdout=out, stderr=out
            )
        self.procs.append(proc)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            found = re.search(ready, log.read_text("utf-8", "replace"))
            if found:
                return found.group(1)
            assert proc.poll() is None, f"{name} exited:\n{log.read_text()}"
            time.sleep(0.05)
        raise AssertionError(f"{name} did not start:\n{log.read_text()}")

    @contextlib.asynccontextmanager
    async def agent(self) -> AsyncIterator[Client]:
        """An MCP client session with the gateway. Leaving it after kill9 is not an error."""
        if self.transport == "stdio":
            params = StdioServerParameters(
                command=prefork.python(),
                args=[*self.serve_args(), "--", prefork.python(), str(UPSTREAM), str(self.calls)],
                env=self.env,
                cwd=self.tmp,
            )
            client = Client(params, mode="legacy")
        else:
            assert self.url
            client = Client(self.url)
        entered = False
        try:
            async with client:
                entered = True
                yield client
        except Exception:
            if not entered or self._alive():
                raise

    def _alive(self) -> bool:
        return bool(_gateway_pids()) if self.transport == "stdio" else self.procs[-1].poll() is None

    def kill9(self) -> None:
        """SIGKILL the gateway process, wherever it runs."""
        if self.transport == "stdio":
            pids = _gateway_pids()
            assert len(pids) == 1, pids
            os.kill(pids[0], signal.SIGKILL)
        else:
            self.procs[-1].send_signal(signal.SIGKILL)
            self.procs[-1].wait(10)

    def executed(self, tool: str = "send_email") -> list[dict[str, Any]]:
        if not self.calls.exists():
            return []
        lines = self.calls.read_text("utf-8").splitlines()
        return [c["arguments"] for c in map(json.loads, lines) if c["tool"] == tool]

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


def _gateway_pids() -> list[int]:
    """This test process's children that are a stdio gateway (the mcp client spawned them)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
            if ppid == os.getpid() and b"signoff_client.mcp.cli" in cmdline:
                found.append(int(entry.name))
    return found
