"""How long `signoff approvals list` and `signoff approvals show ID` take to print their first
byte, beside how long Python itself takes to start.

Sets up a throwaway config and SQLite database (through the CLI: `db upgrade`, then a few
`approvals request`), then starts each command `--runs` times as a fresh process and times it
from the start of the process to the first byte on its stdout. The references: `python -c
print()` (the interpreter alone) and `import sqlalchemy` (the floor a command that reads the
database cannot go below). Target: under 300 ms to first output.

Compiled bytecode is kept in a temporary directory (PYTHONPYCACHEPREFIX), as an installed
signoff has it; `--no-bytecode-cache` compiles signoff's own modules on every run instead.

    python -m bench cli_start [--runs 10] [--no-bytecode-cache]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.results import Results

DESCRIPTION = "signoff approvals list / show: time to first output beside bare Python"

ROOT = Path(__file__).resolve().parents[2]
CONFIG = """\
[database]
url = "sqlite+aiosqlite:///{db}"

[[tenants]]
name = "acme"

[principals.alice]
name = "Alice Ng"

[principals.sam]
name = "Sam Requester"

[[routes]]
tenant = "acme"
capability = "payments.*"
approvers = ["alice"]
"""


def signoff_command() -> list[str]:
    """The installed console script when there is one (what an operator runs), else -m."""
    script = Path(sys.executable).with_name("signoff")
    return [str(script)] if script.exists() else [sys.executable, "-m", "bot.cli"]


def first_byte_ms(command: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, env=env, cwd=cwd)
    assert proc.stdout is not None
    first = proc.stdout.read(1)
    elapsed = (time.perf_counter() - start) * 1000
    proc.stdout.read()
    if proc.wait() != 0 or not first:
        raise SystemExit(f"{' '.join(command)} failed (exit {proc.returncode})")
    return elapsed


def setup(workdir: Path, env: dict[str, str]) -> str:
    """A migrated database with three pending approvals; returns the id of one."""
    signoff = signoff_command()
    subprocess.run(
        [*signoff, "db", "upgrade"], env=env, cwd=workdir, check=True, capture_output=True
    )
    for n in range(3):
        body = {
            "run_id": f"run-{n}",
            "capability": "payments.refund",
            "tool": {"name": "stripe.refunds.create", "arguments": {"charge": f"ch_{n}"}},
            "presentation": {"title": f"Refund #{n}"},
            "requested_by": "sam",
        }
        (workdir / "req.json").write_text(json.dumps(body), "utf-8")
        done = subprocess.run(
            [*signoff, "approvals", "request", "--tenant", "acme", "--file", "req.json"],
            env=env,
            cwd=workdir,
            check=True,
            capture_output=True,
        )
    return json.loads(done.stdout)["id"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=10, help="fresh processes per command")
    parser.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="compile signoff's modules on every run (as with PYTHONDONTWRITEBYTECODE=1)",
    )


def run(args: argparse.Namespace) -> Results:
    found = Results()
    workdir = Path(tempfile.mkdtemp(prefix="signoff-cli-start-"))
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
        env["SIGNOFF_CONFIG"] = str(workdir / "signoff.toml")
        # The checkout's code, not an older installed copy.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        if args.no_bytecode_cache:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        else:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")
        (workdir / "signoff.toml").write_text(CONFIG.format(db=workdir / "signoff.db"), "utf-8")
        approval_id = setup(workdir, env)

        signoff = signoff_command()
        commands = {
            "python -c print()": [sys.executable, "-c", "print()"],
            "python -c 'import sqlalchemy'": [sys.executable, "-c", "import sqlalchemy; print()"],
            "signoff approvals list": [*signoff, "approvals", "list"],
            "signoff approvals show ID": [*signoff, "approvals", "show", approval_id],
        }
        cache = "compiled every run" if args.no_bytecode_cache else "cached"
        print(f"first byte on stdout, ms, {args.runs} fresh processes each (bytecode {cache})")
        print(f"{'command':<32} {'min':>6} {'median':>7} {'max':>6}")
        for name, command in commands.items():
            first_byte_ms(command, env, workdir)  # fills the bytecode cache; not counted
            times = [first_byte_ms(command, env, workdir) for _ in range(args.runs)]
            for ms in times:
                found.add(f"{name}: first byte", ms, "ms")
            print(f"{name:<32} {min(times):6.0f} {statistics.median(times):7.0f} {max(times):6.0f}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return found

