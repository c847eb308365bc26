"""Times in the store: `UTCDateTime` writes SQLite DATETIME's own text (its one-call bind on
SQLite must match what SQLAlchemy's DATETIME wrote before, or stored rows would compare
and sort differently), and refuses a naive datetime on both databases."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.sqlite import DATETIME

from store.schema import UTCDateTime

SQLITE = sqlite.dialect()
TIMES = [
    datetime(2026, 1, 5, 9, 0, tzinfo=UTC),
    datetime(2026, 1, 5, 9, 0, 0, 123, tzinfo=timezone(timedelta(hours=2))),
    datetime(2026, 12, 31, 23, 59, 59, 999999, tzinfo=timezone(timedelta(hours=-11, minutes=-30))),
    datetime(999, 1, 1, tzinfo=UTC),
]


@pytest.mark.parametrize("when", TIMES, ids=str)
def test_sqlite_text_is_sqlalchemys_datetime_text_in_utc(when: datetime) -> None:
    ours = UTCDateTime().dialect_impl(SQLITE).bind_processor(SQLITE)
    theirs = DATETIME().bind_processor(SQLITE)
    assert ours is not None and theirs is not None
    assert ours(when) == theirs(when.astimezone(UTC).replace(tzinfo=None))
    read = UTCDateTime().dialect_impl(SQLITE).result_processor(SQLITE, None)
    assert read is not None and read(ours(when)) == when


@pytest.mark.parametrize("dialect", [SQLITE, postgresql.asyncpg.dialect()], ids=["sqlite", "pg"])
def test_a_naive_datetime_is_refused(dialect: object) -> None:
    bind = UTCDateTime().dialect_impl(dialect).bind_processor(dialect)  # type: ignore[arg-type]
    assert bind is not None and bind(None) is None
    with pytest.raises(ValueError, match="naive datetime"):
        bind(datetime(2026, 1, 5, 9, 0))
