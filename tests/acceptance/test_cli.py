"""The `signoff` command as an operator uses it: a subprocess against real databases."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from contextlib import closing
from pathlib import Path

import asyncpg

from store.migrate import head_revision
from tests.support.cli import (
    HEX64,
    Cli,
    Deployment,
    assert_refused,
    base_env,
    config_with,
    deployment,
    run_together,
    sqlite_url,
    to_toml,
)
from tests.support.samples import request_body

DECISION_KEYS = {"id", "state", "execution", "hash", "assignee", "decided_by", "decided_at"}


def test_quick_start_on_a_fresh_sqlite_file(fresh_sqlite: Deployment) -> None:
    cli = fresh_sqlite.cli
    first = cli.run("db", "upgrade")
    assert first.returncode == 0, str(first)
    assert f"schema upgraded from empty to {head_revision()}" in first.stdout
    assert fresh_sqlite.db_path is not None and fresh_sqlite.db_path.is_file()

    again = cli.run("db", "upgrade")
    assert again.returncode == 0, str(again)
    assert "already at" in again.stdout

    body = request_body()
    created = fresh_sqlite.request()
    assert created["state"] == "pending"
    assert created["execution"] == "not_started"
    assert HEX64.match(created["hash"]), created["hash"]
    assert created["tool"] == body["tool"]

    # Asking again for the same call in the same run is the same approval, not a second card.
    repeat = cli.run("approvals", "request", "--tenant", "acme", "--file", "req.json")
    assert repeat.returncode == 0, str(repeat)
    assert repeat.json()["id"] == created["id"]
    assert repeat.json()["hash"] == created["hash"]
    listed, card, shown = cli.run_all(
        [
            ["approvals", "list", "--json"],
            ["approvals", "show", created["id"]],
            ["approvals", "show", created["id"], "--json"],
        ]
    )
    assert listed.returncode == 0, str(listed)
    assert [a["id"] for a in listed.json()["approvals"]] == [created["id"]]

    assert card.returncode == 0, str(card)
    assert body["presentation"]["title"] in card.stdout
    reason_lines = [line for line in card.stdout.splitlines() if body["reason"] in line]
    assert len(reason_lines) == 1, card.stdout
    assert "from the agent" in reason_lines[0]
    assert f"sha256:{created['hash']}" in card.stdout

    assert shown.returncode == 0, str(shown)
    record = shown.json()
    assert DECISION_KEYS <= record.keys()
    assert record["id"] == created["id"]
    assert record["state"] == "pending"
    assert record["execution"] == "not_started"
    assert record["hash"] == created["hash"]
    assert record["assignee"] == "group:finance"
    assert record["decided_by"] is None
    assert record["decided_at"] is None


async def _pg_schema(url: str) -> tuple[str | None, list[str]]:
    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://", 1))
    try:
        table = await conn.fetchval("SELECT to_regclass('public.approvals')::text")
        versions = await conn.fetch("SELECT version_num FROM alembic_version")
    finally:
        await conn.close()
    return table, [row["version_num"] for row in versions]


def test_db_upgrade_on_an_empty_postgresql_database(tmp_path: Path, pg_empty_url: str) -> None:
    # The config names SQLite; SIGNOFF_DATABASE_URL must win.
    pg = deployment(tmp_path, sqlite_url(tmp_path / "not-used.db"), None)
    env = {"SIGNOFF_DATABASE_URL": pg_empty_url}

    before = pg.cli.run("approvals", "list", env=env)
    assert_refused(before, "signoff db upgrade")

    first = pg.cli.run("db", "upgrade", env=env)
    assert first.returncode == 0, str(first)
    assert f"schema upgraded from empty to {head_revision()}" in first.stdout
    assert asyncio.run(_pg_schema(pg_empty_url)) == ("approvals", [head_revision()])
    assert not (tmp_path / "not-used.db").exists()

    again = pg.cli.run("db", "upgrade", env=env)
    assert again.returncode == 0, str(again)
    assert "already at" in again.stdout
    assert asyncio.run(_pg_schema(pg_empty_url)) == ("approvals", [head_revision()])

    listed = pg.cli.run("approvals", "list", "--json", env=env)
    assert listed.returncode == 0, str(listed)
    assert listed.json() == {"approvals": []}


def test_commands_on_a_new_sqlite_file_upgrade_it_as_serve_does(tmp_path: Path) -> None:
    some_id = "00000000-0000-4000-8000-000000000000"
    commands = {
        "list": (["approvals", "list"], 0),
        "show": (["approvals", "show", some_id], 1),
        "request": (["approvals", "request", "--tenant", "acme", "--file", "req.json"], 0),
        "approve": (["approvals", "approve", some_id, "--hash", "a" * 64, "--as", "alice"], 1),
        "verify": (["audit", "verify"], 0),
    }
    # A new file per command (each command the first to open it), as a new user's first
    # command would meet the embedded default.
    deployments = {
        name: deployment(tmp_path / name, sqlite_url(tmp_path / name / "s.db"), None)
        for name in commands
    }
    for d in deployments.values():
        d.request_file()
    jobs = [(deployments[name].cli, args) for name, (args, _) in commands.items()]
    upgraded = f"signoff: upgraded the database schema from empty to {head_revision()}"
    for name, result in zip(commands, run_together(jobs), strict=True):
        assert result.returncode == commands[name][1], str(result)
        assert upgraded in result.stderr, name
        assert "db upgrade" not in result.stderr, name
        with closing(sqlite3.connect(tmp_path / name / "s.db")) as conn:
            versions = conn.execute("SELECT version_num FROM alembic_version").fetchall()
        assert versions == [(head_revision(),)], name
    assert "no approvals" in run_together(jobs[:1])[0].stdout
    # Once is enough: the next command on the same file says nothing about the schema.
    again = deployments["request"].cli.run("approvals", "list")
    assert again.returncode == 0 and again.stderr == "", str(again)
    assert again.stdout.count("payments.refund") == 1


def test_decisions_from_the_cli(sqlite_db: Deployment) -> None:
    cli = sqlite_db.cli
    other_tool = {"name": "stripe.refunds.create", "arguments": {"charge": "ch_2", "amount": 9}}
    approval, other = sqlite_db.request_all(
        {"run_id": "run-a"}, {"run_id": "run-b", "tool": other_tool}
    )
    aid, good = approval["id"], approval["hash"]
    other_hash = other["hash"]
    assert good != other_hash

    wrong_hash, dave, sam, nobody, unknown_id, malformed = cli.run_all(
        [
            ["approvals", "approve", aid, "--hash", other_hash, "--as", "alice"],
            ["approvals", "approve", aid, "--hash", good, "--as", "dave"],
            ["approvals", "approve", aid, "--hash", good, "--as", "sam"],
            ["approvals", "approve", aid, "--hash", good, "--as", "nobody"],
            ["approvals", "approve", "no-such-id", "--hash", good, "--as", "alice"],
            ["approvals", "approve", aid, "--hash", good[:12], "--as", "alice"],
        ]
    )
    assert_refused(wrong_hash, "changed")
    assert_refused(dave, "not an approver", "group finance")
    assert "self-approval" in assert_refused(sam, "sam").lower()
    assert_refused(nobody, "unknown principal", "nobody")
    assert_refused(unknown_id, "no-such-id")
    assert malformed.returncode == 2, str(malformed)
    assert "usage:" in malformed.stderr and "--hash" in malformed.stderr
    assert "Traceback" not in malformed.stderr
    # Nothing above changed the request.
    assert sqlite_db.query("SELECT state FROM approvals WHERE id = ?", aid) == [("pending",)]
    assert sqlite_db.query("SELECT count(*) FROM votes") == [(0,)]

    approved = cli.run(
        "approvals", "approve", aid, "--hash", f"sha256:{good.upper()}", "--as", "alice", "--json"
    )
    assert approved.returncode == 0, str(approved)
    record = approved.json()
    assert DECISION_KEYS <= record.keys()
    assert record["id"] == aid
    assert record["state"] == "approved"
    assert record["decided_by"] == "alice"
    assert record["decided_at"]
    assert record["execution"] == "not_started"

    second, glass = cli.run_all(
        [
            ["approvals", "reject", aid, "--hash", good, "--as", "bob"],
            ["approvals", "approve", other["id"], "--hash", other_hash, "--as", "dave",
             "--break-glass", "--json"],
        ]
    )  # fmt: skip
    assert_refused(second, "approved", "alice")
    assert glass.returncode == 0, str(glass)
    assert glass.json()["state"] == "approved"
    assert glass.json()["decided_by"] == "dave"

    events = sqlite_db.query(
        "SELECT approval_id, type, actor, data FROM approval_events WHERE type != 'requested'"
    )
    decisions = {(a, t, actor): json.loads(data) for a, t, actor, data in events}
    assert decisions.keys() == {
        (aid, "approved", "cli:alice"),
        (other["id"], "approved", "cli:dave"),
    }
    assert decisions[(other["id"], "approved", "cli:dave")].get("break_glass") is True
    assert not decisions[(aid, "approved", "cli:alice")].get("break_glass")


def test_request_file_errors_write_nothing(sqlite_db: Deployment) -> None:
    good = json.dumps(request_body())
    amount = '"amount": 12000'
    assert amount in good
    files = {
        "malformed": good[:-5],
        "unknown_field": json.dumps(request_body(priority="high")),
        "nan": good.replace(amount, '"amount": NaN'),
        "huge": good.replace(amount, '"amount": 1e400'),
        "no_route": json.dumps(request_body(capability="hr.hire")),
        "unknown_tenant": good,
        # An unknown key that is a terminal escape (set the window title) quoted in the error.
        "escape_key": json.dumps(request_body(**{"\x1b]0;pwned\x07": 1})),
        "nul": json.dumps(request_body(reason="a\x00b")),
    }
    for name, text in files.items():
        (sqlite_db.workdir / f"{name}.json").write_text(text, "utf-8")

    def request(name: str) -> list[str]:
        tenant = "initech" if name == "unknown_tenant" else "acme"
        return ["approvals", "request", "--tenant", tenant, "--file", f"{name}.json"]

    names = [*files, "missing"]  # missing.json is never written
    results = dict(zip(names, sqlite_db.cli.run_all([request(n) for n in names]), strict=True))
    assert_refused(results["malformed"], "JSON")
    assert_refused(results["unknown_field"], "priority")
    assert_refused(results["nan"], "NaN")
    # 1e400 would be hashed as infinity: refused, naming the field and why
    assert_refused(results["huge"], "tool.arguments.amount", "1e400")
    assert_refused(results["no_route"], "no route", "hr.hire")
    assert_refused(results["unknown_tenant"], "unknown tenant", "initech")
    assert_refused(results["missing"], "missing.json")
    escaped = assert_refused(results["escape_key"], "Extra inputs")
    assert "\x1b" not in escaped and "\x07" not in escaped and "\\u001b" in escaped
    assert_refused(results["nul"], "reason", "NUL")
    assert sqlite_db.query("SELECT count(*) FROM approvals") == [(0,)]
    assert sqlite_db.query("SELECT count(*) FROM approval_events") == [(0,)]
    assert sqlite_db.query("SELECT count(*) FROM outbox") == [(0,)]


def test_audit_verify_detects_an_edited_event(sqlite_db: Deployment) -> None:
    cli = sqlite_db.cli
    created = sqlite_db.request_all(*({"run_id": f"run-{n}"} for n in range(3)))
    (a, ha), (b, hb), (c, hc) = [(r["id"], r["hash"]) for r in created]
    decided = cli.run_all(
        [
            ["approvals", "approve", a, "--hash", ha, "--as", "alice", "--note", "ok"],
            ["approvals", "reject", b, "--hash", hb, "--as", "bob", "--note", "too much"],
            ["approvals", "approve", c, "--hash", hc, "--as", "bob"],
        ]
    )
    assert [r.returncode for r in decided] == [0, 0, 0], "\n".join(map(str, decided))

    clean = cli.run("audit", "verify")
    assert clean.returncode == 0, str(clean)
    assert "6 events" in clean.stdout and "3 approvals" in clean.stdout

    # Someone with database access rewrites the note on a's approval, with plain SQL.
    [(event_id, data)] = sqlite_db.query(
        "SELECT id, data FROM approval_events WHERE approval_id = ? AND type = 'approved'", a
    )
    forged = {**json.loads(data), "note": "approved by the CFO"}
    changed = sqlite_db.execute(
        "UPDATE approval_events SET data = ? WHERE id = ?", json.dumps(forged), event_id
    )
    assert changed == 1

    everything, just_a, just_b = cli.run_all(
        [["audit", "verify"], ["audit", "verify", a], ["audit", "verify", b]]
    )
    for broken in (everything, just_a):
        assert broken.returncode != 0, str(broken)
        assert "Traceback" not in broken.stderr
        assert a in broken.stderr, str(broken)
        assert f"event {event_id}" in broken.stderr, str(broken)
    assert just_b.returncode == 0, str(just_b)


def test_config_check(tmp_path: Path) -> None:
    secret = "sk-live-7f3a9c1e5b"
    db_password = "hunter2-pg-secret"
    acme = {
        "name": "acme",
        "api_key_env": "SIGNOFF_ACME_API_KEY",
        "webhook_secret_env": "SIGNOFF_ACME_WEBHOOK_SECRET",  # left unset
    }
    tenants = [acme, {"name": "globex"}]
    good = config_with("sqlite+aiosqlite:///x.db")
    good["tenants"] = tenants
    # config check opens the database as serve would: an unreachable one is refused, and its
    # password is not shown in the refusal.
    unreachable = config_with(f"postgresql+asyncpg://signoff:{db_password}@db.internal/signoff")
    typo = config_with("sqlite+aiosqlite:///x.db", server={"lisen": "127.0.0.1:8700"})
    unknown_approver = config_with("sqlite+aiosqlite:///x.db")
    unknown_approver["routes"][0]["approvers"] = ["group:finance", "zed"]
    # A route notifying a surface the config does not serve: refused, not skipped per card.
    unserved = config_with("sqlite+aiosqlite:///x.db")
    unserved["routes"][1]["notify"] = ["web"]
    cases = (("good", good), ("unreachable", unreachable), ("typo", typo),
             ("unknown", unknown_approver), ("unserved", unserved))  # fmt: skip
    for name, config in cases:
        (tmp_path / f"{name}.toml").write_text(to_toml(config), "utf-8")

    env = base_env(SIGNOFF_ACME_API_KEY=secret)
    checked = Cli(cwd=tmp_path, env=env).run_all(
        [["config", "check", "--show", "--config", f"{name}.toml"] for name, _ in cases]
    )
    ok, down, bad_key, bad_principal, unserved_web = checked
    assert down.returncode == 1, str(down)
    assert db_password not in down.stdout + down.stderr
    assert ok.returncode == 0, str(ok)
    output = ok.stdout + ok.stderr
    assert secret not in output
    assert db_password not in output
    shown = json.loads(ok.stdout)["tenants"][0]
    assert shown["name"] == "acme"
    # Each secret is shown as its variable and whether it is set, never as its value.
    assert "SIGNOFF_ACME_API_KEY" in shown["api_key_env"]
    assert "set" in shown["api_key_env"].lower()
    assert "not set" not in shown["api_key_env"].lower()
    assert "SIGNOFF_ACME_WEBHOOK_SECRET" in shown["webhook_secret_env"]
    assert "not set" in shown["webhook_secret_env"].lower()

    assert_refused(bad_key, "server.lisen")
    assert_refused(bad_principal, "routes.0.approvers", "zed")
    line = next(
        n for n, text in enumerate((tmp_path / "unserved.toml").read_text().splitlines(), 1)
        if text.startswith("notify")
    )  # fmt: skip
    assert_refused(unserved_web, f"routes.1.notify (line {line})", "'web' needs the [web] table")


def test_show_names_every_vote_of_a_quorum(sqlite_db: Deployment) -> None:
    cli = sqlite_db.cli
    created = sqlite_db.request(capability="quorum.migrate", run_id="run-q")
    aid, good = created["id"], created["hash"]
    vote = re.compile(
        r"Approved by +(\w[\w ]*\(\w+\)) at \d{4}-\d\d-\d\d \d\d:\d\d UTC from the CLI"
    )

    alice = cli.run("approvals", "approve", aid, "--hash", good, "--as", "alice")
    assert alice.returncode == 0, str(alice)
    pending = cli.run("approvals", "show", aid)
    assert pending.returncode == 0, str(pending)
    assert "1 of 2 (Alice Ng)" in pending.stdout
    assert vote.findall(pending.stdout) == ["Alice Ng (alice)"]

    bob = cli.run("approvals", "approve", aid, "--hash", good, "--as", "bob")
    assert bob.returncode == 0, str(bob)
    shown, as_json = cli.run_all([["approvals", "show", aid], ["approvals", "show", aid, "--json"]])
    assert "Approved by Bob Stone (bob) at" in shown.stdout  # the outcome: who decided
    assert vote.findall(shown.stdout) == ["Alice Ng (alice)", "Bob Stone (bob)"]
    record = as_json.json()
    assert record["decided_by"] == "bob"
    assert [(v["principal"], v["decision"], v["via"]) for v in record["votes"]] == [
        ("alice", "approve", "cli"),
        ("bob", "approve", "cli"),
    ]
    assert record["votes"][1]["at"] == record["decided_at"]
