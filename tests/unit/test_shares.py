"""Fair shares of the outbox runner's slots: one destination, tenant or kind of job cannot
take them all, and a destination that keeps failing rests instead of holding slots."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

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
