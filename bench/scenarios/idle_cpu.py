"""The CPU an idle `signoff serve` spends: one process on a fresh SQLite file (the web surface
on, no chat platform, nothing to do), started, given --settle seconds to finish starting, then
its user + system CPU read from /proc over --seconds; --runs times, min / median / max in
milliseconds of CPU per second. Issue 27's target is under 5.

    python -m bench idle_cpu [--runs 3] [--seconds 20] [--settle 8] [--trees A,B] [--out FILE]

`--trees` compares checkouts in the same sitting, run after run: each is a directory whose
`bot`, `store` and `channels` the server imports (put first on PYTHONPATH); the default is
this checkout.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench.processes import (
    add_background_process_option,
    background_process_args,
    signoff_command,
    tree_cpu_seconds,
)
from bench.results import Results

DESCRIPTION = "the CPU an idle signoff serve spends, ms per second, per checkout"

REPO = Path(__file__).resolve().parents[2]

CONFIG = """\
[server]
listen = "127.0.0.1:0"
[database]
url = "sqlite:///{db}"
[web]
[[tenants]]
name = "acme"
api_key_env = "SIGNOFF_BENCH_API_KEY"
[principals.alice]
name = "Alice"
[[routes]]
tenant = "acme"
capability = "payments.*"
approvers = ["alice"]
"""


def idle_cpu(tree: Path, settle: float, seconds: float, extra: list[str]) -> float:
    """Milliseconds of CPU per second of one idle server running `tree`'s code (with
    `extra` serve arguments; its processes summed)."""
    with tempfile.TemporaryDirectory(prefix="signoff-idle-") as tmp:
        config = Path(tmp, "signoff.toml")
        config.write_text(CONFIG.format(db=Path(tmp, "signoff.db")))
        env = {
            **os.environ,
            "PYTHONPATH": str(tree),
            "SIGNOFF_BENCH_API_KEY": "bench-key-0123456789",
            "SIGNOFF_WEB_SECRET": "bench-web-secret-0123456789abcdef",
        }
        proc = subprocess.Popen(
            [*signoff_command(), "serve", "--workers", "1", *extra, "--config", str(config)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            time.sleep(settle)
            if proc.poll() is not None:
                raise SystemExit(f"signoff serve ({tree}) exited with {proc.returncode}")
            before = tree_cpu_seconds(proc.pid)
            time.sleep(seconds)
            return (tree_cpu_seconds(proc.pid) - before) / seconds * 1000
        finally:
            proc.terminate()
            proc.wait(30)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--settle", type=float, default=8.0)
    p.add_argument("--trees", default=str(REPO), help="comma-separated checkouts to compare")
    add_background_process_option(p)


def run(args: argparse.Namespace) -> Results:
    extra = background_process_args(args.background_process)
    trees = [Path(t).resolve() for t in args.trees.split(",")]
    figures: dict[str, list[float]] = {str(t): [] for t in trees}
    for run in range(1, args.runs + 1):
        for tree in trees:
            ms = idle_cpu(tree, args.settle, args.seconds, extra)
            figures[str(tree)].append(ms)
            print(f"run {run} {tree}: {ms:.1f} ms of CPU per second", flush=True)
    for tree, values in figures.items():
        low, mid, high = min(values), statistics.median(values), max(values)
        print(f"{tree}: idle CPU {low:.1f} / {mid:.1f} / {high:.1f} ms/s (min / median / max)")
    found = Results(detail=figures)
    for tree, values in figures.items():
        for ms in values:
            found.add(f"{tree}/idle_cpu", ms, "ms/s")
    return found

