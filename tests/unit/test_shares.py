"""Fair shares of the outbox runner's slots: one destination, tenant or kind of job cannot
take them all, a destination that keeps failing rests instead of holding slots, and an
endpoint that timed out is probed one job at a time, leaving its host's other endpoints a
slot, until it answers again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bot.outbox import shares as shares_module
from bot.outbox.runner import OutboxSettings
from bot.outbox.shares import WAIT, Shares
from store.records import OutboxJob

NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
SETTINGS = OutboxSettings(concurrency=8, per_destination=2, per_tenant=3, failing_after=2)


def _job(job_id: int, kind: str = "webhook", **payload: Any) -> OutboxJob:
    return OutboxJob(
        id=job_id,
        kind=kind,
        payload=payload,
        dedupe_key=None,
        approval_id=None,
        state="queued",
        attempts=1,
        run_after=NOW,
        locked_by="w",
        locked_until=NOW,
        last_error=None,
        created_at=NOW,
        done_at=None,
    )


def _hook(job_id: int, host: str = "a.example", tenant: str = "acme") -> OutboxJob:
    return _job(job_id, url=f"https://{host}/hook", tenant=tenant)


def _shares() -> Shares:
    return Shares(SETTINGS, lambda n: timedelta(minutes=n))


def test_a_destination_gets_its_share_and_the_rest_wait() -> None:
    shares = _shares()
    assert shares.admit(_hook(1), NOW) is None
    assert shares.admit(_hook(2), NOW) is None
    assert shares.admit(_hook(3), NOW) == NOW + WAIT  # host a.example is full
    assert shares.admit(_hook(4, host="b.example"), NOW) is None  # another host is not
    assert shares.admit(_hook(5, host="c.example"), NOW) == NOW + WAIT  # acme's 3 are taken
    assert shares.admit(_hook(6, host="c.example", tenant="globex"), NOW) is None
    shares.done(_hook(1), True, NOW)
    assert shares.admit(_hook(3), NOW) is None  # a slot came back


def test_one_kind_of_job_cannot_take_every_slot() -> None:
    shares = _shares()
    admitted = [shares.admit(_job(i, kind="post_card", target="slack:C1"), NOW) for i in range(8)]
    assert admitted.count(None) == 6  # 0.75 of 8 slots
    assert shares.admit(_hook(99), NOW) is None  # webhooks still get through


def test_a_destination_that_keeps_failing_rests_and_recovers() -> None:
    shares = _shares()
    for job_id in (1, 2):
        assert shares.admit(_hook(job_id), NOW) is None
        shares.done(_hook(job_id), False, NOW)
    # Two failures in a row: it rests a minute (the runner's backoff), holding no slot.
    assert shares.admit(_hook(3), NOW) == NOW + timedelta(minutes=1)
    assert shares.admit(_hook(4, host="b.example"), NOW) is None
    later = NOW + timedelta(minutes=1)
    assert shares.admit(_hook(3), later) is None
    shares.done(_hook(3), False, later)
    assert shares.admit(_hook(5), later) == later + timedelta(minutes=2)  # a longer rest
    shares.done(_hook(4, host="b.example"), True, later)
    resumed = later + timedelta(minutes=2)
    assert shares.admit(_hook(5), resumed) is None
    shares.done(_hook(5), True, resumed)  # a success ends the rest
    assert shares.admit(_hook(6), resumed) is None


# Rests out of the way (failing_after): these tests are about probing.
PROBED = OutboxSettings(
    concurrency=32, per_destination=4, per_tenant=32, probe_wait=10.0, failing_after=100
)


def _to(job_id: int, path: str, host: str = "a.example") -> OutboxJob:
    return _job(job_id, url=f"https://{host}{path}?n={job_id}", tenant="acme")


def test_an_endpoint_that_timed_out_is_probed_alone_and_its_host_keeps_a_slot() -> None:
    shares = Shares(PROBED, lambda n: timedelta(minutes=n))
    for job_id in range(4):  # not known to hang yet: the host's whole share
        assert shares.admit(_to(job_id, "/hang"), NOW) is None
    for job_id in range(4):
        shares.done(_to(job_id, "/hang"), False, NOW, timed_out=True)
    assert shares.probing(_to(9, "/hang")) and shares.waits_in_queue(_to(9, "/hang"), NOW)
    assert not shares.probing(_to(9, "/hook"))
    assert shares.admit(_to(10, "/hang"), NOW) is None  # the probe
    # Its other jobs wait about one timeout; the query is no other endpoint.
    assert shares.admit(_to(11, "/hang"), NOW) == NOW + timedelta(seconds=10)
    assert [shares.admit(_to(20 + i, "/hook"), NOW) for i in range(3)] == [None] * 3
    # Other hung paths of the host: probed too, together one slot less than the host has.
    for job_id, path in ((30, "/b"), (31, "/c"), (32, "/d")):
        shares.done(_to(job_id, path), False, NOW, timed_out=True)
    for job_id in range(20, 23):
        shares.done(_to(job_id, "/hook"), True, NOW)
    assert shares.admit(_to(40, "/b"), NOW) is None
    assert shares.admit(_to(41, "/c"), NOW) is None
    assert shares.admit(_to(42, "/d"), NOW) == NOW + timedelta(seconds=10)  # 3 probes of 4
    assert shares.admit(_to(43, "/hook"), NOW) is None  # the slot kept for the rest


def test_a_probed_endpoint_that_answers_gets_its_full_share_back() -> None:
    shares = Shares(PROBED, lambda n: timedelta(minutes=n))
    shares.done(_to(1, "/hang"), False, NOW, timed_out=True)
    assert shares.admit(_to(2, "/hang"), NOW) is None
    shares.done(_to(2, "/hang"), True, NOW)  # it answered
    assert not shares.probing(_to(3, "/hang"))
    assert [shares.admit(_to(3 + i, "/hang"), NOW) for i in range(4)] == [None] * 4
    # An answer that is an error ends the probing too: it answers, so it does not hang.
    shares.done(_to(3, "/hang"), False, NOW, timed_out=True)
    shares.done(_to(4, "/hang"), False, NOW)
    assert not shares.probing(_to(9, "/hang"))


def test_a_path_that_keeps_failing_rests_alone() -> None:
    shares = _shares()  # failing_after=2
    for job_id in (1, 2):
        assert shares.admit(_to(job_id, "/broken"), NOW) is None
        shares.done(_to(job_id, "/broken"), False, NOW)
    assert shares.admit(_to(3, "/broken"), NOW) == NOW + timedelta(minutes=1)
    assert shares.admit(_to(4, "/hook"), NOW) is None  # the same host's other path goes on


def test_what_is_remembered_of_endpoints_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shares_module, "_REMEMBERED", 3)
    shares = Shares(PROBED, lambda n: timedelta(minutes=n))
    for job_id in range(10):  # a callback path of its own per request, each timing out
        shares.done(_to(job_id, f"/run/{job_id}"), False, NOW, timed_out=True)
    assert [shares.probing(_to(j, f"/run/{j}")) for j in range(10)] == [False] * 7 + [True] * 3
