"""`signoff approvals edit`, `approve --set --edited-hash` and `answer` as an operator types
them: processes against a real SQLite file (the SQL under them runs on both databases in
tests/integration/test_edits_answers.py)."""

from __future__ import annotations

import copy
import json

from tests.support.cli import Deployment, assert_refused, config_with, sqlite_url, to_toml
from tests.support.samples import TEST_CONFIG, request_body


def _with_edits(db: Deployment) -> None:
    assert db.db_path is not None
    routes = copy.deepcopy(TEST_CONFIG["routes"])
    routes[0]["edits"] = ["amount", "memo"]
    db.config_path.write_text(to_toml(config_with(sqlite_url(db.db_path), routes=routes)), "utf-8")


def test_an_edit_is_previewed_then_approved_by_its_hash(sqlite_db: Deployment) -> None:
    _with_edits(sqlite_db)
    cli = sqlite_db.cli
    created = sqlite_db.request()
    aid, shown = created["id"], created["hash"]

    preview = cli.run("approvals", "edit", aid, "--set", "amount=9000", "--set", "memo=partial")
    assert preview.returncode == 0, str(preview)
    assert "amount: 12000 -> 9000" in preview.stdout
    assert 'memo: added: "partial"' in preview.stdout
    as_json = cli.run(
        "approvals", "edit", aid, "--set", "amount=9000", "--set", "memo=partial", "--json"
    )
    edited_hash = as_json.json()["hash"]
    assert f"sha256:{edited_hash}" in preview.stdout
    assert f"--edited-hash {edited_hash}" in preview.stdout  # the command to approve it

    # Without the edited hash, nothing is approved: the person must have seen the preview.
    blind = cli.run(
        "approvals", "approve", aid, "--hash", shown, "--as", "alice", "--set", "amount=9000"
    )
    assert_refused(blind, "--edited-hash")
    # The charge is not the route's to change.
    locked = cli.run("approvals", "edit", aid, "--set", "charge=ch_2")
    assert_refused(locked, "charge may not be changed")

    approved = cli.run(
        "approvals", "approve", aid, "--hash", shown, "--as", "alice",
        "--set", "amount=9000", "--set", "memo=partial", "--edited-hash", edited_hash, "--json",
    )  # fmt: skip
    assert approved.returncode == 0, str(approved)
    record = approved.json()
    assert record["state"] == "approved" and record["hash"] == edited_hash
    assert record["tool"]["arguments"] == {"charge": "ch_1", "amount": 9000, "memo": "partial"}
    assert record["edited"] is True and record["original_hash"] == shown

    card = cli.run("approvals", "show", aid)
    assert "Edited by the approver (the agent asked for sha256:" in card.stdout
    assert "amount: 12000 → 9000" in card.stdout
    verified = cli.run("audit", "verify", aid)
    assert verified.returncode == 0, str(verified)


def test_an_answer_from_the_terminal_ends_the_request_without_running_it(
    sqlite_db: Deployment,
) -> None:
    cli = sqlite_db.cli
    created = sqlite_db.request()
    answered = cli.run(
        "approvals", "answer", created["id"], "--hash", created["hash"], "--as", "bob",
        "--text", "Refund €60 only; the rest was store credit.",
    )  # fmt: skip
    assert answered.returncode == 0, str(answered)
    assert f"{created['id']} answered by Bob Stone (bob)" in answered.stdout
    card = cli.run("approvals", "show", created["id"])
    assert "Answered instead of running by Bob Stone (bob)" in card.stdout
    assert "Answer: Refund €60 only" in card.stdout

    body = request_body(
        kind="question",
        capability="payments.question",
        question={"options": ["Yes", "No"]},
        presentation={"title": "Close the ticket?"},
    )
    del body["tool"]
    (sqlite_db.workdir / "q.json").write_text(json.dumps(body), "utf-8")
    asked = cli.run("approvals", "request", "--tenant", "acme", "--file", "q.json")
    question = asked.json()
    card = cli.run("approvals", "show", question["id"])
    assert "Question      choose one: Yes · No" in card.stdout
    wrong = cli.run(
        "approvals", "answer", question["id"], "--hash", question["hash"], "--as", "alice",
        "--option", "Maybe",
    )  # fmt: skip
    assert_refused(wrong, "'Maybe' is not one of this request's options: 'Yes', 'No'")
    chosen = cli.run(
        "approvals", "answer", question["id"], "--hash", question["hash"], "--as", "alice",
        "--option", "No", "--json",
    )  # fmt: skip
    assert chosen.returncode == 0, str(chosen)
    assert chosen.json()["answer"] == {"option": "No"}
