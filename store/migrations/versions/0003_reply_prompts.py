"""Reply prompts: the questions a chat surface asked (Telegram's reason for a rejection), so
the answer can be tied to the card it is about.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29 13:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from store.schema import UTCDateTime

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "reply_prompts",
        sa.Column("channel", sa.String(length=32), nullable=False),
        sa.Column("address", sa.String(length=256), nullable=False),
        sa.Column("message_id", sa.String(length=256), nullable=False),
        sa.Column("card_message_id", sa.Integer(), nullable=False),
        sa.Column("asked", sa.String(length=200), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["card_message_id"], ["card_messages.id"]),
        sa.PrimaryKeyConstraint("channel", "address", "message_id"),
    )
    # The sweeper prunes old deliveries by age.
    op.create_index("ix_inbound_deliveries_received", "inbound_deliveries", ["received_at"])


def downgrade() -> None:
    op.drop_index("ix_inbound_deliveries_received", table_name="inbound_deliveries")
    op.drop_table("reply_prompts")
