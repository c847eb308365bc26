"""Bulk decisions (bot/bulk.py) on SQLite and PostgreSQL: each pair is its own decision, so a
request decided or changed meanwhile is refused alone and the others are decided."""

from __future__ import annotations

import pytest

from bot.bulk import decide_each, read_pairs
from bot.clock import FakeClock
from bot.config import parse_config
from bot.errors import ApprovalChanged, InvalidRequest, NotPending
from bot.intake import create_request
from bot.operator import Actor, Operator
from store.repository import Store
from tests.support.samples import TEST_CONFIG, make_request


async def test_each_request_is_decided_against_its_own_hash(store: Store, clock: FakeClock) -> None:
    directory = parse_config(TEST_CONFIG).directory()
    operator = Operator(store, directory, clock)
    made = [
        (
            await create_request(store, directory, clock, "acme", make_request(run_id=f"r{i}"))
        ).approval
        for i in range(4)
    ]
    await operator.reject_shown(made[1].id, made[1].hash, Actor("bob", "web"))
    pairs = [(a.id, a.hash) for a in made]
    pairs[2] = (made[2].id, "ab" * 32)  # a hash nobody was shown
    outcomes = await decide_each(operator, "approve", pairs, Actor("alice", "web"), "batch")
    assert [o.approval_id for o in outcomes] == [a.id for a in made]
    assert [o.ok for o in outcomes] == [True, False, False, True]
    assert isinstance(outcomes[1].refused, NotPending)
    assert isinstance(outcomes[2].refused, ApprovalChanged)
    async with store.read() as tx:
        states = [(await tx.get_approval(a.id)).state for a in made]  # type: ignore[union-attr]
    assert states == ["approved", "rejected", "pending", "approved"]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "no requests to decide"),
        ("abc sha256:xyz", "line 1: expected 'ID HASH'"),
        (f"a {'0' * 64}\na {'1' * 64}", "a is named twice"),
    ],
)
def test_a_bulk_file_that_cannot_be_read_decides_nothing(text: str, words: str) -> None:
    with pytest.raises(InvalidRequest, match=words):
        read_pairs(text)
