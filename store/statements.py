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
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Table
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection

from store.fast_path import DriverStatement
from store.fast_path import run as driver_run


def insert_for(dialect: str, table: Table) -> Any:
    """INSERT with the dialect's ON CONFLICT support (both speak the same clause). Imported
    here: the CLI on SQLite never loads the PostgreSQL dialect."""
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(table)
    from sqlalchemy.dialects import sqlite

    return sqlite.insert(table)


@functools.cache
def _driver_select(dialect: Dialect, statement: Any, table: Table) -> DriverStatement:
    """A statement returning whole rows of `table` (SELECT, or RETURNING *)."""
    return DriverStatement(statement, dialect, returns=list(table.c))


class Statements:
    """Statements bound to one connection: a write transaction, or a read (`Store`)."""

    def __init__(self, conn: AsyncConnection, *, reading: bool = False) -> None:
        self.conn = conn
        self._dialect = conn.dialect.name
        self._raw: Any = None
        # Whether this transaction queued or requeued an outbox job (Store.write tells the
        # runner after the commit).
        self.queued = False
        # SQLite reads begin no transaction (Store.read): any statement may take the driver.
        self._reading = reading and self._dialect == "sqlite"

    async def _driver(self) -> Any | None:
        """The driver's connection for the hot statements (store/fast_path.py), or None while
        no transaction is open on it yet: the caller then takes the Core path, which opens
        one."""
        if self._raw is None:
            self._raw = (await self.conn.get_raw_connection()).driver_connection
        if self._dialect == "sqlite":
            return self._raw if self._reading or self._raw.in_transaction else None
        return self._raw if self._raw.is_in_transaction() else None

    async def _rows(
        self, statement: Any, params: Mapping[str, Any], table: Table
    ) -> list[Mapping[str, Any]]:
        """Whole rows of `table` through the driver path (or Core when it cannot be taken)."""
        driver = await self._driver()
        if driver is None:
            return list(await self._all(statement, params))
        compiled = _driver_select(self.conn.dialect, statement, table)
        rows = await driver_run(driver, self._dialect, compiled, params)
        return [compiled.mapping(r) for r in rows]

    async def _one(self, stmt: Any, params: Mapping[str, Any]) -> Mapping[str, Any] | None:
        # Count returned rows, not rowcount: SQLite reports -1 with RETURNING.
        return (await self.conn.execute(stmt, dict(params))).mappings().first()

    async def _all(self, stmt: Any, params: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
        return (await self.conn.execute(stmt, dict(params))).mappings().all()
