"""`signoff serve --background-process` as a real process tree, on both databases.

Proves that the outbox runner and the sweeper run in the one process of their own and in no
server process, that a decision taken through a server process gets its webhook from that
process, that a `kill -9` of the background process loses nothing (it is started again,
and what was queued while it was gone is delivered), and that SIGTERM stops both with exit 0.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

from tests.support.process_tree import alive, children, started_workers
from tests.support.samples import request_body
from tests.support.service import ServerProcess, WebhookReceiver, deploy, wait_until

# "outbox runner HOST:PID:TAIL and sweeper started", once per process that runs them.
_RUNNER = re.compile(r"outbox runner [^:\s]+:(\d+):\w+ and sweeper started")


def cancel_some(server: ServerProcess, run: str, count: int) -> list[str]:
    """`count` new requests, each cancelled at once (a decision with a webhook); their ids."""
    ids = []
    for i in range(count):
        created = server.api().post("/v1/approvals", request_body(run_id=f"{run}-{i}"))
        assert created.status == 201, created
        cancelled = server.api().post(
            f"/v1/approvals/{created.body['id']}/cancel", {"reason": "test"}
        )
        assert cancelled.status == 200, cancelled
        ids.append(created.body["id"])
    return ids


def delivered(hooks: WebhookReceiver) -> set[str]:
    return {d.json()["approval"]["id"] for d in hooks.deliveries}


def test_the_background_work_runs_in_its_own_process_and_survives_kill9(
    db_url: str, tmp_path: Path
) -> None:
    with WebhookReceiver() as hooks, deploy(tmp_path, db_url, hooks) as fleet:
        server = fleet.start(args=("--background-process",))
        wait_until(lambda: len(children(server.pid)) == 2, what="a server and a background process")
        slots = started_workers(server.log)
        assert sorted(slots) == [0, 1], server.log
        assert "worker 1 started" in server.log and "the outbox and the sweeper" in server.log
        # Only the background process runs an outbox (a runner is named after its pid).
        runners = wait_until(lambda: _RUNNER.findall(server.log), what="the runner's start")
        assert [int(pid) for pid in runners] == [slots[1]], server.log

        first = cancel_some(server, "before", 5)
        wait_until(lambda: delivered(hooks) >= set(first), what="webhooks from the background")

        # Killed: the server process goes on accepting and deciding; the replacement delivers
        # what was queued meanwhile.
        os.kill(slots[1], signal.SIGKILL)
        wait_until(lambda: not alive(slots[1]), 10, "the background process gone")
        meanwhile = cancel_some(server, "meanwhile", 5)
        replaced = wait_until(
            lambda: (pid := started_workers(server.log)[1]) != slots[1] and pid,
            what="a replacement background process",
        )
        assert "exited with -9" in server.log
        wait_until(lambda: delivered(hooks) >= set(meanwhile), 30, "the queued webhooks")
        assert started_workers(server.log)[0] == slots[0]  # the server process never stopped
        assert [int(pid) for pid in _RUNNER.findall(server.log)] == [slots[1], replaced]

        assert server.terminate(timeout=20) == 0, server.log
        assert not any(alive(pid) for pid in (slots[0], replaced))
        assert "Traceback" not in server.log
