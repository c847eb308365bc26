"""Several `signoff` processes deciding one approval on one SQLite file at the same moment."""

from __future__ import annotations

from tests.acceptance.conftest import Deployment, assert_refused

TARGET = {"approve": "approved", "reject": "rejected", "cancel": "cancelled"}


def test_concurrent_decisions_have_one_winner(sqlite_db: Deployment) -> None:
    approval = sqlite_db.request()  # payments.refund: group finance (alice, bob), asked by sam
    aid, hash_ = approval["id"], approval["hash"]
    plan = [
        ("approve", "alice"),
        ("reject", "bob"),
        ("cancel", "alice"),
        ("approve", "bob"),
        ("reject", "alice"),
        ("approve", "alice"),
        ("cancel", "alice"),
        ("reject", "bob"),
        ("approve", "bob"),
        ("reject", "alice"),
        ("approve", "alice"),
        ("reject", "bob"),
    ]
    commands = [
        ["approvals", action, aid, *([] if action == "cancel" else ["--hash", hash_]), "--as", who]
        for action, who in plan
    ]
    results = sqlite_db.cli.run_all(commands)  # every process started before any is awaited

    winners = [(plan[i], r) for i, r in enumerate(results) if r.returncode == 0]
    assert len(winners) == 1, "\n".join(map(str, results))
    (action, who), _ = winners[0]
    winner_state = TARGET[action]

    trail = sqlite_db.query(
        "SELECT type, actor FROM approval_events WHERE approval_id = ? ORDER BY seq", aid
    )
    # One decision event, by the winner: a cancel that lost to an approval did not revoke it.
    assert trail == [("requested", "agent:acme"), (winner_state, f"cli:{who}")]

    for result in results:
        assert "locked" not in result.stderr.lower(), str(result)
        assert "Traceback" not in result.stderr, str(result)
        if result.returncode != 0:  # every loser is told what happened, and by whom
            assert_refused(result, f"approval is {winner_state} (by {who}")

    [(state, decided_by)] = sqlite_db.query(
        "SELECT state, decided_by FROM approvals WHERE id = ?", aid
    )
    assert (state, decided_by) == (winner_state, who)
    # Losers left no votes behind.
    votes = sqlite_db.query("SELECT principal FROM votes WHERE approval_id = ?", aid)
    assert {principal for (principal,) in votes} <= {who}
    verified = sqlite_db.cli.run("audit", "verify")
    assert verified.returncode == 0, str(verified)
