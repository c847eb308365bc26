"""Several `signoff` processes deciding one approval on one SQLite file at the same moment."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from tests.support.cli import TIMEOUT, Deployment, Result, assert_refused

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
    results = start_behind_a_held_lock(sqlite_db, commands)

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


def _has_open(pid: int, path: Path) -> bool:
    try:
        return any(
            os.readlink(f"/proc/{pid}/fd/{fd}") == str(path) for fd in os.listdir(f"/proc/{pid}/fd")
        )
    except OSError:  # the process is gone, or closed the file meanwhile
        return True


def start_behind_a_held_lock(deployment: Deployment, commands: list[list[str]]) -> list[Result]:
    """Hold the file's write lock while every process starts and opens the database, then let
    go: they all reach for it at once, so the database, not start-up timing, keeps them apart.
    """
    assert deployment.db_path is not None
    blocker = sqlite3.connect(deployment.db_path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        # Processes of their own, forked from one that has imported signoff (a new
        # interpreter each would add a second of CPU apiece and test nothing more).
        procs = [deployment.cli.launch(*args) for args in commands]
        deadline = time.monotonic() + TIMEOUT
        while not all(_has_open(p.pid, deployment.db_path) for p in procs):
            assert time.monotonic() < deadline, "the CLI processes never opened the database"
            time.sleep(0.02)
        time.sleep(0.2)  # from opening the file to waiting on its write lock
        blocker.execute("ROLLBACK")
    finally:
        blocker.close()
    return [proc.wait() for proc in procs]
