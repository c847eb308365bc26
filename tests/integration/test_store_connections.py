"""The connections a `Store` keeps open between its transactions (store/connections.py): the
next transaction on a kept connection starts clean, whatever the last one did.

- A write cancelled while it holds its transaction (a client gone, a shutdown) leaves
  nothing behind: what it wrote is not there, and the next write on the store commits.
- A write that fails, and a read that fails, hand on no half-done state either.
- A transaction that has to queue for the pool is served in turn while the load goes on.
"""

from __future__ import annotations

import asyncio

import pytest

from store.repository import Store


async def test_a_write_cancelled_mid_transaction_leaves_nothing_and_the_next_one_commits(
    db_url: str, clock
) -> None:
    store = Store.from_url(db_url)
    try:
        inside = asyncio.Event()

        async def stuck() -> None:
            async with store.write() as tx:
                await tx.enqueue("webhook", {"stuck": True}, now=clock.now())
                inside.set()
                await asyncio.sleep(60)  # cancelled here, its transaction open

        task = asyncio.create_task(stuck())
        await asyncio.wait_for(inside.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        async with store.write() as tx:
            await tx.enqueue("webhook", {"after": True}, now=clock.now())
        async with store.read() as tx:
            payloads = [job.payload for job in await tx.outbox_jobs()]
        assert payloads == [{"after": True}]
    finally:
        await store.close()


async def test_failed_transactions_hand_on_no_half_done_state(db_url: str, clock) -> None:
    store = Store.from_url(db_url)
    try:
        for i in range(5):
            with pytest.raises(RuntimeError):
                async with store.write() as tx:
                    await tx.enqueue("webhook", {"failed": i}, now=clock.now())
                    raise RuntimeError("changed my mind")
            with pytest.raises(RuntimeError):
                async with store.read() as tx:
                    await tx.outbox_jobs()
                    raise RuntimeError("lost interest")
            async with store.write() as tx:
                await tx.enqueue("webhook", {"kept": i}, now=clock.now())
        async with store.read() as tx:
            payloads = [job.payload for job in await tx.outbox_jobs()]
        assert payloads == [{"kept": i} for i in range(5)]
    finally:
        await store.close()


async def test_a_transaction_queued_for_the_pool_is_served_while_the_load_goes_on(
    db_url: str, clock
) -> None:
    """Many readers at once, more than the pool holds, for up to 5 s: a write that has to queue
    for a connection (the outbox claiming a card's job among agents' creates) gets one within
    a second, not when the readers stop."""
    store = Store.from_url(db_url)  # the defaults serve uses
    size = store.engine.sync_engine.pool.size()
    stop = asyncio.Event()
    reads = 0

    async def reader() -> None:
        nonlocal reads
        while not stop.is_set():
            async with store.read() as tx:
                await tx.outbox_jobs()
            reads += 1
            await asyncio.sleep(0)  # as a request's handler goes on to answer its client

    readers = [asyncio.create_task(reader()) for _ in range(3 * size)]
    try:
        await asyncio.sleep(0.3)  # every connection taken, readers queued for more
        began = asyncio.get_running_loop().time()
        async with asyncio.timeout(5):
            async with store.write() as tx:
                await tx.enqueue("webhook", {"queued": True}, now=clock.now())
        waited = asyncio.get_running_loop().time() - began
        assert not any(task.done() for task in readers), "the load stopped before the write"
        assert waited < 1.0, f"the write waited {waited:.2f} s for a connection"
        before = reads
        await asyncio.sleep(0.1)
        assert reads > before, "the readers kept going meanwhile"
    finally:
        stop.set()
        # Readers starved in the pool's queue would wait out its 30 s timeout.
        _, starved = await asyncio.wait(readers, timeout=5)
        for task in starved:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        await store.close()
