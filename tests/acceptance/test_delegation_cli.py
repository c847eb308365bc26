"""Delegation and hand-off from the `signoff` command, as an operator runs it (subprocesses on a
real SQLite file, the wall clock): create, list and revoke delegations, the refusals (a
circle, a bad time), a delegate deciding within the window, and one request handed over.

The windows themselves (a delegate refused once the window closes, cards at the start) are
proven with a FakeClock in tests/integration/test_routing.py.
"""

from __future__ import annotations

import json

from tests.support.cli import Deployment, assert_refused


def test_delegations_from_the_cli(sqlite_db: Deployment) -> None:
    cli = sqlite_db.cli
    created = cli.run(
        "delegate", "alice", "--to", "dave", "--until", "5d", "--scope", "contracts.*", "--json"
    )
    assert created.returncode == 0, str(created)
    delegation = created.json()
    assert (delegation["principal"], delegation["delegate"], delegation["scope"]) == (
        "alice",
        "dave",
        "contracts.*",
    )
    assert delegation["ends_at"] and delegation["revoked_at"] is None

    listed = cli.run("delegations", "list")
    assert listed.returncode == 0, str(listed)
    assert delegation["id"] in listed.stdout and "active" in listed.stdout
    assert "Dave Roe decides for Alice Ng (contracts.*) until" in listed.stdout

    looped, self_, bad_time, nobody = cli.run_all(
        [
            ["delegate", "dave", "--to", "alice"],
            ["delegate", "alice", "--to", "alice"],
            ["delegate", "alice", "--to", "bob", "--until", "christmas"],
            ["delegate", "alice", "--to", "nobody"],
        ]
    )
    assert_refused(looped, "circle", "dave -> alice -> dave")
    assert_refused(self_, "themselves")
    assert_refused(bad_time, "--until", "christmas")
    assert_refused(nobody, "unknown principal", "nobody")

    # dave decides alice's contracts while the delegation lasts; the trail says for whom.
    record = sqlite_db.request(capability="contracts.cancel", requested_by="bob")
    approved = cli.run(
        "approvals", "approve", record["id"], "--hash", record["hash"], "--as", "dave", "--json"
    )
    assert approved.returncode == 0, str(approved)
    assert approved.json()["decided_by"] == "dave"
    [(data,)] = sqlite_db.query(
        "SELECT data FROM approval_events WHERE approval_id = ? AND type = 'approved'",
        record["id"],
    )
    assert json.loads(data)["as_delegate_of"] == "alice"

    revoked = cli.run("delegations", "revoke", delegation["id"])
    assert revoked.returncode == 0, str(revoked)
    assert_refused(cli.run("delegations", "revoke", delegation["id"]), "already revoked")
    later = sqlite_db.request(
        "later.json", run_id="run-later", capability="contracts.cancel", requested_by="bob"
    )
    refused = cli.run("approvals", "approve", later["id"], "--hash", later["hash"], "--as", "dave")
    assert_refused(refused, "not an approver", "Alice Ng")
    everything = cli.run("delegations", "list", "--all", "--json")
    assert [d["revoked_by"] for d in everything.json()] == ["cli"]


def test_handing_one_request_over_from_the_cli(sqlite_db: Deployment) -> None:
    cli = sqlite_db.cli
    record = sqlite_db.request()  # payments: group finance (alice, bob, sam)
    aid = record["id"]
    assert_refused(
        cli.run("approvals", "delegate", aid, "--to", "carol", "--as", "dave"),
        "not an approver",
    )
    handed = cli.run("approvals", "delegate", aid, "--to", "carol", "--as", "alice")
    assert handed.returncode == 0, str(handed)
    assert "handed to Carol Diaz (carol)" in handed.stdout
    shown = cli.run("approvals", "show", aid)
    assert "Assigned to   Carol Diaz (carol) (handed over by Alice Ng)" in shown.stdout
    approved = cli.run("approvals", "approve", aid, "--hash", record["hash"], "--as", "carol")
    assert approved.returncode == 0, str(approved)
    events = sqlite_db.query(
        "SELECT type, actor FROM approval_events WHERE approval_id = ? ORDER BY seq", aid
    )
    assert events == [
        ("requested", f"agent:{record['tenant']}"),
        ("delegated", "cli:alice"),
        ("approved", "cli:carol"),
    ]
