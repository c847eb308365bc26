"""The container image, built and run for real: `.ci/run` runs this after the test suite.

There is no registry to pull a base image from here, so the check makes one: Debian bookworm
with python3 (`mmdebstrap`, from Debian's mirror), imported into Podman and passed to the
Containerfile as its BASE. It then builds the image (the dependencies come from PyPI) and,
on a volume:

1. runs it, waits for /healthz and the image's own HEALTHCHECK, and checks that the server
   is PID 1 and not root;
2. over HTTP, as an agent, creates three requests: one decided in the web inbox (signed in
   with a link that `signoff web login`, run by `podman exec`, prints), one approved with the
   CLI in the container and then claimed and completed through the API, one left pending;
3. keeps creating requests while `podman stop` sends SIGTERM, and checks that the server
   drained and exited 0 well before the stop timeout (a SIGKILL would show as 137);
4. starts a new container on the same volume and finds every request it acknowledged,
   unchanged, and `signoff audit verify` passing;
5. on PostgreSQL (the host's, as the test suite uses it): `db upgrade`, then `serve`, as
   compose.yaml runs them, a request approved, and SIGTERM.

The base is cached in ~/.cache/signoff-container (its key covers what it is made from), so
only the first run pays for mmdebstrap. The container runtime is probed first: where the
default one cannot start a container (crun refuses cgroup v1 "hybrid" hosts; a host without
CAP_SYS_RESOURCE cannot raise a container's rlimits), the next that can is used, and what
failed is printed. If none can, the image is still built (`--isolation chroot`) and the
check fails saying why nothing could run.

Usage: python3 scripts/container_check.py [--clean]
Needs podman, mmdebstrap (and uidmap, runc) from apt; runs as root. Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import http.cookiejar
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
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
SUITE = "bookworm"
MIRROR = os.environ.get("SIGNOFF_CHECK_MIRROR", "http://deb.debian.org/debian")
PACKAGES = ["python3", "python3-venv", "ca-certificates"]
# Local CAs the host trusts (a TLS-inspecting proxy's, say) go into the base too, or pip in
# the build could not reach PyPI where the host can.
LOCAL_CAS = Path("/usr/local/share/ca-certificates")
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "signoff-container"
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


# -- the base image ------------------------------------------------------------------------


def base_image() -> str:
    """The Debian base as a Podman image, made (or imported from the cache) when missing."""
    cas = sorted(LOCAL_CAS.glob("*.crt")) if LOCAL_CAS.is_dir() else []
    recipe = json.dumps([SUITE, MIRROR, PACKAGES, [p.read_bytes().hex() for p in cas], 1])
    key = hashlib.sha256(recipe.encode()).hexdigest()[:12]
    name = f"localhost/signoff-check-base:{key}"
    if run(["podman", "image", "exists", name], check=False, quiet=True).returncode == 0:
        log(f"base {name}: in Podman's storage already")
        return name
    CACHE.mkdir(parents=True, exist_ok=True)
    tarball = CACHE / f"base-{SUITE}-{key}.tar"
    if not tarball.exists():
        started = time.monotonic()
        hooks = ['--customize-hook=mkdir -p "$1/usr/local/share/ca-certificates"']
        hooks += [f"--customize-hook=copy-in {ca} /usr/local/share/ca-certificates/" for ca in cas]
        hooks += ['--customize-hook=chroot "$1" update-ca-certificates --fresh >/dev/null']
        partial = tarball.with_suffix(".partial.tar")
        run(["mmdebstrap", "--variant=minbase", "--include=" + ",".join(PACKAGES),
             "--aptopt=Acquire::Retries \"5\"",
             "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
             "--dpkgopt=path-exclude=/usr/share/locale/*", *hooks,
             SUITE, str(partial), MIRROR], timeout=1200)  # fmt: skip
        partial.rename(tarball)
        log(f"base made by mmdebstrap in {time.monotonic() - started:.0f} s ({tarball})")
    # pip in a virtualenv trusts its own certificate list unless told to use the system's,
    # where update-ca-certificates put the local CAs.
    run(["podman", "import", "--change", "CMD [\"/bin/bash\"]",
         "--change", "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt",
         str(tarball), name], timeout=600)  # fmt: skip
    return name


# -- which runtime can start a container here -----------------------------------------------


def runtime_flags(base: str) -> tuple[list[str], list[str], list[str]]:
    """(global flags, run/build flags, failures): the first way of running a container that
    works here, from Podman's defaults down; empty flags and the failures if none does."""
    # Podman asks for more open files and processes than this shell may have; raising a
    # limit needs CAP_SYS_RESOURCE, lowering one needs nothing. So: this shell's own limits.
    files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    processes = min(4096, resource.getrlimit(resource.RLIMIT_NPROC)[0])
    lowered = [f"--ulimit=nofile={files}:{files}", f"--ulimit=nproc={processes}:{processes}"]
    # crun (Debian's default) refuses a cgroup v1 host whose cgroup v2 tree has controllers.
    runtimes = [[]] + [[f"--runtime={r}"] for r in ("runc", "crun") if shutil.which(r)]
    failures: list[str] = []
    for global_flags in runtimes:
        for limits in ([], lowered):
            done = run(["podman", *global_flags, "run", "--rm", *limits, base, "true"],
                       check=False, timeout=120)  # fmt: skip
            tried = " ".join(["podman", *global_flags, "run", *limits]) or "defaults"
            if done.returncode == 0:
                log(f"containers run here with: {tried}")
                return global_flags, limits, failures
            failures.append(f"{tried}: {done.stderr.strip().splitlines()[-1:]}")
            log(f"cannot run with {tried}: {done.stderr.strip()}")
    return [], [], failures


