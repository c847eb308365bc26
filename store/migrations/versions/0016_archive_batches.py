"""Retention: the ledger of archive batches, each a file of decided requests and their audit
trails moved out of the database (bot/archive.py).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06 21:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from store.schema import UTCDateTime

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "archive_batches",
        sa.Column("id", sa.String(length=80), primary_key=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("cutoff", UTCDateTime(), nullable=False),
        sa.Column("requests", sa.Integer(), nullable=False),
        sa.Column("events", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("archive_batches")
