"""Group commit on SQLite: creates that wait for the write lock together share one transaction.

SQLite has one writer at a time, and this process's writers queue for it (store/turns.py).
A create's own statements run inline in a few hundred microseconds (store/sqlite_inline.py);
its BEGIN IMMEDIATE and its COMMIT (which writes every page the create touched to the log)
cost a third as much again. Creates that arrive while another write holds the lock share one
transaction instead: the first of them starts a group, a task that waits for the lock while
the others join it; once it has begun, the task runs each create's block in turn, each
inside a SAVEPOINT of its own so that a block that fails undoes its own writes only, then
one COMMIT for the group, and each create's caller gets its block's outcome once that
COMMIT is done (if it fails, every block fails with it, as each would have alone). The
pages the blocks share (index leaves, the tables' last pages) are written to the log once.

The blocks run one after the other in the group's task (so in the context of the create
that started it), with no turn of the event loop between them in WAL mode, where their
statements run inline: the lock is held for their work only, however busy the loop is.
Should SQLite end the whole transaction under a failing block (an I/O error, a full
disk: it may), every block of the group fails with it, as each would have alone.

Humans first: a write that is not shared (a decision, a claim: `Store.write`) closes the
group that is forming, so no create that arrives after it goes before it; the group waits
in the same queue as everyone, and takes at most `BLOCKS_MAX` blocks. A caller cancelled
before its block ran leaves nothing behind; once its block ran, its writes commit with the
group's (as a write cancelled during its COMMIT would).

PostgreSQL's writers do not queue for one lock (each has a connection and a transaction of
its own), and `Store.write_shared` runs the block in a write of its own there.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from store.errors import StoreUnavailable

if TYPE_CHECKING:
    from store.sqlite_inline import InlineConnection
    from store.statements import Statements

# Blocks in one group (each a few hundred microseconds on SQLite): the longest a decision
# queued behind the group waits for it.
BLOCKS_MAX = 16

# The transaction a block is given: store.repository.Tx, which this module does not import
# (store.repository imports this one).
T = TypeVar("T")


class Group(Generic[T]):
    """The blocks sharing one write transaction, and their callers' futures. A block is a
    caller's writes (store.repository.Block): it uses nothing but the transaction it is
    given."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.blocks: list[tuple[Callable[[T], Awaitable[Any]], asyncio.Future[Any]]] = []
        self.open = True  # until its transaction begins

    def has_room(self) -> bool:
        return self.open and len(self.blocks) < BLOCKS_MAX

    def add(self, block: Callable[[T], Awaitable[Any]]) -> asyncio.Future[Any]:
        """Join the group; the future gets the block's outcome once the group committed
        (cancelling it before the block ran takes the block out)."""
        outcome: asyncio.Future[Any] = self._loop.create_future()
        self.blocks.append((block, outcome))
        return outcome

    def close(self) -> list[tuple[Callable[[T], Awaitable[Any]], asyncio.Future[Any]]]:
        """The transaction has begun: nobody else joins; the blocks whose callers still
        wait, in arrival order."""
        self.open = False
        return [(block, outcome) for block, outcome in self.blocks if not outcome.done()]

    def fail(self, error: BaseException) -> None:
        """The transaction did not commit: every caller still waiting gets `error` (or, if
        the group's task itself was interrupted, an error of its own saying so)."""
        self.open = False
        for _, outcome in self.blocks:
            if outcome.done():
                continue
            if isinstance(error, Exception):
                outcome.set_exception(error)
            else:
                interrupted = StoreUnavailable(f"the shared write was interrupted ({error!r})")
                interrupted.__cause__ = error
                outcome.set_exception(interrupted)


class TransactionLost(StoreUnavailable):
    """SQLite ended the group's transaction under a failing block: the blocks before it were
    rolled back too, so the whole group fails."""


@asynccontextmanager
async def savepoint(tx: Statements, driver: InlineConnection, number: int) -> AsyncIterator[None]:
    """One block inside the group's transaction (on `driver`, its connection): undone alone
    if it raises, with the outbox leases it took (store/commits.py)."""
    mark = tx.jobs_mark()
    await driver.write_now(f"SAVEPOINT block_{number}")
    try:
        yield
    except BaseException as exc:
        if not driver.in_transaction:
            raise TransactionLost(f"SQLite ended the transaction: {exc}") from exc
        try:
            await driver.write_now(f"ROLLBACK TO block_{number}")
            await driver.write_now(f"RELEASE block_{number}")
        except Exception as broken:
            raise TransactionLost(f"could not undo a failed block: {broken}") from exc
        tx.drop_jobs_since(mark)
        raise
    await driver.write_now(f"RELEASE block_{number}")
