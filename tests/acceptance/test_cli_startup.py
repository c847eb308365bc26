"""`approvals list` and `approvals show` load only what reading the database takes.

Every run of the CLI pays for what it imports before it prints anything, so an operator's
`signoff approvals list` must not wait for the HTTP server, the chat platforms' SDKs, metrics,
templates or the migration tool to load (`python -m bench cli_start` measures the time).
Each command runs as its own process through `bot.cli.main`, the function the installed
`signoff` script calls, against a real database of each kind; afterwards the process writes
down every module it had loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bot.surfaces import BUILT_IN
from tests.support.cli import TIMEOUT, deployment

# main() as the console script runs it, then the names in sys.modules, into the file argv[1].
RUN_AND_LIST_MODULES = """
import json, sys
from bot.cli import main
code = main(sys.argv[2:])
with open(sys.argv[1], "w") as out:
    json.dump(sorted(sys.modules), out)
sys.exit(code)
"""

# Serving, chat platforms, metrics, templates, webhook signing and migrations: none is
# needed to read (the schema check reads Alembic's version table without Alembic).
NOT_FOR_READING = {
    "aiohttp",
    "aiohttp_jinja2",
    "alembic",
    "channels",
    "httpx",
    "itsdangerous",
    "jinja2",
    "prometheus_client",
    "slack_bolt",
    "slack_sdk",
    "standardwebhooks",
    "telegram",
}
SERVER_PARTS = {
    "bot.api",
    "bot.app",
    "bot.bootstrap",
    "bot.demo",
    "bot.health",
    "bot.metrics",
    "bot.outbox",
    "bot.server",
    "bot.sweeper",
}
# The surfaces' declarations are read with the config (its [slack] table, a principal's
# Slack id): light modules that import no SDK (bot/surfaces.py), with their package and the
# config model they share with the channel; no other part of channels/.
DECLARATIONS = {"channels", *BUILT_IN} | {
    path.rpartition(".")[0] + part for path in BUILT_IN for part in ("", ".config")
}


def run_counting_modules(tmp_path: Path, env: dict[str, str], *args: str) -> tuple[str, list[str]]:
    """(stdout, the loaded modules signoff should not need) of one CLI run."""
    modules_file = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", RUN_AND_LIST_MODULES, str(modules_file), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    loaded = json.loads(modules_file.read_text("utf-8"))
    # The database was really read through SQLAlchemy in this very process.
    assert "sqlalchemy" in loaded
    unneeded = [
        name
        for name in loaded
        if (name.split(".")[0] in NOT_FOR_READING and name not in DECLARATIONS)
        or any(name == part or name.startswith(part + ".") for part in SERVER_PARTS)
    ]
    return done.stdout, unneeded


def test_list_and_show_print_the_approval_without_loading_the_server(
    tmp_path: Path, db_url: str
) -> None:
    deploy = deployment(tmp_path, db_url, None)
    created = deploy.request(presentation={"title": "Refund €120.00 to Zoë"})
    env = deploy.cli.env

    listed, unneeded = run_counting_modules(tmp_path, env, "approvals", "list")
    assert unneeded == []
    assert created["id"] in listed
    assert "pending" in listed
    assert "Refund €120.00 to Zoë" in listed

    shown, unneeded = run_counting_modules(tmp_path, env, "approvals", "show", created["id"])
    assert unneeded == []
    assert shown.startswith("Refund €120.00 to Zoë\n")
    assert f"Hash          sha256:{created['hash']}" in shown

    as_json, unneeded = run_counting_modules(
        tmp_path, env, "approvals", "show", created["id"], "--json"
    )
    assert unneeded == []
    assert json.loads(as_json)["id"] == created["id"]
