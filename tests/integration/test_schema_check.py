"""The schema check every CLI command makes first: a database at the newest revision passes
(read without loading Alembic), one behind is refused naming `signoff db upgrade`, and one
a newer release already upgraded is used, on both databases."""

from __future__ import annotations

import pytest

from bot.errors import SchemaOutOfDate
from store.migrate import ensure_current, head_revision, known_revisions, shipped_head
from store.repository import Store
from tests.support.samples import tamper


def test_the_head_read_from_the_files_is_alembics() -> None:
    assert shipped_head() == head_revision()


async def test_current_schema_passes_and_a_behind_one_is_refused(store: Store) -> None:
    await ensure_current(store.engine)

    previous = sorted(known_revisions())[-2]
    await tamper(store, "UPDATE alembic_version SET version_num = :v", v=previous)
    with pytest.raises(SchemaOutOfDate, match=rf"schema revision {previous}.*signoff db upgrade"):
        await ensure_current(store.engine)

    await tamper(store, "DELETE FROM alembic_version")
    with pytest.raises(SchemaOutOfDate, match=r"empty database.*signoff db upgrade"):
        await ensure_current(store.engine)


async def test_a_schema_from_a_newer_release_is_used(store: Store) -> None:
    await tamper(store, "UPDATE alembic_version SET version_num = :v", v="9999_from_the_future")
    await ensure_current(store.engine)
