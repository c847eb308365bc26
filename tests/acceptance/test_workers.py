"""`signoff serve --workers N` as a real process tree, on both databases.

Proves that N worker processes behind one port act as one server: concurrent creates from
many clients land once each (the same call asked at once through different workers is one
approval), every worker's outbox delivers, SIGTERM drains them all with exit 0, a `kill -9`
of the server takes its workers with it and loses nothing, a worker that dies while serving
is replaced, a config no worker could run is refused before any starts, and a worker that
dies before it serves stops the server and its other workers with exit 1 (the server says it
listens only once every worker serves).
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.cli import Cli, assert_refused
from tests.support.process_tree import alive, children, started_workers
from tests.support.samples import request_body
from tests.support.service import (
    API_KEYS,
    Fleet,
    WebhookReceiver,
    deploy,
    service_config,
    service_env,
    wait_until,
    write_config,
)


def test_workers_share_one_port_and_each_call_is_one_approval(db_url: str, tmp_path: Path) -> None:
    with WebhookReceiver() as hooks, deploy(tmp_path, db_url, hooks) as fleet:
        server = fleet.start(args=("--workers", "3"))
        workers = wait_until(lambda: len(children(server.pid)) == 3 and children(server.pid))
        api = server.api()

        # 120 different calls from 24 clients at once: each created once.
        bodies = [request_body(run_id=f"run-{i}") for i in range(120)]
        with ThreadPoolExecutor(24) as pool:
            created = list(pool.map(lambda b: api.post("/v1/approvals", b), bodies))
        assert [r.status for r in created] == [201] * 120, [
            r.body for r in created if r.status != 201
        ]
        assert len({r.body["id"] for r in created}) == 120

        # One call asked 24 times at once: one approval, created by exactly one answer.
        same = request_body(run_id="run-same")
        with ThreadPoolExecutor(24) as pool:
            asked = list(pool.map(lambda _: api.post("/v1/approvals", same), range(24)))
        assert sorted(r.status for r in asked) == [200] * 23 + [201], [r.body for r in asked]
        assert len({r.body["id"] for r in asked}) == 1

        listed = api.get("/v1/approvals?state=pending&limit=200")
        assert listed.status == 200, listed
        assert len(listed.body["approvals"]) == 121
        # Nothing restarted under the load.
        assert children(server.pid) == workers


def test_every_worker_delivers_webhooks_and_sigterm_drains_all_with_exit_0(
    db_url: str, tmp_path: Path
) -> None:
    with WebhookReceiver() as hooks, deploy(tmp_path, db_url, hooks) as fleet:
        server = fleet.start(args=("--workers", "2"))
        workers = wait_until(lambda: len(children(server.pid)) == 2 and children(server.pid))
        api = server.api()
        ids = []
        for i in range(20):
            created = api.post("/v1/approvals", request_body(run_id=f"run-{i}"))
            assert created.status == 201, created
            cancelled = api.post(f"/v1/approvals/{created.body['id']}/cancel", {"reason": "test"})
            assert cancelled.status == 200, cancelled
            ids.append(created.body["id"])
        wait_until(
            lambda: {d.json()["approval"]["id"] for d in hooks.deliveries} >= set(ids),
            what="a cancellation webhook for every approval",
        )
        assert server.terminate(timeout=20) == 0, server.log
        assert not any(alive(pid) for pid in workers)
        assert "Traceback" not in server.log


def test_kill9_of_the_server_takes_its_workers_and_loses_nothing(
    db_url: str, tmp_path: Path
) -> None:
    with WebhookReceiver() as hooks, deploy(tmp_path, db_url, hooks) as fleet:
        first = fleet.start(args=("--workers", "2"))
        workers = wait_until(lambda: len(children(first.pid)) == 2 and children(first.pid))
        created = [
            first.api().post("/v1/approvals", request_body(run_id=f"run-{i}")) for i in range(10)
        ]
        assert [r.status for r in created] == [201] * 10
        first.kill9()
        wait_until(lambda: not any(alive(pid) for pid in workers), 10, "workers gone")

        second = fleet.start(args=("--workers", "2"))
        for record in created:
            found = second.api().get(f"/v1/approvals/{record.body['id']}")
            assert (found.status, found.body["state"]) == (200, "pending")


def test_a_worker_that_dies_while_serving_is_replaced(tmp_path: Path, sqlite_url_for) -> None:
    with WebhookReceiver() as hooks, deploy(tmp_path, sqlite_url_for(tmp_path), hooks) as fleet:
        server = fleet.start(args=("--workers", "2"))
        before = wait_until(lambda: len(children(server.pid)) == 2 and children(server.pid))
        # Both serving: each has started its background work (named host:pid:...), and its
        # site starts right after.
        wait_until(lambda: all(f":{pid}:" in server.log for pid in before))
        time.sleep(0.5)
        os.kill(before[0], signal.SIGKILL)
        after = wait_until(
            lambda: (
                (kids := children(server.pid)) and len(kids) == 2 and before[0] not in kids and kids
            ),
            what="a replacement worker",
        )
        assert before[1] in after
        assert "exited with -9" in server.log
        # The replacement serves: every request below is answered, whichever worker takes it.
        for i in range(10):
            assert server.api().post("/v1/approvals", request_body(run_id=f"r-{i}")).status == 201
        assert server.proc is not None and server.proc.poll() is None


def test_a_key_shared_by_two_tenants_is_refused_before_any_worker_starts(
    db_url: str, tmp_path: Path
) -> None:
    # Each worker would refuse it while building its application, each with a traceback of
    # its own after the parent had said it was serving; refused once, in one line, instead.
    with WebhookReceiver() as hooks:
        path = write_config(tmp_path / "signoff.toml", service_config(db_url, hooks.url))
        env = {**service_env(path), "SIGNOFF_GLOBEX_API_KEY": API_KEYS["acme"]}
        result = Cli(cwd=tmp_path, env=env).run("serve", "--workers", "2")
    assert_refused(result, "tenants 'acme' and 'globex' have the same API key")


class SilentTelegram:
    """A Bot API address that accepts connections and never answers, as behind a firewall
    that drops replies: a worker's getMe waits on it (PTB's read timeout, 10 s) before the
    worker serves, which holds every worker in its start-up. `connections` counts them."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)
        self.accepted: list[socket.socket] = []
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}/bot"

    @property
    def connections(self) -> int:
        return len(self.accepted)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            self.accepted.append(conn)

    def __enter__(self) -> SilentTelegram:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._closed.set()
        self._thread.join(5)
        for conn in [*self.accepted, self.listener]:
            conn.close()


