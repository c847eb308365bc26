"""What every family of `Tx` statements stands on: the connection, and the dialect builders.

`Tx` (store/repository.py) is composed of one class per table family (store/approvals.py,
store/outbox.py, store/chat.py, ...), each a subclass of `Statements`, so every method is a
statement of the same transaction whichever module holds it. Here: the connection, the
driver's fast path for the hot statements (store/fast_path.py), and the INSERT with ON
CONFLICT that both dialects speak.

Statements used on every request are built once, at import or once per shape
(`functools.cache`), in the module of their family: building and keying a SQLAlchemy
statement costs more CPU than running it. Values travel as bound parameters.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sqlalchemy import Table, literal_column
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection

from store.fast_path import DriverStatement
from store.fast_path import run as driver_run

if TYPE_CHECKING:
    from store.commits import Taker
    from store.records import OutboxJob

_WORD = re.compile(r"[a-z_]+")


def insert_for(dialect: str, table: Table) -> Any:
    """INSERT with the dialect's ON CONFLICT support (both speak the same clause). Imported
    here: the CLI on SQLite never loads the PostgreSQL dialect."""
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(table)
    from sqlalchemy.dialects import sqlite

    return sqlite.insert(table)


def one_of(column: Any, *words: str) -> Any:
    """`column` holds one of `words` (signoff's own constants: a state, a job kind), written
    into the SQL text as literals, not bound as parameters. A partial index (WHERE state =
    'pending') is chosen only when the query's own condition says so in its text, by
    SQLite's planner and in PostgreSQL's generic plans alike: given a parameter, both read
    every row of the table instead. And a statement with a fixed list has a fixed shape, so
    it can be compiled once for the driver path (an expanding IN cannot)."""
    for word in words:  # never a caller's text
        if not _WORD.fullmatch(word):
            raise ValueError(f"not a constant: {word!r}")
    values = [literal_column(f"'{word}'") for word in words]
    return column == values[0] if len(values) == 1 else column.in_(values)


@functools.cache
def _driver_statement(
    dialect: Dialect, statement: Any, keys: tuple[str, ...] | None = None
) -> DriverStatement:
    """A statement compiled for the driver path, with the columns it returns (SELECT, or
    RETURNING; none for other DML); an INSERT, for the columns `keys` it is given."""
    return DriverStatement(statement, dialect, keys=keys, returns=list(statement.exported_columns))


async def _begin_asyncpg(adapter: Any) -> bool:
    """Begin the transaction SQLAlchemy's asyncpg adapter would begin before its first
    statement, as it would (its own method, under its own lock); False where this version of
    SQLAlchemy has no such method, and the caller takes the Core path."""
    start = getattr(adapter, "_start_transaction", None)
    mutex = getattr(adapter, "_execute_mutex", None)
    if start is None or mutex is None or getattr(adapter, "_transaction", None) is not None:
        return False
    async with mutex:
        await start()
    return adapter._transaction is not None


class Statements:
    """Statements bound to one connection: a write transaction, or a read (`Store`)."""

    def __init__(
        self,
        conn: AsyncConnection,
        *,
        reading: bool = False,
        raw: Any = None,
        taker: Taker | None = None,
    ) -> None:
        """`raw`: the connection's pool record, when the caller has it at hand; `taker`: the
        outbox runner of this process, which takes the jobs due now (store/commits.py)."""
        self.conn = conn
        self._dialect = conn.dialect.name
        self._raw: Any = None if raw is None else raw.driver_connection
        self._adapter: Any = None if raw is None else raw.dbapi_connection
        # Whether this transaction queued or requeued an outbox job (Store.write tells the
        # runner after the commit).
        self.queued = False
        self.taker = taker
        # The jobs queued leased to `taker`, handed to it once the transaction commits, and
        # how many leases it gave (a dedupe conflict inserts nothing).
        self.held: list[OutboxJob] = []
        self.leased = 0
        # The approvals whose state this transaction changed, told to this process's waits
        # once it commits (store/commits.py, ApprovalMoves).
        self.moved: list[str] = []
        # Reads begin no transaction (Store.read): any statement may take the driver.
        self._reading = reading

    def jobs_mark(self) -> tuple[int, int]:
        """Where this transaction's jobs leased at birth stand now (for `drop_jobs_since`)."""
        return len(self.held), self.leased

    def drop_jobs_since(self, mark: tuple[int, int] = (0, 0)) -> None:
        """The writes since `mark` were rolled back (the whole transaction by default): the
        jobs they queued leased to the runner came to nothing, and their leases go back."""
        held, leased = mark
        given = self.leased - leased
        del self.held[held:]
        self.leased = leased
        if given and self.taker is not None:
            self.taker.take([], given)

    def _forget_subject(self, approval_id: str) -> None:
        """The approval moved after jobs that carry it were queued in this transaction (a
        later create of the same step superseded it, in a shared write): their runner reads
        it afresh instead (OutboxJob.subject)."""
        self.held = [
            replace(job, subject=None) if job.approval_id == approval_id else job
            for job in self.held
        ]

    async def _driver(self) -> Any | None:
        """The driver's connection for the hot statements (store/fast_path.py), or None while
        no transaction is open on it yet: the caller then takes the Core path, which opens
        one. On PostgreSQL a write transaction's BEGIN is sent here if no statement sent it
        yet (SQLAlchemy's asyncpg adapter begins on the first statement, and the Core path
        for the first one costs more than the statement)."""
        if self._raw is None:
            fairy = await self.conn.get_raw_connection()
            self._raw = fairy.driver_connection
            self._adapter = fairy.dbapi_connection
        if self._reading:
            return self._raw
        if self._dialect == "sqlite":
            return self._raw if self._raw.in_transaction else None
        if not self._raw.is_in_transaction() and not await _begin_asyncpg(self._adapter):
            return None
        return self._raw

    async def _rows(self, statement: Any, params: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        """The rows of a statement built once (a module constant, or cached per shape: each
        is compiled once and kept), through the driver path, or Core when it cannot be
        taken. Keyed by column name, as Core's mappings are."""
        return await self._driver_rows(statement, params, None)

    async def _insert_rows(
        self, statement: Any, values: Mapping[str, Any]
    ) -> list[Mapping[str, Any]]:
        """`_rows` for an INSERT built once: compiled once per set of columns given."""
        return await self._driver_rows(statement, values, tuple(values))

    async def _driver_rows(
        self, statement: Any, params: Mapping[str, Any], keys: tuple[str, ...] | None
    ) -> list[Mapping[str, Any]]:
        driver = await self._driver()
        if driver is None:
            return list(await self._all(statement, params))
        compiled = _driver_statement(self.conn.dialect, statement, keys)
        rows = await driver_run(driver, self._dialect, compiled, params)
        return [compiled.mapping(r) for r in rows]

    async def _one(self, stmt: Any, params: Mapping[str, Any]) -> Mapping[str, Any] | None:
        # Count returned rows, not rowcount: SQLite reports -1 with RETURNING.
        return (await self.conn.execute(stmt, dict(params))).mappings().first()

    async def _all(self, stmt: Any, params: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
        return (await self.conn.execute(stmt, dict(params))).mappings().all()
