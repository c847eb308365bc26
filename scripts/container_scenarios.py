"""What scripts/container_check.py does with the image once it is built: the containers it
runs, the requests it makes of them over HTTP and with `podman exec`, and what it expects.

Standard library only (it runs on the host's python3, with no virtualenv)."""

from __future__ import annotations

import http.cookiejar
import json
import re
import shlex
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
IMAGE = "localhost/signoff-check:latest"
API_KEY = "container-check-key"
WEB_SECRET = "container-check-web-session-secret-0123456789"
STOP_TIMEOUT = 30  # podman stop's grace period; the drain takes at most 8 s
CONFIG = """
[server]
public_url = "http://127.0.0.1:8700"

[web]
secret_env = "SIGNOFF_WEB_SECRET"

[[tenants]]
name = "acme"
api_key_env = "SIGNOFF_ACME_API_KEY"

[principals.alice]
name = "Alice Ng"
operator = true

[principals.bob]
name = "Bob Stone"

[groups.finance]
members = ["alice", "bob"]

[[routes]]
tenant = "acme"
capability = "payments.*"
approvers = ["group:finance"]
notify = ["web"]
approval_ttl = "72h"
grant_ttl = "24h"
"""


class CheckFailed(Exception):
    pass


def log(message: str) -> None:
    print(f"[container-check {time.strftime('%H:%M:%S')}] {message}", flush=True)


