"""`signoff approvals bulk approve|reject --file` as an operator types it: each request is
decided against its own hash, one by one; what changed or was decided meanwhile is refused
and named, the rest go through (a real SQLite file; tests/integration/test_bulk.py runs the
same on both databases)."""

from __future__ import annotations

from tests.support.cli import Deployment, assert_refused


def test_a_file_of_pairs_decides_each_and_names_each_refusal(sqlite_db: Deployment) -> None:
    cli = sqlite_db.cli
    first, second, third = (sqlite_db.request(f"r{i}.json", run_id=f"run-{i}") for i in range(3))
    # Decided meanwhile by someone else, and a hash nobody was shown.
    rejected = cli.run("approvals", "reject", second["id"], "--hash", second["hash"], "--as", "bob")
    assert rejected.returncode == 0, str(rejected)
    lines = [
        "# reviewed this morning",
        f"{first['id']} sha256:{first['hash']}",
        f"{second['id']} {second['hash']}",
        "",
        f"{third['id']} {'0' * 64}",
    ]
    (sqlite_db.workdir / "pairs.txt").write_text("\n".join(lines) + "\n", "utf-8")
    done = cli.run("approvals", "bulk", "approve", "--file", "pairs.txt", "--as", "alice")
    assert done.returncode == 1, str(done)
    out = done.stdout.splitlines()
    assert out[0] == f"{first['id']}  approved"
    assert out[1].startswith(f"{second['id']}  refused: ") and "rejected" in out[1]
    assert out[2].startswith(f"{third['id']}  refused: ") and "changed since it was shown" in out[2]
    assert "1 decided, 2 refused" in done.stderr

    (sqlite_db.workdir / "bad.txt").write_text(f"{first['id']} abc\n", "utf-8")
    bad = cli.run("approvals", "bulk", "reject", "--file", "bad.txt", "--as", "alice")
    assert_refused(bad, "line 1: expected 'ID HASH'")
