"""Transactions over the database, and `Tx`: every SQL statement signoff runs, one method each.

`Store.write()` opens a write transaction (BEGIN IMMEDIATE on SQLite; this process's writers
take turns, store/turns.py), `Store.read()` a read one; both yield a `Tx` whose methods are
the statements. Callers compose a transition from them (lock, conditional update, audit
event, outbox jobs) inside one transaction. Driver errors are translated into signoff's own
errors (store.engine.translated_errors).

`Tx` is composed of one class per table family, each in its own module: approvals
(store/approvals.py) and their clocks (store/clocks.py), reads of many approvals
(store/listings.py, store/dashboard.py), the audit trail (store/events.py), votes
(store/votes.py), refusal counts (store/refusals.py), outbox jobs (store/outbox.py), chat
messages (store/chat.py), delegations (store/delegations.py), sign-in links
(store/web_logins.py), the email surface's decision links (store/email_links.py) and the
embed tokens (store/embed_tokens.py); what they share is store/statements.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from store.approvals import ApprovalStatements
from store.chat import ChatStatements
from store.clocks import ClockStatements
from store.commits import ApprovalMoves, CommitSignal, watch_approvals, watch_commits
from store.connections import Held, IdleConnections, Queued
from store.dashboard import DashboardStatements
from store.delegations import DelegationStatements
from store.email_links import EmailLinkStatements
from store.embed_tokens import EmbedTokenStatements
from store.engine import (
    BEGIN_MODE,
    NO_BEGIN,
    POSTGRES_POOL,
    SQLITE_READERS,
    WriterLock,
    create_engine,
    is_sqlite,
    translated_errors,
)
from store.events import EventStatements
from store.listings import ListingStatements
from store.outbox import OutboxStatements
from store.refusals import RefusalStatements
from store.shared_writes import Group, TransactionLost, savepoint
from store.sqlite_inline import Checkpoints
from store.standing_grants import StandingGrantStatements
from store.turns import WriteTurns
from store.votes import VoteStatements
from store.web_logins import WebLoginStatements


class Store:
    """A database handle: opens transactions, owns the engine."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        sqlite = is_sqlite(engine)
        self._writer = engine  # PostgreSQL's; SQLite's writes begin on their own
        # Reads begin no transaction on either database: each statement stands alone, and no
        # BEGIN or ROLLBACK costs a round trip (PostgreSQL: autocommit, SQLite: NO_BEGIN).
        self._reader = engine.execution_options(
            **({BEGIN_MODE: NO_BEGIN} if sqlite else {"isolation_level": "AUTOCOMMIT"})
        )
        # SQLite admits one writer per file. Queueing this process's writers here, instead of
        # letting them all contend for the file lock, spares them SQLite's busy-wait sleeps
        # (which grow to 100 ms); other processes still wait on busy_timeout.
        self._write_turn: WriteTurns | None = WriteTurns() if sqlite else None
        # ... and across processes on one host (`serve --workers`), an flock beside the file.
        self._file_turn = WriterLock.for_engine(engine)
        # Connections kept open between transactions (store/connections.py): on SQLite one
        # kind serves reads and writes (both begin on their own), on PostgreSQL reads run in
        # autocommit and writes not.
        keep = SQLITE_READERS if sqlite else POSTGRES_POOL // 2 - 1
        queued = Queued()  # both take from the one pool
        self._readers = IdleConnections(self._reader, keep, queued)
        self._writers = self._readers if sqlite else IdleConnections(self._writer, keep, queued)
        # SQLite's checkpoints, off the event loop's thread (store/sqlite_inline.py).
        self._checkpoints = (
            Checkpoints(self._readers.connection, self._writer_turn) if sqlite else None
        )
        self.commits = CommitSignal()
        self.moves = ApprovalMoves()
        # Creates waiting together for SQLite's write lock, and the groups' tasks
        # (store/shared_writes.py).
        self._forming: Group[Tx] | None = None
        self._groups: set[asyncio.Task[None]] = set()

    @classmethod
    def from_url(cls, url: str, **engine_kwargs: Any) -> Store:
        return cls(create_engine(url, **engine_kwargs))

    async def close(self) -> None:
        # Writes some caller began: committed (or failed) before the connections go.
        while self._groups:
            await asyncio.gather(*self._groups, return_exceptions=True)
        if self._checkpoints is not None:
            await self._checkpoints.close()
        await self._readers.close()
        await self._writers.close()
        await self.engine.dispose()
        if self._file_turn is not None:
            self._file_turn.close()

    def write(self, *, background: bool = False) -> AbstractAsyncContextManager[Tx]:
        """A write transaction; commits when the block exits normally, rolls back otherwise.

        `background`: work nobody is waiting on (the outbox's claims and settles). On SQLite
        its turn comes after the turns of writers someone waits on (a click, an API call),
        so a burst of outbox work does not queue in front of a person's decision."""
        # `_write` itself, not a context manager around it: one layer less on every write,
        # and `write_alone` shares it without going through this method.
        return self._write(background)

    @asynccontextmanager
    async def write_alone(self, *, background: bool = False) -> AsyncIterator[Tx]:
        """A write of one statement that queues no outbox job (the replay guard's record of
        a delivery, the outbox's claim): one statement is atomic on its own. On PostgreSQL
        it runs in autocommit, sparing the round trips of BEGIN and COMMIT (two of a Slack
        click's three for it); on SQLite it is an ordinary write, which takes this
        process's turn for the file's lock (`background`: as `write`'s)."""
        if self._write_turn is not None:
            async with self._write(background) as tx:
                yield tx
            return
        async with self._autocommit() as tx:
            yield tx
        if tx.queued:
            raise RuntimeError("write_alone queued an outbox job: use write()")
        if tx.moved:
            self.moves.fire(tx.moved)

    @asynccontextmanager
    async def _write(self, background: bool) -> AsyncIterator[Tx]:
        if not background:
            # No create that arrives after this write goes before it (store/shared_writes.py).
            self._forming = None
        async with self._transaction(background) as (tx, _):
            yield tx
        await self._committed(tx)

    async def write_shared(self, block: Block) -> Any:
        """`block(tx)` in a write transaction that, on SQLite, the blocks waiting for the
        write lock at the same time share (group commit, store/shared_writes.py); its
        outcome once that transaction committed. `block` must use nothing but `tx`. For
        creates."""
        if self._write_turn is None:
            async with self.write() as tx:
                return await block(tx)
        group = self._forming
        if group is None or not group.has_room():
            group = self._forming = Group[Tx]()
            task = asyncio.get_running_loop().create_task(self._commit_group(group))
            self._groups.add(task)
            task.add_done_callback(self._groups.discard)
        return await group.add(block)

    async def _commit_group(self, group: Group[Tx]) -> None:
        """Wait for the lock while blocks join, begin, run each block (each in a savepoint
        when there are several), commit, and give each caller its block's outcome."""
        outcomes: list[tuple[asyncio.Future[Any], Any, bool]] = []
        try:
            async with self._transaction(False) as (tx, driver):
                if self._forming is group:
                    self._forming = None  # begun: later arrivals form the next group
                blocks = group.close()
                shared = len(blocks) > 1  # alone, a block writes as any other write
                for number, (block, outcome) in enumerate(blocks):
                    if outcome.done():  # its caller gave up before its turn
                        continue
                    try:
                        async with (
                            translated_errors(),
                            savepoint(tx, driver, number) if shared else nullcontext(),
                        ):
                            result = await block(tx)
                    except TransactionLost:
                        raise
                    except Exception as exc:
                        if not shared:
                            raise
                        outcomes.append((outcome, exc, True))  # undone alone; others go on
                    else:
                        outcomes.append((outcome, result, False))
        except BaseException as exc:
            if self._forming is group:
                self._forming = None
            group.fail(exc)
            if not isinstance(exc, Exception):
                raise
            return
        # The callers first (nothing below may leave them waiting), then the runner's jobs,
        # before anything is awaited.
        for outcome, value, failed in outcomes:
            if outcome.done():  # its caller gave up waiting: the writes stand
                continue
            if failed:
                outcome.set_exception(value)
            else:
                outcome.set_result(value)
        await self._committed(tx, sum(1 for _, _, failed in outcomes if not failed))

    @asynccontextmanager
    async def _transaction(self, background: bool) -> AsyncIterator[tuple[Tx, Any]]:
        """Turn, connection, BEGIN; COMMIT when the block exits normally, rolled back (and
        its outbox leases given back) otherwise. The Tx, and the driver's connection."""
        tx: Tx | None = None
        try:
            async with (
                self._writer_turn(background),
                translated_errors(),
                self._writers.connection() as held,
                self._sqlite_transaction(held) if self._write_turn else held.conn.begin(),
            ):
                tx = Tx(held.conn, raw=held.raw, taker=self.commits.taker)
                yield tx, held.raw.driver_connection
        except BaseException:
            if tx is not None:
                tx.drop_jobs_since()  # rolled back
            raise

    async def _committed(self, tx: Tx, transactions: int = 1) -> None:
        """After a COMMIT (`transactions` callers' writes): the jobs go to the runner before
        anything else is awaited (and could be cancelled)."""
        if tx.leased and tx.taker is not None:
            tx.taker.take(tx.held, tx.leased)
        if self._checkpoints is not None:
            await self._checkpoints.committed(transactions)
        if tx.queued:
            self.commits.fire()
        if tx.moved:
            self.moves.fire(tx.moved)

    @asynccontextmanager
    async def _sqlite_transaction(self, held: Held) -> AsyncIterator[None]:
        """A SQLite write transaction whose BEGIN IMMEDIATE and COMMIT signoff sends on the
        driver's connection (which runs them on the event loop when they cannot wait,
        store/sqlite_inline.py), not through SQLAlchemy's transaction: its begin and commit
        each went through a Core execution, a third of a click's write CPU. SQLAlchemy's
        connection sends no BEGIN of its own (NO_BEGIN); at close, its rollback finds the
        transaction already ended and sends nothing."""
        driver = held.raw.driver_connection
        await driver.begin_immediate()
        try:
            yield
        except BaseException:
            await driver.rollback_if_open()
            raise
        await driver.commit()

    @asynccontextmanager
    async def _writer_turn(self, background: bool = False) -> AsyncIterator[None]:
        """This process's turn to write, and on SQLite the file's (nothing on PostgreSQL)."""
        async with (
            self._write_turn.turn(background) if self._write_turn else nullcontext(),
            self._file_turn.held() if self._file_turn else nullcontext(),
        ):
            yield

    async def watch_commits(self, woken: Callable[[], None], stop: asyncio.Event) -> None:
        """Call `woken` when another process commits new outbox jobs (store/commits.py)."""
        await watch_commits(self.engine, woken, stop)

    async def watch_approvals(
        self, moved: Callable[[Collection[str] | None], None], stop: asyncio.Event
    ) -> None:
        """Call `moved` when another process commits approvals' state changes (with their
        ids on PostgreSQL, None on SQLite: store/commits.py)."""
        await watch_approvals(self.engine, moved, stop)

    def read(self) -> AbstractAsyncContextManager[Tx]:
        """Reads. Each statement sees the committed database as it is when it runs, as at
        PostgreSQL's READ COMMITTED: no snapshot spans the block, and no transaction is
        begun for it (a row lock a read takes ends with its statement)."""
        return self._autocommit()

    @asynccontextmanager
    async def _autocommit(self) -> AsyncIterator[Tx]:
        """Statements that each stand alone: no transaction is begun (autocommit on
        PostgreSQL, NO_BEGIN on SQLite)."""
        async with translated_errors(), self._readers.connection() as held:
            yield Tx(held.conn, reading=True, raw=held.raw)


class Tx(
    ApprovalStatements,
    ClockStatements,
    ListingStatements,
    DashboardStatements,
    EventStatements,
    VoteStatements,
    RefusalStatements,
    OutboxStatements,
    ChatStatements,
    DelegationStatements,
    WebLoginStatements,
    StandingGrantStatements,
    EmailLinkStatements,
    EmbedTokenStatements,
):
    """The statements, bound to one connection: a write transaction, or a read (`Store`)."""


Block = Callable[[Tx], Awaitable[Any]]
"""A caller's writes (`Store.write_shared`): uses nothing but the transaction it is given."""
