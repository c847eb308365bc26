"""The operator's rough edges, filed down: `--version`, help on every option, a closed pipe,
`serve` on a port in use, databases that cannot be opened, and `config check` running the
checks `serve` runs. The CLI runs as a subprocess, against both databases where one is used."""

from __future__ import annotations

import argparse
import json
import shlex
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from bot.cli.parser import build_parser
from tests.support.cli import (
    TIMEOUT,
    Cli,
    Result,
    assert_refused,
    base_env,
    config_with,
    deployment,
    sqlite_url,
    to_toml,
)

WHSEC = "whsec_c2lnbm9mZi1kZXYtd2ViaG9vay1zZWNyZXQtMzJieXQ="


def test_version_is_the_installed_distributions(tmp_path: Path) -> None:
    result = Cli(cwd=tmp_path).run("--version")
    assert result.returncode == 0, str(result)
    assert result.stdout.strip() == f"signoff {metadata.version('signoff')}"


def test_every_option_and_subcommand_has_a_help_text() -> None:
    missing: list[str] = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                helped = {choice.dest for choice in action._choices_actions if choice.help}
                for name, sub in action.choices.items():
                    if name not in helped:
                        missing.append(f"{path} {name}")
                    walk(sub, f"{path} {name}")
            elif not isinstance(action, argparse._HelpAction) and not action.help:
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), "signoff")
    assert missing == []


