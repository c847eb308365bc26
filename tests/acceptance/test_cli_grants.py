"""`signoff approvals approve --allow-for`, `signoff grants list` and `grants revoke` as an
operator types them: processes against a real SQLite file (the SQL under them runs on both
databases in tests/integration/test_standing_grants.py)."""

from __future__ import annotations

from tests.support.cli import Deployment, assert_refused


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
