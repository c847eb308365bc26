"""`signoff approvals approve --allow-for`, `signoff grants list` and `grants revoke` as an
operator types them: processes against a real SQLite file (the SQL under them runs on both
databases in tests/integration/test_standing_grants.py), and the grant's default bounds on
both databases."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.cli import Deployment, assert_refused, deployment


def test_a_grant_given_at_the_terminal_approves_the_next_call_until_revoked(
    sqlite_db: Deployment,
) -> None:
    cli = sqlite_db.cli
    first = sqlite_db.request()
    given = cli.run(
        "approvals", "approve", first["id"], "--hash", first["hash"], "--as", "alice",
        "--allow-for", "2h", "--allow-at-most", "amount", "--allow-equal", "charge",
    )  # fmt: skip
    assert given.returncode == 0, str(given)
    assert "standing grant " in given.stdout
    assert "acme/payments.refund stripe.refunds.create where charge == 'ch_1' and " in given.stdout
    assert "amount <= 12000, given by alice" in given.stdout
    listed = cli.run("grants", "list", "--json").json()["grants"]
    [grant] = listed
    assert grant["granted_by"] == "alice" and grant["uses"] == 0

    smaller = sqlite_db.request(
        "smaller.json",
        run_id="run-2",
        tool={"name": "stripe.refunds.create", "arguments": {"charge": "ch_1", "amount": 500}},
    )
    assert smaller["state"] == "approved" and smaller["approved_by_grant"] == grant["id"]
    card = cli.run("approvals", "show", smaller["id"])
    assert "Approved by a standing grant of Alice Ng (alice)" in card.stdout

    # Bob did not give it; Alice may end it, once.
    assert_refused(cli.run("grants", "revoke", grant["id"], "--as", "bob"), "only alice")
    revoked = cli.run("grants", "revoke", grant["id"], "--as", "alice")
    assert revoked.returncode == 0, str(revoked)
    assert "revoked" in revoked.stdout and "used 1" in revoked.stdout
    assert_refused(cli.run("grants", "revoke", grant["id"], "--as", "alice"), "revoked already")
    assert "no standing grants live now" in cli.run("grants", "list").stdout
    later = sqlite_db.request(
        "later.json",
        run_id="run-3",
        tool={"name": "stripe.refunds.create", "arguments": {"charge": "ch_1", "amount": 400}},
    )
    assert later["state"] == "pending"

    # A grant is bounded by the route, and only comes with a grant's lifetime.
    second = sqlite_db.request("second.json", run_id="run-4")
    too_long = cli.run(
        "approvals", "approve", second["id"], "--hash", second["hash"], "--as", "alice",
        "--allow-for", "9h",
    )  # fmt: skip
    assert_refused(too_long, "lasts at most 8 h (max_grant_lifetime)")
    no_life = cli.run(
        "approvals", "approve", second["id"], "--hash", second["hash"], "--as", "alice",
        "--allow-run",
    )  # fmt: skip
    assert_refused(no_life, "give it with --allow-for DURATION")


def _refund(deploy: Deployment, run_id: str, charge: str, amount: int) -> Any:
    arguments = {"charge": charge, "amount": amount}
    tool = {"name": "stripe.refunds.create", "arguments": arguments}
    return deploy.request(f"{run_id}.json", run_id=run_id, tool=tool)


def test_a_grant_given_at_the_terminal_holds_every_argument_not_named_to_its_value(
    db_url: str, tmp_path: Path
) -> None:
    # The web form's default: every argument "only this value" unless the giver frees it.
    deploy = deployment(tmp_path / "deployment", db_url, None)
    cli = deploy.cli
    first = _refund(deploy, "run-1", "ch_1", 12000)
    given = cli.run(
        "approvals", "approve", first["id"], "--hash", first["hash"], "--as", "alice",
        "--allow-for", "1h",
    )  # fmt: skip
    assert given.returncode == 0, str(given)
    [grant] = cli.run("grants", "list", "--json").json()["grants"]
    same = _refund(deploy, "run-2", "ch_1", 12000)
    assert same["state"] == "approved" and same["approved_by_grant"] == grant["id"]
    for run_id, charge, amount in (("run-3", "ch_1", 500), ("run-4", "ch_2", 12000)):
        assert _refund(deploy, run_id, charge, amount)["state"] == "pending", run_id
    # The operator sees what the grant holds each argument to.
    assert "where charge == 'ch_1' and amount == 12000" in given.stdout
    assert '  charge: only "ch_1"\n  amount: only 12000\n' in given.stdout

    # --allow-any KEY frees that one argument; the others still hold to their value.
    other = _refund(deploy, "run-5", "ch_9", 100)
    decide = ("approvals", "approve", other["id"], "--hash", other["hash"], "--as", "alice")
    unknown = cli.run(*decide, "--allow-for", "1h", "--allow-any", "memo")
    assert_refused(unknown, "the call has no argument 'memo'")
    twice = cli.run(
        *decide, "--allow-for", "1h", "--allow-any", "amount", "--allow-at-most", "amount"
    )
    assert_refused(twice, "amount is named by more than one")
    freed = cli.run(*decide, "--allow-for", "1h", "--allow-any", "amount")
    assert freed.returncode == 0, str(freed)
    assert '  charge: only "ch_9"\n  amount: any value\n' in freed.stdout
    freed_id = freed.stdout.split()[2].rstrip(":")
    larger = _refund(deploy, "run-6", "ch_9", 99999)
    assert larger["state"] == "approved" and larger["approved_by_grant"] == freed_id
    assert _refund(deploy, "run-7", "ch_8", 100)["state"] == "pending"
