"""Running `signoff serve` (and `worker`) as processes of their own, talking to them over real
HTTP, and a webhook receiver the tests start on loopback.

`ServerProcess` starts the server on port 0 (forked from a process that has imported signoff
already: tests/support/forked_cli.py) and reads the bound port from its "signoff listening
on" line in its stderr; `kill9()` is a real SIGKILL. `Api` is a small synchronous HTTP
client (urllib) for the agent API. `WebhookReceiver` is an aiohttp server in its own thread
that records every delivery (headers and raw body) and can be told to fail or to hang.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from aiohttp import web

from tests.support import forked_cli
from tests.support.cli import REPO_ROOT, Cli, base_env, config_with, to_toml
from tests.support.samples import request_body

API_KEYS = {"acme": "acme-test-key", "globex": "globex-test-key"}
# The tenants' backends' keys for minting embed tokens (never an agent's API key).
EMBED_KEYS = {"acme": "acme-test-embed-key", "globex": "globex-test-embed-key"}
# A Standard Webhooks secret (whsec_ and base64 of 32 bytes), as `signoff webhook-secret` makes.
WEBHOOK_SECRET = "whsec_MfKQ9r8GKYqrTYlQX7VZ1h0QkCBqRy1n0eBd9CWr0ds="
START_TIMEOUT = 30.0
# The startup log line (text or JSON format) that names the bound port.
_LISTENING = re.compile(r"signoff listening on http://[^\s:]+:(\d+)")


def service_config(database_url: str, webhook_url: str, **sections: Any) -> dict[str, Any]:
    """TEST_CONFIG with API keys and a webhook for acme, port 0, and fast background loops
    (the outbox polls every 0.1 s, the sweeper every 0.2 s), and the create gate opened wide
    (these tests send creates at once on a loaded machine to test other things; the gate has
    its own tests, tests/integration/test_admission.py); `sections` override any table."""
    config = config_with(
        database_url,
        server={"listen": "127.0.0.1:0", "max_creates_in_flight": 1000, "create_lag_limit": 10},
        outbox={"poll_interval": 0.1, "backoff_base": "1s", "lease": "60s"},
        sweeper={"interval": 0.2},
        tenants=[
            {
                "name": "acme",
                "api_key_env": "SIGNOFF_ACME_API_KEY",
                "embed_key_env": "SIGNOFF_ACME_EMBED_KEY",
                "webhook_url": webhook_url,
                "webhook_secret_env": "SIGNOFF_ACME_WEBHOOK_SECRET",
            },
            {
                "name": "globex",
                "api_key_env": "SIGNOFF_GLOBEX_API_KEY",
                "embed_key_env": "SIGNOFF_GLOBEX_EMBED_KEY",
            },
        ],
    )
    for name, value in sections.items():
        # A table is merged into the default's; an array of tables (routes) replaces it.
        config[name] = value if isinstance(value, list) else {**config.get(name, {}), **value}
    return config


def service_env(config_path: Path) -> dict[str, str]:
    return base_env(
        SIGNOFF_CONFIG=str(config_path),
        SIGNOFF_ACME_API_KEY=API_KEYS["acme"],
        SIGNOFF_GLOBEX_API_KEY=API_KEYS["globex"],
        SIGNOFF_ACME_EMBED_KEY=EMBED_KEYS["acme"],
        SIGNOFF_GLOBEX_EMBED_KEY=EMBED_KEYS["globex"],
        SIGNOFF_ACME_WEBHOOK_SECRET=WEBHOOK_SECRET,
    )


def write_config(path: Path, config: Mapping[str, Any]) -> Path:
    path.write_text(to_toml(config), "utf-8")
    return path


@dataclass
class ServerProcess:
    """One `signoff serve` (or `worker`) subprocess."""

    config_path: Path
    cwd: Path
    command: str = "serve"
    extra_env: dict[str, str] = field(default_factory=dict)
    args: tuple[str, ...] = ()  # after the command, e.g. ("--log-format", "json")
    proc: forked_cli.ForkedProcess | None = None
    _log_file: Path = field(default=Path(), repr=False)
    _reader: TextIO | None = field(default=None, repr=False)
    _reading: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _partial: str = field(default="", repr=False)
    port: int | None = None
    _lines: list[str] = field(default_factory=list)

    def start(self, *, ready: bool = True) -> ServerProcess:
        """Start it and, with `ready`, wait until it says it listens (or runs)."""
        env = {**service_env(self.config_path), **self.extra_env}
        args = list(self.args)
        if self.command == "serve" and "--workers" not in args:
            # One process, so a test's kill9() or log reading sees the whole server; the
            # worker tests (test_workers.py, test_background_process.py) ask for more.
            args += ["--workers", "1"]
        if self.command == "serve" and not any("background-process" in a for a in args):
            args += ["--no-background-process"]
        fd, name = tempfile.mkstemp(prefix=f"signoff-{self.command}-", suffix=".log")
        os.close(fd)
        self._log_file = Path(name)
        self.proc = forked_cli.ForkedProcess(
            forked_cli.start(
                [self.command, *args],
                str(self.cwd),
                env,
                os.devnull,
                str(self._log_file),
                server=True,
            )
        )
        started = threading.Event()
        threading.Thread(target=self._drain, args=(started,), daemon=True).start()
        if not ready:
            return self
        if not started.wait(START_TIMEOUT) or self.proc.poll() is not None:
            self.proc.kill()
            raise AssertionError(f"signoff {self.command} did not start:\n{self.log}")
        return self

    def _drain(self, ready: threading.Event) -> None:
        """Follow the server's stderr as it writes it until it has ended."""
        assert self.proc is not None
        with open(self._log_file, encoding="utf-8", errors="replace") as self._reader:
            while True:
                ended = self.proc.poll() is not None
                for line in self._read_more(final=ended):
                    if match := _LISTENING.search(line):
                        self.port = int(match.group(1))
                        ready.set()
                    elif self.command == "worker" and "signoff worker running" in line:
                        ready.set()
                if ended:
                    break
                time.sleep(0.02)
        self._log_file.unlink()
        ready.set()  # the process ended: let start() report it

    def _read_more(self, *, final: bool = False) -> list[str]:
        """The whole lines written since the last read (and, when `final`, the rest)."""
        with self._reading:
            if self._reader is None or self._reader.closed:
                return []
            self._partial += self._reader.read()
            lines = self._partial.splitlines(keepends=True)
            self._partial = ""
            if lines and not lines[-1].endswith("\n") and not final:
                self._partial = lines.pop()
            self._lines.extend(lines)
            return lines

    @property
    def log(self) -> str:
        """Everything the server has written to stderr so far."""
        self._read_more()
        return "".join(self._lines)

    @property
    def url(self) -> str:
        assert self.port is not None
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def api(self, tenant: str = "acme") -> Api:
        return Api(self.url, API_KEYS[tenant])

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self, timeout: float = 15.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


