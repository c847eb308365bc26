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
5. runs the README's "Run it in a container" command (its port and volume swapped for free
   ones) with the example config, and approves the example request in it;
6. on PostgreSQL (the host's, as the test suite uses it): `db upgrade`, then `serve`, as
   compose.yaml runs them (whose order and database it reads), a request approved, SIGTERM.

The base is cached in ~/.cache/signoff-container (its key covers what it is made from), so
only the first run pays for mmdebstrap. The container runtime is probed first: where the
default one cannot start a container (crun refuses cgroup v1 "hybrid" hosts; a host without
CAP_SYS_RESOURCE cannot raise a container's rlimits), the next that can is used, and what
failed is printed. If none can, the image is still built (`--isolation chroot`) and the
check fails saying why nothing could run.

Usage: python3 scripts/container_check.py [--clean]
Needs podman, mmdebstrap and runc from apt; runs as root. Standard library only (and
python3-yaml, if installed, to read compose.yaml).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from container_scenarios import (
    IMAGE,
    REPO,
    CheckFailed,
    Podman,
    compose_file,
    expect,
    log,
    postgres_scenario,
    readme_scenario,
    run,
    sqlite_scenario,
    stopped_while_starting,
)

SUITE = "bookworm"
MIRROR = os.environ.get("SIGNOFF_CHECK_MIRROR", "http://deb.debian.org/debian")
PACKAGES = ["python3", "python3-venv", "ca-certificates"]
# Local CAs the host trusts (a TLS-inspecting proxy's, say) go into the base too, or pip in
# the build could not reach PyPI where the host can.
LOCAL_CAS = Path("/usr/local/share/ca-certificates")
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "signoff-container"

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
             "--dpkgopt=path-exclude=/usr/share/locale/*", "--dpkgopt=force-unsafe-io", *hooks,
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
            readme_scenario(podman)
            stopped_while_starting(podman)
            mark = lap("readme", mark)
            url = os.environ.get("SIGNOFF_TEST_POSTGRES_URL")
            if url:
                postgres_scenario(podman, Path(workdir), url)
                mark = lap("postgres", mark)
            else:
                log("SIGNOFF_TEST_POSTGRES_URL is not set: the PostgreSQL run is skipped")
            compose_file()
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