def test_a_closed_pipe_ends_quietly(tmp_path: Path, db_url: str) -> None:
    deploy = deployment(tmp_path, db_url, None)
    # Far more than a pipe holds (64 KiB), so the writer is still writing when head exits.
    big = {"charge": "ch_1", "amount": 12000, "memo": "x" * 40_000}
    deploy.request_all(
        *({"run_id": f"run-{n}", "tool": {"name": "t", "arguments": big}} for n in range(4))
    )
    command = [sys.executable, "-m", "bot.cli", "approvals", "list", "--json"]
    done = subprocess.run(
        f"{shlex.join(command)} | head -1",
        shell=True,
        cwd=tmp_path,
        env=deploy.cli.env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.stdout == "{\n"
    assert done.stderr == "", done.stderr


def test_serve_on_a_port_in_use_says_so_before_starting_anything(tmp_path: Path) -> None:
    db = tmp_path / "never.db"
    deploy = deployment(tmp_path, sqlite_url(db), db)
    # Without the test tenant's webhook_url (and so its warning), stderr is the one line.
    quiet = config_with(sqlite_url(db), tenants=[{"name": "acme"}, {"name": "globex"}])
    deploy.config_path.write_text(to_toml(quiet), "utf-8")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        result = deploy.cli.run("serve", "--listen", address)
    assert_refused(result, f"signoff: cannot listen on {address}: address already in use")
    # Refused before the database was opened, let alone the outbox or the sweeper started.
    assert not db.exists()


def test_sqlite_paths_in_the_config_sit_beside_the_config(tmp_path: Path) -> None:
    conf = tmp_path / "etc"
    conf.mkdir()
    (conf / "signoff.toml").write_text(to_toml(config_with("sqlite:///data.db")), "utf-8")
    elsewhere = tmp_path / "work"
    elsewhere.mkdir()
    result = Cli(cwd=elsewhere).run("db", "upgrade", "--config", "../etc/signoff.toml")
    assert result.returncode == 0, str(result)
    assert (conf / "data.db").is_file()
    assert not (elsewhere / "data.db").exists()


def test_an_unopenable_database_names_its_path_and_why(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir" / "signoff.db"
    deploy = deployment(tmp_path, sqlite_url(missing), missing)
    for args in (["db", "upgrade"], ["approvals", "list"], ["serve", "--listen", "127.0.0.1:0"]):
        refused(deploy.cli.run(*args), str(missing), f"directory {missing.parent} does not exist")
    a_dir = tmp_path / "a-directory.db"
    a_dir.mkdir()
    deploy = deployment(tmp_path, sqlite_url(a_dir), a_dir)
    refused(deploy.cli.run("db", "upgrade"), str(a_dir), "is a directory")


def _config_file(tmp_path: Path, database_url: str, **changes: object) -> Path:
    path = tmp_path / "check.toml"
    path.write_text(to_toml(config_with(database_url, **changes)), "utf-8")
    return path


TENANTS = [
    {
        "name": "acme",
        "api_key_env": "ACME_KEY",
        "webhook_url": "https://agents.acme.example/hooks",
        "webhook_secret_env": "ACME_WHSEC",
    },
    {"name": "globex", "api_key_env": "GLOBEX_KEY"},
]
KEYS = {"ACME_KEY": "k-1", "GLOBEX_KEY": "k-2"}


def refused(result: Result, *fragments: str) -> str:
    """Exit 1 with the reason as the last line of stderr (after any warnings serve would log
    first), no traceback, nothing on stdout."""
    assert result.returncode == 1, str(result)
    assert "Traceback" not in result.stderr and result.stdout == "", str(result)
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("signoff: "), str(result)
    for fragment in fragments:
        assert fragment.lower() in line.lower(), f"{fragment!r} not in: {line}"
    return line


def test_config_check_passes_where_serve_would_start(tmp_path: Path, db_url: str) -> None:
    path = _config_file(tmp_path, db_url, tenants=TENANTS)
    env = base_env(ACME_WHSEC=WHSEC, **KEYS)
    cli = Cli(cwd=tmp_path, env=env)
    result = cli.run("config", "check", "--config", str(path))
    assert result.returncode == 0, str(result)
    # One line, and nothing on stdout: the resolved config only when asked for.
    assert (result.stdout, result.stderr.strip()) == ("", "config OK: serve would start")
    shown = cli.run("config", "check", "--show", "--config", str(path))
    assert shown.returncode == 0, str(shown)
    assert shown.json()["tenants"][0]["name"] == "acme"
    assert shown.stderr.strip() == "config OK: serve would start", str(shown)


def test_config_check_warns_where_serve_would_only_warn(tmp_path: Path) -> None:
    path = _config_file(tmp_path, sqlite_url(tmp_path / "new.db"), tenants=TENANTS)
    bad = Cli(cwd=tmp_path, env=base_env(ACME_WHSEC="not-a-whsec"))
    result = bad.run("config", "check", "--config", str(path))
    assert result.returncode == 0, str(result)
    warnings = [line for line in result.stderr.splitlines() if "WARNING" in line]
    assert any("$ACME_WHSEC" in w and "whsec_" in w for w in warnings), result.stderr
    assert any("acme cannot use the HTTP API" in w for w in warnings), result.stderr
    # No SQLite file yet: serve creates it, so only a warning, and the check leaves none.
    assert any("new.db does not exist yet; serve creates it" in w for w in warnings), warnings
    assert f"{len(warnings)} warning(s) above" in result.stderr
    assert not (tmp_path / "new.db").exists()
    # An empty one: serve upgrades it itself, so only a warning.
    (tmp_path / "new.db").touch()
    unset = Cli(cwd=tmp_path).run("config", "check", "--config", str(path))
    assert "$ACME_WHSEC: it is not set" in unset.stderr, str(unset)
    assert "serve upgrades it" in unset.stderr, str(unset)
    # No tenants at all: the API could take no request.
    bare = _config_file(tmp_path, sqlite_url(tmp_path / "new.db"), tenants=[], routes=[])
    lonely = Cli(cwd=tmp_path).run("config", "check", "--config", str(bare))
    assert lonely.returncode == 0, str(lonely)
    assert "no [[tenants]] in the config: the agent API accepts no key" in lonely.stderr


def test_config_check_warns_that_without_team_id_any_workspace_can_decide(
    tmp_path: Path,
) -> None:
    cli = Cli(
        cwd=tmp_path,
        env=base_env(SLACK_BOT_TOKEN="xoxb-1", SLACK_SIGNING_SECRET="s", ACME_WHSEC=WHSEC, **KEYS),
    )
    db_url = sqlite_url(tmp_path / "new.db")
    open_to_all = _config_file(tmp_path, db_url, tenants=TENANTS, slack={})
    result = cli.run("config", "check", "--config", str(open_to_all))
    assert result.returncode == 0, str(result)
    [line] = [w for w in result.stderr.splitlines() if "team_id" in w]
    assert "WARNING" in line and "any Slack workspace" in line, line
    pinned = _config_file(tmp_path, db_url, tenants=TENANTS, slack={"team_id": "T0OURS"})
    result = cli.run("config", "check", "--config", str(pinned))
    assert result.returncode == 0 and "team_id" not in result.stderr, str(result)


def test_config_check_refuses_where_serve_would_refuse(tmp_path: Path, pg_empty_url: str) -> None:
    cli = Cli(cwd=tmp_path)
    # The first four are refused before any database is opened (so the kind of database
    # cannot change the answer, and the file is never made).
    db_url = sqlite_url(tmp_path / "never-opened.db")
    slack = _config_file(tmp_path, db_url, slack={})
    refused(cli.run("config", "check", "--config", str(slack)), "SLACK_BOT_TOKEN")
    web = _config_file(tmp_path, db_url, web={})
    refused(cli.run("config", "check", "--config", str(web)), "SIGNOFF_WEB_SECRET")
    telegram = _config_file(tmp_path, db_url, telegram={})
    refused(cli.run("config", "check", "--config", str(telegram)), "TELEGRAM_BOT_TOKEN")
    # Two tenants holding the same API key: serve refuses when it reads the keys.
    same = [
        {"name": "acme", "api_key_env": "KEY_A"},
        {"name": "globex", "api_key_env": "KEY_B"},
    ]
    shared = _config_file(tmp_path, db_url, tenants=same)
    result = Cli(cwd=tmp_path, env=base_env(KEY_A="same", KEY_B="same")).run(
        "config", "check", "--config", str(shared)
    )
    refused(result, "same API key")
    assert not (tmp_path / "never-opened.db").exists()
    # Unreachable: nothing listens on port 9 of this host.
    gone = _config_file(tmp_path, "postgresql+asyncpg://signoff@127.0.0.1:9/signoff")
    refused(cli.run("config", "check", "--config", str(gone)), "database unavailable")
    # A PostgreSQL schema behind this signoff: serve refuses it (it upgrades only SQLite).
    behind = _config_file(tmp_path, pg_empty_url)
    refused(cli.run("config", "check", "--config", str(behind)), "signoff db upgrade")


def test_a_decision_at_the_cli_is_logged_as_the_server_logs_it(tmp_path: Path, db_url: str) -> None:
    deploy = deployment(tmp_path, db_url, None)
    record = deploy.request(run_id="logged-1")
    approved = deploy.cli.run(
        "approvals", "approve", record["id"], "--hash", record["hash"], "--as", "alice",
        "--log-format", "json",
    )  # fmt: skip
    assert approved.returncode == 0, str(approved)
    lines = [json.loads(line) for line in approved.stderr.splitlines() if line.startswith("{")]
    [decided] = [line for line in lines if line.get("event") == "approved"]
    assert (decided["approval_id"], decided["actor"], decided["state"]) == (
        record["id"],
        "cli:alice",
        "approved",
    )
    assert decided["tenant"] == "acme" and decided["level"] == "info"
    # Without the option the CLI stays as quiet as before: the answer, no log line.
    other = deploy.request(run_id="logged-2")
    rejected_quietly = deploy.cli.run(
        "approvals", "reject", other["id"], "--hash", other["hash"], "--as", "alice",
    )  # fmt: skip
    assert rejected_quietly.returncode == 0, str(rejected_quietly)
    assert "approval" not in rejected_quietly.stderr
