"""JSON columns keep every value exactly, on both databases, now that orjson writes and reads
them (store/json_text.py): what went in is what a claim and a read hand back."""

from __future__ import annotations

from datetime import timedelta

from bot.intake import create_request, validate_request
from store.repository import Store
from tests.support.samples import request_body

PAYLOAD = {
    "target": "slack:@zoë",
    "bound": 2**70,  # past 64 bits: orjson alone would refuse it, and read it as a float
    "low": -(2**63),
    "digits": "12345678901234567890123",
    "amounts": [0.1, 1e16, 12000],
    "nested": {"none": None, "yes": True},
}


async def test_a_json_column_keeps_every_value(store: Store, clock) -> None:
    now = clock.now()
    async with store.write() as tx:
        await tx.enqueue("webhook", PAYLOAD, now=now)
    async with store.write() as tx:
        (job,) = await tx.claim_jobs(
            "holder", now=now, lease_until=now + timedelta(minutes=1), limit=5, kinds=["webhook"]
        )
    assert job.payload == PAYLOAD
    assert type(job.payload["bound"]) is int


async def test_a_json_column_holding_a_bare_number_reads_back(
    store: Store, directory, clock
) -> None:
    # SQLite stores the text 1.5 in a JSON column as the number 1.5 (the column's affinity).
    body = request_body(run_id="run-number", step=1.5, resume=12000)
    created = await create_request(store, directory, clock, "acme", validate_request(body))
    async with store.read() as tx:
        stored = await tx.get_approval(created.approval.id)
        (listed,) = await tx.page_approvals("acme", filters={}, before=None, limit=5)
    assert stored is not None and (stored.step, stored.resume) == (1.5, 12000)
    assert (listed.step, listed.resume) == (1.5, 12000)
