"""Group commit on SQLite: creates that wait for the write lock together share one transaction.

SQLite has one writer at a time, and this process's writers queue for it (store/turns.py).
A create's own statements run inline in a few hundred microseconds (store/sqlite_inline.py);
its BEGIN IMMEDIATE and its COMMIT (which writes every page the create touched to the log)
cost a third as much again. Creates that arrive while another write holds the lock share
the transaction of the first of them to wait (the group's lead): each runs its own block in
turn, inside a SAVEPOINT of its own, so a block that fails undoes its own writes only; then
one COMMIT for the group, and each block's caller goes on once that COMMIT is done (if it
fails, every member fails with it, as each would have alone). The pages the members share
(index leaves, the tables' last pages) are written to the log once.

Humans first: a write that is not shared (a decision, a claim: `Store.write`) closes the
group that is forming, so no create that arrives after it goes before it; the group's lead
waits in the same queue as everyone. A group takes at most `MEMBERS_MAX` members, so a
decision waits for at most that many creates.

PostgreSQL's writers do not queue for one lock (each has a connection and a transaction of
its own), and `Store.write_shared` is `Store.write` there.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from store.repository import Tx
    from store.sqlite_inline import InlineConnection

# Members of one group, its lead included: a decision queued behind a group waits for at most
# this many creates (each a few hundred microseconds on SQLite).
MEMBERS_MAX = 16


class Member:
    """One caller waiting in a group for its turn to run its block."""

    __slots__ = ("done", "turn")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.turn: asyncio.Future[int] = loop.create_future()  # its savepoint's number
        self.done: asyncio.Future[None] = loop.create_future()  # its block has ended


class Group:
    """The callers sharing one write transaction: its lead, and those that joined before the
    lead began it."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.members: list[Member] = []
        self.open = True  # until the lead begins the transaction
        self.tx: Tx | None = None
        self.driver: InlineConnection | None = None
        # The COMMIT's outcome, for the members (the lead sees it first hand).
        self.committed: asyncio.Future[None] = self._loop.create_future()

    def has_room(self) -> bool:
        return self.open and len(self.members) + 1 < MEMBERS_MAX

    def join(self) -> Member:
        member = Member(self._loop)
        self.members.append(member)
        return member

    def close(self, tx: Tx, driver: InlineConnection) -> list[Member]:
        """The transaction has begun: no one else joins; the members, in arrival order."""
        self.open = False
        self.tx, self.driver = tx, driver
        return self.members

    def leave(self, member: Member) -> None:
        """A member cancelled while it waited for its turn: out of the group, or once the
        group has begun, done at once, having written nothing."""
        if self.open:
            self.members.remove(member)
        elif not member.done.done():
            member.done.set_result(None)

    def end(self, error: BaseException | None) -> None:
        """The lead's transaction is over: committed (`error` None) or not. Members still
        waiting for a turn the lead never began are orphaned: each goes on alone."""
        self.open = False
        for member in self.members:
            if not member.turn.done():
                member.turn.set_exception(Orphaned())
        if error is None:
            self.committed.set_result(None)
        else:
            self.committed.set_exception(error)
            self.committed.exception()  # retrieved: a group with no member left logs nothing


class Orphaned(Exception):
    """The group's lead ended (cancelled, or its BEGIN failed) before its transaction began:
    the member writes on its own."""


@asynccontextmanager
async def savepoint(tx: Tx, driver: InlineConnection, number: int) -> AsyncIterator[None]:
    """A member's block inside the group's transaction (on `driver`, its connection): undone
    alone if it raises, with the outbox leases it took (store/commits.py)."""
    held, leased = len(tx.held), tx.leased
    await driver.write_now(f"SAVEPOINT member_{number}")
    try:
        yield
    except BaseException:
        await driver.write_now(f"ROLLBACK TO member_{number}")
        await driver.write_now(f"RELEASE member_{number}")
        given = tx.leased - leased
        del tx.held[held:]
        tx.leased = leased
        if given and tx.taker is not None:
            tx.taker.take([], given)  # its jobs came to nothing
        raise
    await driver.write_now(f"RELEASE member_{number}")


async def unless_cancelled(done: Awaitable[Any]) -> bool:
    """Wait for `done` even if cancelled meanwhile (the lead must not end a transaction a
    member's block is still writing in); whether a cancellation came."""
    cancelled = False
    waiting = asyncio.ensure_future(done)
    while True:
        try:
            await asyncio.shield(waiting)
            return cancelled
        except asyncio.CancelledError:
            if waiting.done():
                return True
            cancelled = True
