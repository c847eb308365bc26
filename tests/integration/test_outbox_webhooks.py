"""Signed webhooks, on real SQLite and PostgreSQL, against a real webhook receiver on
loopback (tests/support/webhook_rig.py), with a FakeClock.

Proves: a decision's webhook arrives signed and verifiable (Standard Webhooks); while a
secret is being rotated each webhook is signed with both; a secret that is not set, or that
no receiver could rebuild, means nothing is sent, never an unsigned webhook; and whatever
create accepts, however deeply nested, its webhook can carry.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import aiohttp
import pytest

from bot.canonical import MAX_DEPTH
from bot.clock import FakeClock
from bot.config import parse_config
from bot.errors import NotCanonical
from bot.routing import Directory
from store.repository import Store
from tests.support.samples import TEST_CONFIG, standard_webhook_signature
from tests.support.webhook_rig import (
    NEXT_SECRET,
    SECRET,
    Receiver,
    approved,
    job_of,
    webhook_runner,
)


async def test_a_decision_webhook_arrives_signed(
    store: Store,
    hooked: Directory,
    clock: FakeClock,
    receiver: Receiver,
    session: aiohttp.ClientSession,
) -> None:
    approval = await approved(store, hooked, clock)
    assert await webhook_runner(store, hooked, clock, session).run_once() == 1
    [(headers, body)] = receiver.received
    # Standard Webhooks, signed at the Operator's clock (a FakeClock here, so the signature is
    # recomputed from the specification rather than checked against the wall clock).
    timestamp = int(clock.now().timestamp())
    assert headers["webhook-id"] == f"{approval.id}.2"
    assert headers["webhook-timestamp"] == str(timestamp)
    assert headers["webhook-signature"] == standard_webhook_signature(
        SECRET, f"{approval.id}.2", timestamp, body
    )
    assert json.loads(body)["approval"]["state"] == "approved"
    job = await job_of(store, approval.id)
    assert (job.state, job.attempts, job.locked_by) == ("done", 1, None)


async def test_a_missing_secret_never_sends_unsigned(
    store: Store,
    hooked: Directory,
    clock: FakeClock,
    receiver: Receiver,
    session: aiohttp.ClientSession,
) -> None:
    approval = await approved(store, hooked, clock)
    await webhook_runner(store, hooked, clock, session, environ={}).run_once()
    assert receiver.received == []
    job = await job_of(store, approval.id)
    assert "$ACME_SECRET: it is not set" in job.last_error


async def test_while_rotating_each_webhook_is_signed_with_both_secrets(
    store: Store,
    receiver: Receiver,
    clock: FakeClock,
    session: aiohttp.ClientSession,
) -> None:
    config = copy.deepcopy(TEST_CONFIG)
    config["tenants"][0] = {
        "name": "acme",
        "webhook_url": receiver.url,
        "webhook_secret_env": ["ACME_SECRET", "ACME_NEXT_SECRET"],
    }
    rotating = parse_config(config).directory()
    approval = await approved(store, rotating, clock)
    environ = {"ACME_SECRET": SECRET, "ACME_NEXT_SECRET": NEXT_SECRET}
    await webhook_runner(store, rotating, clock, session, environ=environ).run_once()
    [(headers, body)] = receiver.received
    timestamp, delivery = int(clock.now().timestamp()), f"{approval.id}.2"
    assert headers["webhook-signature"].split(" ") == [
        standard_webhook_signature(secret, delivery, timestamp, body)
        for secret in (SECRET, NEXT_SECRET)
    ]


async def test_a_secret_no_receiver_could_rebuild_is_never_used(
    store: Store,
    hooked: Directory,
    clock: FakeClock,
    receiver: Receiver,
    session: aiohttp.ClientSession,
) -> None:
    approval = await approved(store, hooked, clock)
    await webhook_runner(
        store, hooked, clock, session, environ={"ACME_SECRET": "s3cret"}
    ).run_once()
    assert receiver.received == []
    job = await job_of(store, approval.id)
    assert "$ACME_SECRET: it does not start with whsec_" in job.last_error


def _nested(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = {"n": value}
    return value


async def test_whatever_create_accepts_its_webhook_can_carry(
    store: Store,
    hooked: Directory,
    clock: FakeClock,
    session: aiohttp.ClientSession,
    receiver: Receiver,
) -> None:
    """The webhook holds the record a level deeper than the request held it: the deepest
    request create accepts is still delivered, and one level more is refused at create, not
    left to fail at send time where the agent would never hear the decision."""
    deepest = {"name": "t", "arguments": {"deep": _nested(MAX_DEPTH - 4)}}  # 63 levels in all
    approval = await approved(store, hooked, clock, "r-deep", tool=deepest)
    await webhook_runner(store, hooked, clock, session).run_once()
    [(_, raw)] = receiver.received
    assert json.loads(raw)["approval"]["tool"] == deepest
    too_deep = {"name": "t", "arguments": {"deep": _nested(MAX_DEPTH - 3)}}
    with pytest.raises(NotCanonical, match="nested deeper than 63 levels"):
        await approved(store, hooked, clock, "r-deeper", tool=too_deep)
    assert approval.state == "approved"
