"""The web surface: single-use sign-in links.

A link is made for one principal (`signoff web login`, `/signoff web` in Slack, `/web` in
Telegram) and opens one browser session; only the SHA-256 of its token is stored, so the table
holds nothing a reader could sign in with.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from store.schema import UTCDateTime

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "web_logins",
        sa.Column("token_hash", sa.String(length=64), primary_key=True),
        sa.Column("principal", sa.String(length=128), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
        sa.Column("used_at", UTCDateTime(), nullable=True),
    )
    op.create_index("ix_web_logins_expires", "web_logins", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_web_logins_expires", table_name="web_logins")
    op.drop_table("web_logins")
