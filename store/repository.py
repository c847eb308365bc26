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
(store/web_logins.py) and the email surface's decision links (store/email_links.py); what
they share is store/statements.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, nullcontext
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from store.approvals import ApprovalStatements
from store.chat import ChatStatements
from store.clocks import ClockStatements
from store.commits import CommitSignal, watch_commits
from store.dashboard import DashboardStatements
from store.delegations import DelegationStatements
from store.email_links import EmailLinkStatements
from store.engine import (
    BEGIN_MODE,
    NO_BEGIN,
    WriterLock,
    create_engine,
    is_sqlite,
    translated_errors,
)
from store.events import EventStatements
from store.listings import ListingStatements
from store.outbox import OutboxStatements
from store.refusals import RefusalStatements
from store.standing_grants import StandingGrantStatements
from store.turns import WriteTurns
from store.votes import VoteStatements
from store.web_logins import WebLoginStatements


class Store:
    """A database handle: opens transactions, owns the engine."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        sqlite = is_sqlite(engine)
        self._writer = engine.execution_options(**{BEGIN_MODE: "IMMEDIATE"}) if sqlite else engine
        self._reader = engine.execution_options(**{BEGIN_MODE: NO_BEGIN}) if sqlite else engine
        # SQLite admits one writer per file. Queueing this process's writers here, instead of
        # letting them all contend for the file lock, spares them SQLite's busy-wait sleeps
        # (which grow to 100 ms); other processes still wait on busy_timeout.
        self._write_turn: WriteTurns | None = WriteTurns() if sqlite else None
        # ... and across processes on one host (`serve --workers`), an flock beside the file.
        self._file_turn = WriterLock.for_engine(engine)
        self.commits = CommitSignal()

    @classmethod
    def from_url(cls, url: str, **engine_kwargs: Any) -> Store:
        return cls(create_engine(url, **engine_kwargs))

    async def close(self) -> None:
        await self.engine.dispose()
        if self._file_turn is not None:
            self._file_turn.close()

    @asynccontextmanager
    async def write(self, *, background: bool = False) -> AsyncIterator[Tx]:
        """A write transaction; commits when the block exits normally, rolls back otherwise.

        `background`: work nobody is waiting on (the outbox's claims and settles). On SQLite
        its turn comes after the turns of writers someone waits on (a click, an API call),
        so a burst of outbox work does not queue in front of a person's decision."""
        async with (
            self._write_turn.turn(background) if self._write_turn else nullcontext(),
            translated_errors(),
            self._file_turn.held() if self._file_turn else nullcontext(),
            self._writer.begin() as conn,
        ):
            tx = Tx(conn)
            yield tx
        # Reached only once the transaction committed (an exception skips it).
        if tx.queued:
            self.commits.fire()

    async def watch_commits(self, woken: Callable[[], None], stop: asyncio.Event) -> None:
        """Call `woken` when another process commits new outbox jobs (store/commits.py)."""
        await watch_commits(self.engine, woken, stop)

    @asynccontextmanager
    async def read(self) -> AsyncIterator[Tx]:
        """Reads. Each statement sees the committed database as it is when it runs (on SQLite
        as at PostgreSQL's READ COMMITTED: no snapshot spans the block)."""
        async with translated_errors(), self._reader.connect() as conn:
            yield Tx(conn, reading=True)


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
):
    """The statements, bound to one connection: a write transaction, or a read (`Store`)."""