def run(
    args: list[str],
    *,
    timeout: float = 120,
    check: bool = True,
    quiet: bool = False,
    stream: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run a command; its output captured, or with `stream` passed through to this log."""
    if not quiet:
        log("$ " + " ".join(args))
    sys.stdout.flush()
    done = subprocess.run(args, capture_output=not stream, text=True, timeout=timeout)
    if check and done.returncode != 0:
        said = "" if stream else f"{done.stdout[-3000:]}{done.stderr[-3000:]}"
        raise CheckFailed(f"{' '.join(args[:4])}... exited {done.returncode}:\n{said}")
    return done


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise CheckFailed(what)
    log(f"ok: {what}")


# -- HTTP, as an agent and as a browser -----------------------------------------------------


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None  # a 303 is the answer the check looks at, not a page to fetch


class Http:
    """The agent API with the tenant's key, and one browser's cookie jar, on one server."""

    def __init__(self, base: str, key: str) -> None:
        self.base, self.key = base, key
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()), _NoRedirects
        )

    def _send(self, request: urllib.request.Request, timeout: float = 10) -> tuple[int, str]:
        try:
            with self.opener.open(request, timeout=timeout) as response:
                return response.status, response.read().decode("utf-8")
        except urllib.error.HTTPError as error:  # 4xx, 5xx and the unfollowed 303
            return error.code, error.read().decode("utf-8", "replace")

    def post_json(self, path: str, body: object) -> tuple[int, dict]:
        data = b"" if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base + path,
            data=data,
            method="POST",
            headers={"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"},
        )
        status, text = self._send(request)
        return status, json.loads(text) if text.startswith("{") else {}

    def get_json(self, path: str, allow: tuple[int, ...] = ()) -> dict:
        request = urllib.request.Request(
            self.base + path, headers={"Authorization": f"Bearer {self.key}"}
        )
        status, text = self._send(request)
        if status != 200 and status not in allow:
            raise CheckFailed(f"GET {path}: {status} {text[:300]}")
        return json.loads(text) if status == 200 else {}

    def get(self, path: str) -> tuple[int, str]:
        return self._send(urllib.request.Request(self.base + path))

    def form(self, path: str, fields: dict[str, str]) -> tuple[int, str]:
        data = urllib.parse.urlencode(fields).encode()
        return self._send(urllib.request.Request(self.base + path, data=data, method="POST"))


def wait_healthy(http: Http, logs: Callable[[], str], path: str = "/healthz") -> None:
    deadline = time.monotonic() + 120
    while True:
        try:
            if http.get(path)[0] == 200:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise CheckFailed(f"{path} did not answer 200 within 120 s; the log:\n{logs()}")
        time.sleep(0.5)


# -- the scenario ---------------------------------------------------------------------------


class Podman:
    def __init__(self, global_flags: list[str], limits: list[str], tag: str) -> None:
        self.global_flags, self.limits, self.tag = global_flags, limits, tag
        self.containers: list[str] = []

    def __call__(self, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return run(["podman", *self.global_flags, *args], **kwargs)

    def start(self, name: str, *args: str) -> str:
        name = f"signoff-check-{self.tag}-{name}"
        self.containers.append(name)
        self("run", "--detach", "--name", name, *self.limits, *args)
        return name

    def exec(self, name: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self("exec", name, *args, check=check)

    def logs(self, name: str) -> str:
        done = self("logs", name, check=False, quiet=True)
        return done.stdout + done.stderr

    def port(self, name: str) -> int:
        mapped = self("port", name, "8700/tcp").stdout.strip().splitlines()[0]
        return int(mapped.rsplit(":", 1)[1])

    def stop(self, name: str) -> tuple[float, int]:
        """`podman stop` (SIGTERM, then SIGKILL after STOP_TIMEOUT): seconds taken, exit code."""
        started = time.monotonic()
        self("stop", "--time", str(STOP_TIMEOUT), name, timeout=STOP_TIMEOUT + 60)
        took = time.monotonic() - started
        code = self("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
        return took, int(code)

    def cleanup(self) -> None:
        for name in self.containers:
            self("rm", "--force", "--volumes", "--time", "0", name, check=False, quiet=True)


def new_request(capability: str = "payments.refund", amount: int = 12000) -> dict[str, object]:
    return {
        "run_id": f"container-check-{uuid.uuid4()}",
        "capability": capability,
        "tool": {"name": "stripe.refunds.create",
                 "arguments": {"charge": "ch_3PqK2L", "amount": amount, "currency": "eur"}},
        "presentation": {"title": f"Refund {amount / 100:.2f} EUR", "summary": "container check"},
        "requested_by": "support-agent",
    }  # fmt: skip


def decide_in_the_web_inbox(podman: Podman, name: str, http: Http, approval: dict) -> None:
    """Sign in as alice with a link `signoff web login` prints, press Approve on the card."""
    printed = podman.exec(name, "signoff", "web", "login", "--as", "alice").stdout
    token = re.search(r"/web/login/(\S+)", printed)
    expect(token is not None, f"`signoff web login` printed a sign-in link ({printed.strip()!r})")
    assert token is not None
    status, _ = http.form(f"/web/login/{token.group(1)}", {})
    expect(status == 303, f"the sign-in link signs alice in (303, got {status})")
    status, page = http.get(f"/web/approvals/{approval['id']}")
    form = re.search(r'action="/web/approvals/[^"]+/approve">(.*?)</form>', page, re.S)
    expect(status == 200 and form is not None, "alice's card shows an Approve form")
    assert form is not None
    fields = dict(re.findall(r'name="(csrf|hash)" value="([^"]*)"', form.group(1)))
    expect(fields.get("hash") == approval["hash"], "the card carries the request's hash")
    fields["note"] = "approved in the web inbox of the container"
    status, _ = http.form(f"/web/approvals/{approval['id']}/approve", fields)
    expect(status == 303, f"pressing Approve redirects to the result (303, got {status})")


def create_while_stopping(http: Http, podman: Podman, name: str) -> tuple[list[dict], float, int]:
    """Agents keep creating requests while the container is stopped: (acknowledged records,
    seconds the stop took, exit code)."""
    acknowledged: list[dict] = []
    stopping = threading.Event()
    done = threading.Event()

    def agent() -> None:
        while not done.is_set():
            try:
                status, body = http.post_json("/v1/approvals", new_request(amount=15000))
            except OSError:  # refused or reset once the server closed its socket
                if stopping.is_set():
                    return
                time.sleep(0.05)
                continue
            if status == 201:
                acknowledged.append(body)

    agents = [threading.Thread(target=agent, daemon=True) for _ in range(4)]
    for thread in agents:
        thread.start()
    deadline = time.monotonic() + 60
    while len(acknowledged) < 20 and time.monotonic() < deadline:
        time.sleep(0.1)
    expect(len(acknowledged) >= 20, f"creates succeed under load ({len(acknowledged)} so far)")
    stopping.set()
    took, code = podman.stop(name)
    done.set()
    for thread in agents:
        thread.join(30)
    return acknowledged, took, code


def sqlite_scenario(podman: Podman, workdir: Path) -> None:
    config = workdir / "signoff.toml"
    config.write_text(CONFIG, encoding="utf-8")
    config.chmod(0o644)
    volume = f"signoff-check-{podman.tag}"
    podman("volume", "create", volume)
    try:
        _on_volume(podman, volume, config)
    finally:
        podman.cleanup()
        podman("volume", "rm", "--force", volume, check=False, quiet=True)


def _on_volume(podman: Podman, volume: str, config: Path) -> None:
    args = ["--publish", "127.0.0.1::8700", "--volume", f"{volume}:/var/lib/signoff",
            "--volume", f"{config}:/etc/signoff/signoff.toml:ro",
            "--env", f"SIGNOFF_ACME_API_KEY={API_KEY}", "--env", f"SIGNOFF_WEB_SECRET={WEB_SECRET}",
            IMAGE]  # fmt: skip
    first = podman.start("first", *args)
    http = Http(f"http://127.0.0.1:{podman.port(first)}", API_KEY)
    wait_healthy(http, lambda: podman.logs(first))
    log("serving: " + podman.logs(first).strip().splitlines()[-1])
    expect(podman.exec(first, "id", "-u").stdout.strip() == "10001", "the server runs as uid 10001")
    pid1 = podman.exec(first, "cat", "/proc/1/cmdline").stdout.replace("\0", " ")
    expect("signoff serve" in pid1, f"PID 1 is the server itself, no shell ({pid1.strip()!r})")
    health = podman("healthcheck", "run", first, check=False)
    expect(health.returncode == 0, f"the image's HEALTHCHECK passes ({health.stdout.strip()})")

    records = []
    for _ in range(3):
        status, record = http.post_json("/v1/approvals", new_request())
        expect(status == 201 and record["state"] == "pending", "an agent's request is created")
        records.append(record)
    by_web, by_cli, pending = records
    decide_in_the_web_inbox(podman, first, http, by_web)
    podman.exec(first, "signoff", "approvals", "approve", by_cli["id"], "--hash", by_cli["hash"],
                "--as", "bob", "--note", "approved with the CLI in the container")  # fmt: skip
    status, claim = http.post_json(f"/v1/approvals/{by_cli['id']}/claim", None)
    expect(status == 200 and "claim_token" in claim, "the approved call is claimed")
    status, _ = http.post_json(
        f"/v1/approvals/{by_cli['id']}/complete",
        {"claim_token": claim["claim_token"], "outcome": "succeeded"},
    )
    expect(status == 200, "its outcome is reported")
    before = {r["id"]: http.get_json(f"/v1/approvals/{r['id']}") for r in records}
    expect(
        before[by_web["id"]]["state"] == "approved"
        and before[by_web["id"]]["decided_by"] == "alice",
        "the web decision is recorded",
    )
    expect(before[by_cli["id"]]["state"] == "executed", "the CLI-approved call is executed")
    expect(before[pending["id"]]["state"] == "pending", "the third request is pending")

    acknowledged, took, code = create_while_stopping(http, podman, first)
    log(f"podman stop took {took:.1f} s; exit code {code}; {len(acknowledged)} creates answered")
    logs = podman.logs(first)
    expect(code == 0, f"SIGTERM: the server exited 0 (137 is a SIGKILL); log tail:\n{logs[-800:]}")
    expect(took < STOP_TIMEOUT - 5, f"it drained in {took:.1f} s (SIGKILL at {STOP_TIMEOUT} s)")
    expect("shutting down" in logs and "Traceback" not in logs, "it logged a clean shutdown")

    second = podman.start("second", *args)
    http = Http(f"http://127.0.0.1:{podman.port(second)}", API_KEY)
    wait_healthy(http, lambda: podman.logs(second))
    after = {key: http.get_json(f"/v1/approvals/{key}") for key in before}
    expect(after == before, "after the restart on the volume the three requests are unchanged")
    missing = [
        r["id"]
        for r in acknowledged
        if http.get_json(f"/v1/approvals/{r['id']}", allow=(404,)).get("hash") != r["hash"]
    ]
    expect(not missing, f"all {len(acknowledged)} acknowledged creates survived the SIGTERM "
           f"(missing: {missing[:5]})")  # fmt: skip
    verify = podman.exec(second, "signoff", "audit", "verify", check=False)
    expect(verify.returncode == 0, f"signoff audit verify passes ({verify.stdout.strip()[-200:]})")
    took, code = podman.stop(second)
    expect(code == 0 and took < STOP_TIMEOUT - 5, f"the second one stops cleanly ({took:.1f} s)")


def postgres_scenario(podman: Podman, workdir: Path, maintenance_url: str) -> None:
    """What compose.yaml runs, against the host's PostgreSQL: `db upgrade`, then `serve`."""
    database = f"signoff_container_check_{podman.tag}"
    run(["psql", maintenance_url, "-q", "-c", f"CREATE DATABASE {database}"])
    try:
        url = re.sub(r"^postgresql(\+asyncpg)?://", "postgresql+asyncpg://", maintenance_url)
        url = url.rsplit("/", 1)[0] + f"/{database}"
        config = workdir / "signoff.toml"
        env = ["--env", f"SIGNOFF_DATABASE_URL={url}", "--env", f"SIGNOFF_ACME_API_KEY={API_KEY}",
               "--env", f"SIGNOFF_WEB_SECRET={WEB_SECRET}", "--network", "host",
               "--volume", f"{config}:/etc/signoff/signoff.toml:ro"]  # fmt: skip
        podman("run", "--rm", *podman.limits, *env, IMAGE, "db", "upgrade", timeout=300)
        name = podman.start("postgres", *env, IMAGE, "serve", "--listen", "127.0.0.1:0")
        deadline = time.monotonic() + 120
        while not (port := re.search(r"listening on http://127.0.0.1:(\d+)", podman.logs(name))):
            if time.monotonic() > deadline:
                raise CheckFailed("serve on PostgreSQL did not start:\n" + podman.logs(name))
            time.sleep(0.5)
        http = Http(f"http://127.0.0.1:{port.group(1)}", API_KEY)
        wait_healthy(http, lambda: podman.logs(name), path="/readyz")
        status, record = http.post_json("/v1/approvals", new_request())
        expect(status == 201, "on PostgreSQL an agent's request is created")
        podman.exec(name, "signoff", "approvals", "approve", record["id"], "--hash",
                    record["hash"], "--as", "alice")  # fmt: skip
        expect(
            http.get_json(f"/v1/approvals/{record['id']}")["state"] == "approved",
            "and approved with the CLI in the container",
        )
        took, code = podman.stop(name)
        expect(
            code == 0 and took < STOP_TIMEOUT - 5, f"SIGTERM on PostgreSQL: exit 0 in {took:.1f} s"
        )
        logs = podman.logs(name)
        if "and a background process" in logs:  # two cores or more: serve forked it
            drained = logs.count("signoff.app: shutting down")
            expect(drained == 2, f"the server and its background process both drained ({drained})")
    finally:
        podman.cleanup()
        drop = f"DROP DATABASE IF EXISTS {database} WITH (FORCE)"
        run(["psql", maintenance_url, "-q", "-c", drop], check=False)


def readme_scenario(podman: Podman) -> None:
    """The README's two commands ("Run it in a container") as written, but for the image's
    name, a free port and a volume of the check's own, then the walkthrough's request."""
    readme = (REPO / "README.md").read_text("utf-8")
    block = readme.split("### Run it in a container", 1)[1].split("```sh\n", 1)[1]
    build, command = block.split("```", 1)[0].strip().splitlines()
    expect(build == "podman build --format docker -t signoff .", f"README builds: {build}")
    args = shlex.split(command.replace("$PWD", str(REPO)))
    expect(args[:3] == ["podman", "run", "-d"] and args[-1] == "signoff", "README runs the image")
    volume = f"signoff-check-{podman.tag}-readme"
    swaps = {"8700:8700": "127.0.0.1::8700", "signoff-data:/var/lib/signoff":
             f"{volume}:/var/lib/signoff"}  # fmt: skip
    args = [swaps.get(arg, arg) for arg in args[3:-1]]
    name = args.pop(args.index("--name") + 1)
    args.remove("--name")
    expect(name == "signoff", "README names the container signoff, as its `podman exec` says")
    try:
        started = podman.start("readme", *args, IMAGE)
        key = args[args.index("-e") + 1].split("=", 1)[1]  # SIGNOFF_ACME_API_KEY=dev-key
        http = Http(f"http://127.0.0.1:{podman.port(started)}", key)
        wait_healthy(http, lambda: podman.logs(started))
        request = json.loads((REPO / "examples" / "refund-request.json").read_text("utf-8"))
        request["run_id"] = f"container-check-{uuid.uuid4()}"
        status, record = http.post_json("/v1/approvals", request)
        expect(status == 201, "the README's container takes the example request")
        podman.exec(started, "signoff", "approvals", "approve", record["id"], "--hash",
                    record["hash"], "--as", "alice")  # fmt: skip
        state = http.get_json(f"/v1/approvals/{record['id']}")["state"]
        expect(state == "approved", "and alice approves it with `podman exec ... signoff`")
        took, code = podman.stop(started)
        expect(code == 0, f"it stops cleanly ({took:.1f} s)")
    finally:
        podman.cleanup()
        podman("volume", "rm", "--force", volume, check=False, quiet=True)


def stopped_while_starting(podman: Podman) -> None:
    """SIGTERM before the server listens (migrating, starting): as PID 1 the process must end
    at once, not wait out `podman stop`'s timeout and die by SIGKILL (137)."""
    volume = f"signoff-check-{podman.tag}-early"
    try:
        started = podman.start(
            "early", "-e", "SIGNOFF_ACME_API_KEY=early-key", "-v", f"{volume}:/var/lib/signoff",
            "-v", f"{REPO / 'config' / 'signoff.example.toml'}:/etc/signoff/signoff.toml:ro",
            IMAGE,
        )  # fmt: skip
        time.sleep(0.5)
        took, code = podman.stop(started)
        what = f"stopped while starting: exit {code} in {took:.1f} s"
        expect(code in (0, 143) and took < 10, what)
    finally:
        podman.cleanup()
        podman("volume", "rm", "--force", volume, check=False, quiet=True)


def compose_file() -> None:
    """compose.yaml runs `db upgrade` to completion before `serve`, on PostgreSQL. (Compose
    itself does not run here: there is no postgres image to pull.)"""
    try:
        import yaml  # Debian's python3-yaml; the check goes on without it
    except ImportError:
        log("python3-yaml is not installed: compose.yaml is not read")
        return
    services = yaml.safe_load((REPO / "compose.yaml").read_text("utf-8"))["services"]
    migrate, signoff = services["migrate"], services["signoff"]
    expect(migrate["command"] == ["db", "upgrade"], "compose: migrate runs `signoff db upgrade`")
    expect(signoff["depends_on"]["migrate"]["condition"] == "service_completed_successfully",
           "compose: serve starts once the upgrade exited 0")  # fmt: skip
    url = signoff["environment"]["SIGNOFF_DATABASE_URL"]
    expect(url.startswith("postgresql+asyncpg://") and "@postgres/" in url,
           "compose: signoff's database is the postgres service")  # fmt: skip
    expect(migrate["depends_on"]["postgres"]["condition"] == "service_healthy",
           "compose: the upgrade waits for PostgreSQL to be ready")  # fmt: skip