def test_a_worker_killed_before_serving_stops_the_others_and_the_server_exits_1(
    db_url: str, tmp_path: Path
) -> None:
    with WebhookReceiver() as hooks, SilentTelegram() as telegram:
        config = service_config(db_url, hooks.url, telegram={"api_base_url": telegram.base_url})
        env = {"TELEGRAM_BOT_TOKEN": "123456:TEST-token", "TELEGRAM_WEBHOOK_SECRET": "s3cret"}
        with Fleet(write_config(tmp_path / "signoff.toml", config), tmp_path, env) as fleet:
            server = fleet.start(args=("--workers", "2"), ready=False)
            # Both workers are waiting on getMe: started, neither serving yet, and the server
            # does not say it listens.
            wait_until(lambda: telegram.connections == 2, what="both workers asking getMe")
            workers = started_workers(server.log)
            assert len(workers) == 2, server.log
            assert "listening" not in server.log, server.log
            os.kill(workers[0], signal.SIGKILL)
            assert server.proc is not None
            # Well inside the 10 s the other worker would wait before serving: it is stopped by
            # the parent, not left to serve alone, and the dead one is not started again.
            assert server.proc.wait(8) == 1, server.log
            # The log's last lines may still be in the pipe its reader thread drains.
            wait_until(lambda: "worker 0 died before serving" in server.log, 5, "the reason")
            assert started_workers(server.log) == workers, server.log
            assert not any(alive(pid) for pid in workers.values())


def test_an_unusable_database_stops_serve_with_workers_in_one_line(tmp_path: Path) -> None:
    db = tmp_path / "signoff.db"
    db.mkdir()  # a directory where the database file should be
    with WebhookReceiver() as hooks:
        path = write_config(
            tmp_path / "signoff.toml", service_config(f"sqlite+aiosqlite:///{db}", hooks.url)
        )
        result = Cli(cwd=tmp_path, env=service_env(path)).run("serve", "--workers", "2")
        assert_refused(result, "cannot open the SQLite database", "it is a directory")


def test_telegram_polling_with_several_workers_is_refused_in_one_line(tmp_path: Path) -> None:
    with WebhookReceiver() as hooks:
        config = service_config(f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}", hooks.url)
        path = write_config(tmp_path / "signoff.toml", config)
        cli = Cli(cwd=tmp_path, env=service_env(path))
        result = cli.run("serve", "--workers", "2", "--telegram-polling")
        assert_refused(result, "--telegram-polling", "--workers 1")
        result = cli.run("serve", "--workers", "0")
        assert_refused(result, "--workers must be at least 1")


@pytest.fixture
def sqlite_url_for():
    return lambda tmp: f"sqlite+aiosqlite:///{tmp / 'signoff.db'}"


def test_without_options_serve_runs_one_server_process(tmp_path: Path, db_url: str) -> None:
    """A second worker on the same cores made clicks slower until one worker was saturated,
    on both databases (docs/benchmarks.md, issue 27): one server process unless asked; and
    on PostgreSQL with a second core, a background process beside it (measured sooner
    clicks and effects there), never on SQLite."""
    with WebhookReceiver() as hooks:
        path = write_config(tmp_path / "signoff.toml", service_config(db_url, hooks.url))
        proc = Cli(cwd=tmp_path, env=service_env(path)).start("serve")
        try:
            assert proc.stderr is not None
            # The parent says it listens once every worker serves: by then all were forked.
            log = ""
            for line in proc.stderr:  # bounded by the test's timeout
                log += line
                if "listening on" in line:
                    break
            background = db_url.startswith("postgresql") and (os.cpu_count() or 1) >= 2
            if background:
                [server, outbox] = children(proc.pid)
                assert started_workers(log) == {0: server, 1: outbox}, log
            else:
                assert children(proc.pid) == []
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(20) == 0
        finally:
            proc.kill()
