"""The hottest statements, run on the driver's own connection.

SQLAlchemy stays the schema, migration and query-building layer: each statement here is a
Core statement, compiled once per dialect to its SQL text and parameter order, with the
column types' own bind and result processors. What is skipped is SQLAlchemy's execution
machinery around each call (the greenlet bridge, the execution context, the result
object), which costs more than an indexed statement itself: measured on this project's
machine (bench decide_throughput, docs/benchmarks.md), an INSERT took about 165 µs of CPU
through Core on PostgreSQL and 100 µs here. On SQLite the statement runs on the event loop's
thread when it cannot wait (store/sqlite_inline.py), else on aiosqlite's.

The statement runs inside the transaction SQLAlchemy opened: the same connection, between
its BEGIN and its COMMIT (a read on SQLite opens none: each statement stands alone, see
`Store.read`). On PostgreSQL, SQLAlchemy's asyncpg adapter begins lazily, on its
first statement, so a transaction that has not yet run a Core statement runs the Core one
instead (`Tx` keeps count). Driver errors become the SQLAlchemy errors Core would have
raised, so `store.engine.translated_errors` judges them the same way.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Column
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError, IntegrityError

_INTEGRITY_SQLSTATE = "23"


class DriverStatement:
    """One Core statement, compiled for one dialect: its SQL, how to turn a mapping of
    values into the driver's positional parameters, and how to read the columns it
    returns."""

    def __init__(
        self,
        statement: Any,
        dialect: Dialect,
        *,
        keys: Sequence[str] | None = None,
        returns: Sequence[Column[Any]] = (),
    ) -> None:
        compiled = statement.compile(dialect=dialect, column_keys=keys)
        if compiled.positiontup is None:
            raise ValueError(f"{dialect.name} does not compile to positional parameters")
        self.sql = compiled.string
        self.writes = bool(compiled.isinsert or compiled.isupdate or compiled.isdelete)
        self._binds = [
            (name, compiled.binds[name].type.dialect_impl(dialect).bind_processor(dialect))
            for name in compiled.positiontup
        ]
        # Values the statement carries itself (the 1 of `version = version + 1`, the NULL of
        # `locked_by = NULL`).
        self._own = {name: bind.value for name, bind in compiled.binds.items() if not bind.required}
        self.columns = [c.name for c in returns]
        self._results = [
            c.type.dialect_impl(dialect).result_processor(dialect, None) for c in returns
        ]

    def parameters(self, values: Mapping[str, Any]) -> list[Any]:
        given = [(values[n] if n in values else self._own[n], p) for n, p in self._binds]
        return [process(value) if process is not None else value for value, process in given]

    def mapping(self, row: Sequence[Any]) -> dict[str, Any]:
        return {
            name: process(value) if process is not None else value
            for name, process, value in zip(self.columns, self._results, row, strict=True)
        }


async def run(
    driver: Any, dialect: str, statement: DriverStatement, values: Mapping[str, Any]
) -> list[Sequence[Any]]:
    """Execute on the driver connection (aiosqlite or asyncpg); the rows it returns."""
    parameters = statement.parameters(values)
    try:
        if dialect == "sqlite":
            if driver.cannot_wait(statement.writes):
                # On the event loop's thread (store/sqlite_inline.py says when that is safe).
                # A `Tx` runs one statement at a time, so the connection's thread is idle.
                return driver._conn.execute(statement.sql, parameters).fetchall()  # type: ignore[no-any-return]
            return list(await driver.execute_fetchall(statement.sql, parameters))
        return list(await driver.fetch(statement.sql, *parameters))
    except Exception as exc:
        raise _as_sqlalchemy(exc, statement.sql, parameters) from exc


def _as_sqlalchemy(exc: Exception, sql: str, parameters: list[Any]) -> Exception:
    state = getattr(exc, "sqlstate", None) or ""
    if isinstance(exc, sqlite3.IntegrityError) or state.startswith(_INTEGRITY_SQLSTATE):
        return IntegrityError(sql, parameters, exc)
    if isinstance(exc, (sqlite3.Error, OSError)) or type(exc).__module__.startswith("asyncpg"):
        return DBAPIError(sql, parameters, exc)
    return exc
