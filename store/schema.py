"""SQLAlchemy Core tables: the whole persistent state of signoff.

JSON columns use the plain JSON type (text on both databases, not JSONB) so that what an
agent sent is what comes back; the stored request must re-hash to its stored hash.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator


def _as_utc(value: datetime) -> datetime:
    """`value` in UTC; a naive datetime is refused (its zone would be a guess)."""
    if value.tzinfo is None:
        raise ValueError("naive datetime given to the store; use timezone-aware UTC")
    return value.astimezone(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC in Python on both databases.

    PostgreSQL stores timestamptz; SQLite has no time zones, so values are stored as naive UTC
    text and tagged as UTC again on the way out.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        value = _as_utc(value)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

    # On SQLite a time bound went through three Python calls (this type's, SQLAlchemy's
    # wrapper, SQLite's DATETIME formatting a dict), 8.5 us on this project's machine: one
    # call instead, 4.5 us, writing the text SQLite's DATETIME writes
    # ("2026-01-05 09:00:00.000000", its `_storage_format`). A create binds about a dozen.
    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        if dialect.name != "sqlite":
            return super().bind_processor(dialect)

        def process(value: datetime | None) -> str | None:
            if value is None:
                return None
            return _as_utc(value).replace(tzinfo=None).isoformat(" ", "microseconds")

        return process


def _json(nullable: bool = True) -> JSON:
    # none_as_null: a missing value is SQL NULL, never the JSON text 'null'.
    return JSON(none_as_null=nullable)


# Pending, escalated, and no step left: what signoff_pending_past_last_escalation counts.
_PAST_LAST_ESCALATION = "state = 'pending' AND escalation_level > 0 AND escalate_at IS NULL"

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

approvals = Table(
    "approvals",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("tenant", String(128), nullable=False),
    Column("run_id", String(256), nullable=False),
    Column("step", _json()),
    Column("kind", String(64), nullable=False),
    Column("capability", String(256), nullable=False),
    Column("tool_name", String(256), nullable=False),
    Column("tool_args", _json(False), nullable=False),
    Column("presentation", _json(False), nullable=False),
    Column("reason", Text),
    Column("hash", String(64), nullable=False),
    Column("requested_by", String(128)),
    Column("assignee", String(160), nullable=False),
    # The route's approvers (or the request's narrower list) at creation, and every assignee
    # the request has had since: they keep their authority when the assignee changes
    # through a hand-off or an escalation.
    Column("approvers", _json(False), nullable=False),
    Column("required_approvals", Integer, nullable=False, server_default=text("1")),
    Column("allow_self_approval", Boolean, nullable=False, server_default=text("false")),
    Column("state", String(32), nullable=False),
    Column("preconditions", _json()),
    Column("resume", _json()),
    Column("callback_url", Text),
    Column("created_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
    # When the sweeper next moves the request along its route's escalation chain (None: no
    # step left), how many steps it has taken, and how the current assignee got it (shown
    # on the card: "escalated to Carol Diaz after 24h", "handed over by Alice Ng").
    Column("escalate_at", UTCDateTime),
    Column("escalation_level", Integer, nullable=False, server_default=text("0")),
    # When the sweeper reminds the assignees (the route's remind_before ahead of
    # expires_at, fixed at creation; None: no reminder), and when it did (0008).
    Column("remind_at", UTCDateTime),
    Column("reminded_at", UTCDateTime),
    Column("assigned_note", Text),
    Column("grant_ttl_s", Integer),
    Column("decided_by", String(128)),
    Column("decided_at", UTCDateTime),
    Column("decision_note", Text),
    # When an approved grant runs out unclaimed (decided_at + grant_ttl_s), kept as a column
    # so the sweeper finds due grants with an index instead of date arithmetic in SQL.
    Column("grant_expires_at", UTCDateTime),
    Column("claim_token", String(64)),
    Column("claimed_at", UTCDateTime),
    Column("lease_until", UTCDateTime),
    Column("executed_at", UTCDateTime),
    Column("outcome", _json()),
    # For an interrupted_side_effect approval: the approval whose execution lease lapsed.
    Column("origin_id", String(36)),
    # SHA-256 of the Idempotency-Key the current claim was made with: the same key gets the
    # same claim back while it is live (a claim whose answer was lost can be recovered).
    Column("claim_key", String(64)),
    # SHA-256 of the canonical JSON of `step`: the newest request of a (tenant, run, step)
    # supersedes the older ones that have not started.
    Column("step_key", String(64)),
    # The newer request of the same step that replaced this one.
    Column("superseded_by", String(36)),
    # For an outcome_unknown approval: the interrupted_side_effect approval raised for it.
    Column("follow_up_id", String(36)),
    Column("version", Integer, nullable=False, server_default=text("1")),
    # A question (kind "question"): what it offers, as the agent sent it (hashed in place of
    # the tool; tool_name and tool_args are then "" and {}); the answer a person gave, to a
    # question or instead of running a call: {"text": ...} or {"option": ...} (0012).
    Column("question", _json()),
    Column("answer", _json()),
    # The JSON Schema of the tool's arguments, if the agent sent it: an approver's edit of
    # the arguments must satisfy it. Not hashed: it judges edits, it is never shown (0012).
    Column("input_schema", _json()),
    # Approved as edited: the call as the agent asked for it (its arguments and hash) before
    # the first edit; tool_args and hash are the revision that was approved (0012).
    Column("original_args", _json()),
    Column("original_hash", String(64)),
    # Approved at once by a person's standing grant (its id), not by a decision of its own
    # (0013).
    Column("grant_id", String(36)),
    # The head of this approval's audit chain, moved in the same statement as every
    # transition: a chain whose newest events were deleted no longer reaches it.
    Column("audit_seq", Integer, nullable=False, server_default=text("0")),
    Column("audit_head", String(64), nullable=False, server_default=text("'" + "0" * 64 + "'")),
    UniqueConstraint("tenant", "run_id", "hash"),
    Index("ix_approvals_tenant_created", "tenant", "created_at"),
    # The API's list by state, newest first from the cursor: a page is a range (0009).
    Index("ix_approvals_tenant_state_created", "tenant", "state", "created_at", "id"),
    # The metrics: pending count and oldest per (tenant, capability), read from this index
    # alone, and the few pending rows past their last escalation step (0009). `state` leads
    # though each holds one state: SQLite without ANALYZE picks an index by its leading
    # equality, and would otherwise read the table through ix_approvals_pending_expiry.
    Index(
        "ix_approvals_pending_summary",
        "state",
        "tenant",
        "capability",
        "created_at",
        sqlite_where=text("state = 'pending'"),
        postgresql_where=text("state = 'pending'"),
    ),
    Index(
        "ix_approvals_past_last_escalation",
        "state",
        "tenant",
        sqlite_where=text(_PAST_LAST_ESCALATION),
        postgresql_where=text(_PAST_LAST_ESCALATION),
    ),
    # The sweeper's scan: only pending rows, ordered by when they run out.
    Index(
        "ix_approvals_pending_expiry",
        "state",
        "expires_at",
        sqlite_where=text("state = 'pending'"),
        postgresql_where=text("state = 'pending'"),
    ),
    Index(
        "ix_approvals_escalation",
        "escalate_at",
        sqlite_where=text("state = 'pending'"),
        postgresql_where=text("state = 'pending'"),
    ),
    Index(
        "ix_approvals_reminder",
        "remind_at",
        sqlite_where=text("state = 'pending' AND reminded_at IS NULL"),
        postgresql_where=text("state = 'pending' AND reminded_at IS NULL"),
    ),
    # The sweeper's other scans: grants running out, execution leases lapsing.
    Index(
        "ix_approvals_grant_expiry",
        "grant_expires_at",
        sqlite_where=text("state = 'approved'"),
        postgresql_where=text("state = 'approved'"),
    ),
    Index(
        "ix_approvals_lease",
        "lease_until",
        sqlite_where=text("state = 'executing'"),
        postgresql_where=text("state = 'executing'"),
    ),
    # A follow-up finds the approval it re-runs (its authority is inherited).
    Index(
        "ix_approvals_follow_up",
        "follow_up_id",
        sqlite_where=text("follow_up_id IS NOT NULL"),
        postgresql_where=text("follow_up_id IS NOT NULL"),
    ),
    # A new request of a step finds the older ones it replaces.
    Index(
        "ix_approvals_step",
        "tenant",
        "run_id",
        "step_key",
        sqlite_where=text("state IN ('pending', 'approved')"),
        postgresql_where=text("state IN ('pending', 'approved')"),
    ),
    # A create of a call that was approved as edited finds the edited request (0012).
    Index(
        "ix_approvals_original",
        "tenant",
        "run_id",
        "original_hash",
        sqlite_where=text("original_hash IS NOT NULL"),
        postgresql_where=text("original_hash IS NOT NULL"),
    ),
    # The dashboard's recent decisions and its time-to-decide chart (index-only).
    Index(
        "ix_approvals_decided",
        "decided_at",
        "created_at",
        sqlite_where=text("decided_at IS NOT NULL"),
        postgresql_where=text("decided_at IS NOT NULL"),
    ),
)

approval_events = Table(
    "approval_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("approval_id", String(36), ForeignKey("approvals.id"), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("type", String(64), nullable=False),
    Column("actor", String(200)),
    Column("at", UTCDateTime, nullable=False),
    Column("data", _json(False), nullable=False),
    Column("prev_hash", String(64), nullable=False),
    Column("hash", String(64), nullable=False),
    # Two writers can never both append event N: the chain cannot fork.
    UniqueConstraint("approval_id", "seq"),
    # The dashboard's per-day counts of requests made and decided.
    Index("ix_approval_events_type_at", "type", "at"),
)

votes = Table(
    "votes",
    metadata,
    Column("approval_id", String(36), ForeignKey("approvals.id"), primary_key=True),
    Column("principal", String(128), primary_key=True),
    Column("decision", String(16), nullable=False),
    Column("as_delegate_of", String(128)),
    Column("note", Text),
    Column("at", UTCDateTime, nullable=False),
    # The surface it was cast on: "web", "slack", "telegram", "cli" (0011).
    Column("via", String(32)),
)

card_messages = Table(
    "card_messages",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("approval_id", String(36), ForeignKey("approvals.id"), nullable=False, index=True),
    Column("channel", String(32), nullable=False),
    Column("address", String(256), nullable=False),
    Column("message_id", String(256), nullable=False),
    Column("shown_hash", String(64), nullable=False),
    Column("rendered_state", String(32), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    UniqueConstraint("channel", "address", "message_id"),
)

outbox = Table(
    "outbox",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("kind", String(64), nullable=False),
    Column("approval_id", String(36), ForeignKey("approvals.id")),
    Column("payload", _json(False), nullable=False),
    # e.g. a webhook delivery id: the same effect is never queued twice.
    Column("dedupe_key", String(200), unique=True),
    Column("state", String(16), nullable=False),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("run_after", UTCDateTime, nullable=False),
    Column("locked_by", String(128)),
    Column("locked_until", UTCDateTime),
    Column("last_error", Text),
    Column("created_at", UTCDateTime, nullable=False),
    Column("done_at", UTCDateTime),
    Index("ix_outbox_due", "state", "run_after"),
)

delegations = Table(
    "delegations",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("principal", String(128), nullable=False),
    Column("delegate", String(128), nullable=False),
    Column("scope", String(256), nullable=False, server_default=text("'*'")),
    Column("starts_at", UTCDateTime, nullable=False),
    Column("ends_at", UTCDateTime),
    Column("note", Text),
    Column("created_by", String(200), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("revoked_at", UTCDateTime),
    Column("revoked_by", String(200)),
    Index("ix_delegations_principal", "principal", "starts_at"),
)

inbound_deliveries = Table(
    "inbound_deliveries",
    metadata,
    Column("source", String(64), primary_key=True),
    Column("delivery_id", String(200), primary_key=True),
    Column("received_at", UTCDateTime, nullable=False),
    Index("ix_inbound_deliveries_received", "received_at"),
)

# A question signoff asked in a chat (Telegram's "reply with the reason" after Reject): the
# answer is a reply to this message, and this row says which card it is about and who was
# asked, since Telegram does not say what the question itself replied to.
reply_prompts = Table(
    "reply_prompts",
    metadata,
    Column("channel", String(32), primary_key=True),
    Column("address", String(256), primary_key=True),
    Column("message_id", String(256), primary_key=True),
    Column("card_message_id", Integer, ForeignKey("card_messages.id"), nullable=False),
    Column("asked", String(200), nullable=False),
    Column("action", String(16), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
)

# A single-use sign-in link to the web surface, by the SHA-256 of its token (never the token).
web_logins = Table(
    "web_logins",
    metadata,
    Column("token_hash", String(64), primary_key=True),
    Column("principal", String(128), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
    Column("used_at", UTCDateTime, nullable=True),
    Index("ix_web_logins_expires", "expires_at"),
)

# Refused attempts a person made on one request, all of them: the audit trail records the
# first few of each (person, request) as `refused` events and this row counts every one, so
# nobody can grow a request's trail at will by repeating a refused click or POST.
refusal_counts = Table(
    "refusal_counts",
    metadata,
    Column("approval_id", String(36), ForeignKey("approvals.id"), primary_key=True),
    Column("actor", String(200), primary_key=True),
    Column("refused", Integer, nullable=False),
    Column("last_at", UTCDateTime, nullable=False),
    Column("last_action", String(16), nullable=False),
    Column("last_code", String(64), nullable=False),
)

# A standing grant: "approve, and allow the same for ...", given from a request's card by a
# person entitled to decide it. A later request of the same tenant, capability and tool whose
# arguments meet `conditions` (bot/conditions.py; None: any) is approved by it at once while
# it lasts, up to `max_uses`, and only while its giver may still decide such a request (a
# delegate's grant, `as_delegate_of`, only while the delegation lasts) (0013).
standing_grants = Table(
    "standing_grants",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("tenant", String(128), nullable=False),
    Column("capability", String(256), nullable=False),
    Column("tool_name", String(256), nullable=False),
    Column("run_id", String(256)),  # only this run's requests; None: any run
    Column("conditions", _json()),
    Column("granted_by", String(128), nullable=False),
    Column("as_delegate_of", String(128)),
    Column("approval_id", String(36), ForeignKey("approvals.id"), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
    Column("max_uses", Integer),
    Column("uses", Integer, nullable=False, server_default=text("0")),
    Column("revoked_at", UTCDateTime),
    Column("revoked_by", String(200)),
    Index("ix_standing_grants_call", "tenant", "capability", "tool_name", "expires_at"),
)

# One batch of decided requests moved out to an archive file (bot/archive.py), recorded in
# the transaction that deleted them: the database says what left it, when, and in which
# file with which SHA-256, and a file found in the archive directory without its row is a
# batch a crash interrupted (its rows may still be here), finished by the next run (0016).
archive_batches = Table(
    "archive_batches",
    metadata,
    Column("id", String(80), primary_key=True),  # the file's name without .jsonl.gz
    Column("created_at", UTCDateTime, nullable=False),
    Column("cutoff", UTCDateTime, nullable=False),
    Column("requests", Integer, nullable=False),
    Column("events", Integer, nullable=False),
    Column("sha256", String(64), nullable=False),
)

ALL_TABLES: tuple[Table, ...] = (
    approvals,
    approval_events,
    votes,
    card_messages,
    outbox,
    delegations,
    inbound_deliveries,
    reply_prompts,
    web_logins,
    refusal_counts,
    standing_grants,
    archive_batches,
)
