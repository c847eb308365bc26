"""Initial schema: approvals, their audit chain, votes, cards, outbox, delegations, inbound dedupe.

Revision ID: 0001
Revises:
Create Date: 2026-11-29 08:30:38.483722
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:

    op.create_table(
        "approvals",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("tenant", sa.String(length=128), nullable=False),
        sa.Column("run_id", sa.String(length=256), nullable=False),
        sa.Column("step", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("capability", sa.String(length=256), nullable=False),
        sa.Column("tool_name", sa.String(length=256), nullable=False),
        sa.Column("tool_args", sa.JSON(), nullable=False),
        sa.Column("presentation", sa.JSON(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.Column("requested_by", sa.String(length=128), nullable=True),
        sa.Column("assignee", sa.String(length=160), nullable=False),
        sa.Column("approvers", sa.JSON(), nullable=False),
        sa.Column("required_approvals", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column(
            "allow_self_approval", sa.Boolean(), server_default=sa.text("(false)"), nullable=False
        ),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("preconditions", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("resume", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("callback_url", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("escalate_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("grant_ttl_s", sa.Integer(), nullable=True),
        sa.Column("decided_by", sa.String(length=128), nullable=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("decision_note", sa.Text(), nullable=True),
        sa.Column("claim_token", sa.String(length=64), nullable=True),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("executed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("outcome", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("version", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("audit_seq", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column(
            "audit_head",
            sa.String(length=64),
            server_default=sa.text("'" + "0" * 64 + "'"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_approvals")),
        sa.UniqueConstraint(
            "tenant", "run_id", "hash", name=op.f("uq_approvals_tenant_run_id_hash")
        ),
    )
    with op.batch_alter_table("approvals", schema=None) as batch_op:
        batch_op.create_index(
            "ix_approvals_pending_expiry",
            ["state", "expires_at"],
            unique=False,
            sqlite_where=sa.text("state = 'pending'"),
            postgresql_where=sa.text("state = 'pending'"),
        )
        batch_op.create_index("ix_approvals_tenant_created", ["tenant", "created_at"], unique=False)

    op.create_table(
        "delegations",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("principal", sa.String(length=128), nullable=False),
        sa.Column("delegate", sa.String(length=128), nullable=False),
        sa.Column("scope", sa.String(length=256), server_default=sa.text("'*'"), nullable=False),
        sa.Column("starts_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ends_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_by", sa.String(length=200), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_delegations")),
    )
    with op.batch_alter_table("delegations", schema=None) as batch_op:
        batch_op.create_index("ix_delegations_principal", ["principal", "starts_at"], unique=False)

    op.create_table(
        "inbound_deliveries",
        sa.Column("source", sa.String(length=64), nullable=False),
        sa.Column("delivery_id", sa.String(length=200), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("source", "delivery_id", name=op.f("pk_inbound_deliveries")),
    )
    op.create_table(
        "approval_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("approval_id", sa.String(length=36), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("prev_hash", sa.String(length=64), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["approval_id"], ["approvals.id"], name=op.f("fk_approval_events_approval_id_approvals")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_approval_events")),
        sa.UniqueConstraint("approval_id", "seq", name=op.f("uq_approval_events_approval_id_seq")),
    )
    op.create_table(
        "card_messages",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("approval_id", sa.String(length=36), nullable=False),
        sa.Column("channel", sa.String(length=32), nullable=False),
        sa.Column("address", sa.String(length=256), nullable=False),
        sa.Column("message_id", sa.String(length=256), nullable=False),
        sa.Column("shown_hash", sa.String(length=64), nullable=False),
        sa.Column("rendered_state", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["approval_id"], ["approvals.id"], name=op.f("fk_card_messages_approval_id_approvals")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_card_messages")),
        sa.UniqueConstraint(
            "channel",
            "address",
            "message_id",
            name=op.f("uq_card_messages_channel_address_message_id"),
        ),
    )
    with op.batch_alter_table("card_messages", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_card_messages_approval_id"), ["approval_id"], unique=False
        )

    op.create_table(
        "outbox",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("approval_id", sa.String(length=36), nullable=True),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("dedupe_key", sa.String(length=200), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("run_after", sa.DateTime(timezone=True), nullable=False),
        sa.Column("locked_by", sa.String(length=128), nullable=True),
        sa.Column("locked_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("done_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["approval_id"], ["approvals.id"], name=op.f("fk_outbox_approval_id_approvals")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_outbox")),
        sa.UniqueConstraint("dedupe_key", name=op.f("uq_outbox_dedupe_key")),
    )
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.create_index("ix_outbox_due", ["state", "run_after"], unique=False)

    op.create_table(
        "votes",
        sa.Column("approval_id", sa.String(length=36), nullable=False),
        sa.Column("principal", sa.String(length=128), nullable=False),
        sa.Column("decision", sa.String(length=16), nullable=False),
        sa.Column("as_delegate_of", sa.String(length=128), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["approval_id"], ["approvals.id"], name=op.f("fk_votes_approval_id_approvals")
        ),
        sa.PrimaryKeyConstraint("approval_id", "principal", name=op.f("pk_votes")),
    )


def downgrade() -> None:

    op.drop_table("votes")
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.drop_index("ix_outbox_due")

    op.drop_table("outbox")
    with op.batch_alter_table("card_messages", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_card_messages_approval_id"))

    op.drop_table("card_messages")
    op.drop_table("approval_events")
    op.drop_table("inbound_deliveries")
    with op.batch_alter_table("delegations", schema=None) as batch_op:
        batch_op.drop_index("ix_delegations_principal")

    op.drop_table("delegations")
    with op.batch_alter_table("approvals", schema=None) as batch_op:
        batch_op.drop_index("ix_approvals_tenant_created")
        batch_op.drop_index(
            "ix_approvals_pending_expiry",
            sqlite_where=sa.text("state = 'pending'"),
            postgresql_where=sa.text("state = 'pending'"),
        )

    op.drop_table("approvals")
