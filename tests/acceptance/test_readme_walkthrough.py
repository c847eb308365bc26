"""The README's walkthrough, run as written: the shell block after "Then, from a second
terminal" is taken from README.md and run with bash against `signoff serve` on the example
configuration, so the commands a newcomer copies cannot rot. Only where it runs changes (the
server's port, a copy of the config in a temporary folder)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.cli import REPO_ROOT, base_env
from tests.support.service import _LISTENING

SECRET = "whsec_c2lnbm9mZi1kZXYtd2ViaG9vay1zZWNyZXQtMzJieXQ="


def walkthrough() -> str:
    readme = (REPO_ROOT / "README.md").read_text("utf-8")
    after = readme.split("Then, from a second terminal", 1)[1]
    return after.split("```sh\n", 1)[1].split("```", 1)[0]


def test_the_readme_walkthrough_runs_to_the_end(tmp_path: Path) -> None:
    config = tmp_path / "signoff.toml"
    shutil.copy(REPO_ROOT / "config" / "signoff.example.toml", config)
    (tmp_path / "examples").mkdir()
    shutil.copy(REPO_ROOT / "examples" / "refund-request.json", tmp_path / "examples")
    env = base_env(
        SIGNOFF_CONFIG=str(config),
        SIGNOFF_ACME_API_KEY="dev-key",
        SIGNOFF_ACME_WEBHOOK_SECRET=SECRET,
        PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
    )
    server = subprocess.Popen(
        [sys.executable, "-m", "bot.cli", "serve", "--listen", "127.0.0.1:0"],
        cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stderr is not None
        port = None
        for line in server.stderr:
            if match := _LISTENING.search(line):
                port = match.group(1)
                break
        assert port, "signoff serve did not start"
        script = walkthrough()
        first, rest = script.split("\n", 1)
        assert first.startswith("export SIGNOFF_CONFIG=config/signoff.example.toml")
        rest = rest.replace("http://127.0.0.1:8700", f"http://127.0.0.1:{port}")
        ran = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", rest],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        server.kill()
        server.wait(10)
    assert ran.returncode == 0, f"{ran.stdout}\n{ran.stderr}"
    lines = ran.stdout.splitlines()
    assert "executed" in lines  # the claimed call was completed, nothing left to lapse
    assert re.search(r"audit chain intact: \d+ events across 1 approvals", ran.stdout)
    # It writes no files of its own into the folder it runs in (a newcomer's checkout).
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith("signoff.")] == [
        "examples"
    ]