def _image_id(name: str) -> str | None:
    done = run(["podman", "image", "inspect", "--format", "{{.Id}}", name], check=False, quiet=True)
    return done.stdout.strip() or None


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clean", action="store_true", help="remove the built image after")
    options = parser.parse_args()
    if os.geteuid() != 0:
        print("container_check.py runs Podman as root (rootful); run it as root", file=sys.stderr)
        return 2
    started = time.monotonic()
    times: dict[str, float] = {}

    def lap(name: str, since: float) -> float:
        now = time.monotonic()
        times[name] = now - since
        return now

    tag = uuid.uuid4().hex[:8]
    try:
        base = base_image()
        mark = lap("base", started)
        global_flags, limits, failures = runtime_flags(base)
        can_run = bool(global_flags or limits) or not failures
        mark = lap("probe", mark)
        isolation = [] if can_run else ["--isolation=chroot"]
        build = ["podman", *global_flags, "build", "--format", "docker", "--build-arg",
                 f"BASE={base}", *limits, *isolation, "--tag", IMAGE, "--file",
                 str(REPO / "Containerfile"), str(REPO)]  # fmt: skip
        previous = _image_id(IMAGE)
        run(build, timeout=1200, stream=True)
        if previous and previous != _image_id(IMAGE):  # the image this one replaces
            run(["podman", "image", "rm", previous], check=False, quiet=True)
        inspected = json.loads(run(["podman", "image", "inspect", IMAGE], quiet=True).stdout)[0]
        config = inspected["Config"]
        expect(config.get("User") == "10001:10001", "the image runs as uid 10001, not root")
        expect(config.get("Entrypoint") == ["signoff"], "its entrypoint is `signoff`, exec form")
        # Podman reports it beside Config, Docker inside it.
        healthcheck = inspected.get("Healthcheck") or config.get("Healthcheck") or {}
        expect("/healthz" in " ".join(healthcheck.get("Test", [])), "it checks /healthz")
        expect("/var/lib/signoff" in config.get("Volumes", {}), "/var/lib/signoff is a volume")
        log(f"image {IMAGE}: {inspected['Size'] / 1e6:.0f} MB")
        mark = lap("build", mark)
        if not can_run:
            raise CheckFailed("the image builds, but no container can run here:\n  "
                              + "\n  ".join(failures))  # fmt: skip
        podman = Podman(global_flags, limits, tag)
        with tempfile.TemporaryDirectory(prefix="signoff-container-check-") as workdir:
            os.chmod(workdir, 0o755)
            sqlite_scenario(podman, Path(workdir))
            mark = lap("sqlite", mark)
            url = os.environ.get("SIGNOFF_TEST_POSTGRES_URL")
            if url:
                postgres_scenario(podman, Path(workdir), url)
                mark = lap("postgres", mark)
            else:
                log("SIGNOFF_TEST_POSTGRES_URL is not set: the PostgreSQL run is skipped")
    except (CheckFailed, subprocess.TimeoutExpired) as failure:
        log(f"FAILED: {failure}")
        return 1
    finally:
        if options.clean:
            run(["podman", "image", "rm", "--force", IMAGE], check=False, quiet=True)
        summary = ", ".join(f"{k} {v:.0f} s" for k, v in times.items())
        log(f"took {time.monotonic() - started:.0f} s ({summary})")
    log("PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