class Fleet:
    """Every server a test starts from one config, stopped (SIGKILL if still running) when the
    block ends; when the block fails, each server's log tail is printed (pytest shows it)."""

    def __init__(
        self, config_path: Path, cwd: Path, extra_env: Mapping[str, str] | None = None
    ) -> None:
        self.config_path = config_path
        self.cwd = cwd
        self.extra_env = dict(extra_env or {})
        self.servers: list[ServerProcess] = []

    def start(
        self,
        command: str = "serve",
        *,
        args: tuple[str, ...] = (),
        json_logs: bool = False,
        ready: bool = True,
    ) -> ServerProcess:
        if json_logs:
            args = (*args, "--log-format", "json")
        server = ServerProcess(
            self.config_path, self.cwd, command=command, extra_env=dict(self.extra_env), args=args
        )
        self.servers.append(server)
        return server.start(ready=ready)

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is not None:
            for n, server in enumerate(self.servers, 1):
                print(f"--- signoff {server.command} {n} log (tail)\n{server.log[-6000:]}")
        for server in self.servers:
            server.stop()


@dataclass
class Response:
    status: int
    body: Any
    headers: Mapping[str, str]

    @property
    def error_code(self) -> str | None:
        return (self.body or {}).get("error", {}).get("code")


class Api:
    """A minimal synchronous client of the agent API, returning status and parsed body."""

    def __init__(self, base_url: str, api_key: str | None) -> None:
        self.base_url = base_url
        self.api_key = api_key

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        all_headers = {"Content-Type": "application/json", **(headers or {})}
        if self.api_key is not None:
            all_headers.setdefault("Authorization", f"Bearer {self.api_key}")
        request = urllib.request.Request(
            self.base_url + path, data=data, method=method, headers=all_headers
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return Response(response.status, _json(response.read()), dict(response.headers))
        except urllib.error.HTTPError as error:
            return Response(error.code, _json(error.read()), dict(error.headers))

    def get(self, path: str) -> Response:
        return self.call("GET", path)

    def post(self, path: str, body: Any = None) -> Response:
        return self.call("POST", path, body if body is not None else {})


def _json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return data.decode("utf-8", "replace")


@dataclass(frozen=True)
class Delivery:
    headers: dict[str, str]
    body: bytes
    at: float

    @property
    def delivery_id(self) -> str:
        return {k.lower(): v for k, v in self.headers.items()}["webhook-id"]

    def json(self) -> Any:
        return json.loads(self.body)


class WebhookReceiver:
    """A webhook endpoint on loopback, in its own thread and event loop.

    `status` is what it answers (200 by default; set 503 to play "down"); with `hang` set it
    holds every request open until released. Every request that arrived is in `deliveries`,
    whatever was answered.
    """

    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []
        self.status = 200
        self.hang = threading.Event()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0
        self._runner: web.AppRunner

    def __enter__(self) -> WebhookReceiver:
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("webhook receiver did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self.hang.clear()
        # Close the server and its keep-alive connections before the loop stops, so no
        # handler task is left pending.
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/signoff"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/hooks/signoff", self._handle)
        self._runner = runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = runner.addresses[0][1]
        self._started.set()
        self._loop.run_forever()

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        with self._lock:
            self.deliveries.append(Delivery(dict(request.headers), body, time.time()))
        # `hang` is set and cleared from the test's thread: poll it (an asyncio.Event belongs
        # to one loop).
        while self.hang.is_set():  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        return web.Response(status=self.status, text="ok" if self.status < 300 else "down")

    def snapshot(self) -> list[Delivery]:
        with self._lock:
            return list(self.deliveries)

    def wait_for(self, predicate: Any, timeout: float = 30.0) -> list[Delivery]:
        """Wait until predicate(deliveries) is true; returns the deliveries then."""
        deadline = time.monotonic() + timeout
        while True:
            seen = self.snapshot()
            if predicate(seen):
                return seen
            if time.monotonic() > deadline:
                raise AssertionError(f"webhook condition not met in {timeout} s; got {seen!r}")
            time.sleep(0.05)


def wait_until(predicate: Any, timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout} s")
        time.sleep(0.05)


__all__ = [
    "API_KEYS",
    "EMBED_KEYS",
    "REPO_ROOT",
    "WEBHOOK_SECRET",
    "Api",
    "Delivery",
    "ServerProcess",
    "WebhookReceiver",
    "service_config",
    "service_env",
    "wait_until",
    "write_config",
]


def create(api: Api, run_id: str) -> dict[str, Any]:
    """A payments request through the agent API (routed to group finance); the record."""
    created = api.post("/v1/approvals", request_body(run_id=run_id))
    assert created.status == 201, created
    record: dict[str, Any] = created.body
    assert (record["state"], record["assignee"]) == ("pending", "group:finance"), record
    return record


def wait_state(api: Api, approval_id: str, state: str) -> dict[str, Any]:
    """Poll the API until the approval is in `state`; the record."""

    def reached() -> dict[str, Any] | None:
        got = api.get(f"/v1/approvals/{approval_id}")
        assert got.status == 200, got
        return got.body if got.body["state"] == state else None

    record: dict[str, Any] = wait_until(reached, 10, f"approval {approval_id} {state}")
    return record


def deploy(tmp_path: Path, db_url: str, hooks: WebhookReceiver, **sections: Any) -> Fleet:
    """A fleet of servers from one config in `tmp_path`: `db_url`, webhooks to `hooks`, and
    `sections` over the defaults (service_config)."""
    config = service_config(db_url, hooks.url, **sections)
    return Fleet(write_config(tmp_path / "signoff.toml", config), tmp_path)


def cli_for(fleet: Fleet) -> Cli:
    """The CLI as the fleet's operator runs it: its config, its directory."""
    return Cli(cwd=fleet.cwd, env=service_env(fleet.config_path))
