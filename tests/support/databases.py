"""Database URLs as the tests' own drivers take them."""

from __future__ import annotations

from sqlalchemy.engine import make_url

from store.engine import normalize_url


def asyncpg_dsn(url: str) -> str:
    """A signoff PostgreSQL URL (any driver spelling) as asyncpg.connect takes it."""
    return make_url(normalize_url(url)).set(drivername="postgresql").render_as_string(False)
