"""The statements of retention and audit export: which decided requests may leave the
database, everything stored about them (the request, its audit trail, votes, refusals,
standing grants, card messages), their removal, and the ledger of archive batches
(`archive_batches`). bot/archive.py decides what to do with them.

Functions over a transaction (`Tx`, or any `Statements`), not a family of `Tx`: only the
archiver and the exporter run them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, delete, exists, func, select

from store.schema import (
    approval_events,
    approvals,
    archive_batches,
    card_messages,
    metadata,
    outbox,
    refusal_counts,
    reply_prompts,
    standing_grants,
    votes,
)
from store.statements import Statements, insert_for, one_of

# The states no transition leaves (bot/model.py): outcome_unknown is not one, a late report
# still completes it.
FINAL_STATES = (
    "executed",
    "failed",
    "rejected",
    "expired",
    "cancelled",
    "superseded",
    "answered",
)

_follower = approvals.alias("follower")


def _archivable(cutoff: datetime) -> Any:
    """A final request untouched since `cutoff` that nothing still live leans on.

    The three "nothing leans on it" sets are uncorrelated subqueries, each read once per
    statement (PostgreSQL hashes it, SQLite builds it into a temporary index): correlated,
    the open follow-ups' (approvals.origin_id has no index) read the whole table once per
    candidate, and a batch over 3,000 rows took seconds."""
    last_event_old = exists().where(
        approval_events.c.approval_id == approvals.c.id,
        approval_events.c.seq == approvals.c.audit_seq,
        approval_events.c.at < cutoff,
    )
    # A job still queued (a webhook retrying) would lose its row.
    job_open = select(outbox.c.approval_id).where(
        ~one_of(outbox.c.state, "done", "dead"), outbox.c.approval_id.is_not(None)
    )
    # A follow-up still open inherits its authority from the request it re-runs.
    live_follower = select(_follower.c.origin_id).where(
        ~one_of(_follower.c.state, *FINAL_STATES), _follower.c.origin_id.is_not(None)
    )
    # A standing grant given from it stays with it until the grant is as old as the cutoff.
    grant_recent = select(standing_grants.c.approval_id).where(
        func.coalesce(standing_grants.c.revoked_at, standing_grants.c.expires_at) >= cutoff
    )
    return and_(
        one_of(approvals.c.state, *FINAL_STATES),
        last_event_old,
        approvals.c.id.not_in(job_open),
        approvals.c.id.not_in(live_follower),
        approvals.c.id.not_in(grant_recent),
    )


async def archivable(tx: Statements, cutoff: datetime, after: str, limit: int) -> list[str]:
    """Ids (in id order, past `after`) of up to `limit` requests that may be archived."""
    stmt = (
        select(approvals.c.id)
        .where(approvals.c.id > after, _archivable(cutoff))
        .order_by(approvals.c.id)
        .limit(limit)
    )
    return list((await tx.conn.execute(stmt)).scalars().all())


async def exportable(
    tx: Statements,
    *,
    tenant: str | None,
    since: datetime | None,
    until: datetime | None,
    after: str,
    limit: int,
) -> list[str]:
    """Ids (in id order, past `after`) of requests created in [since, until) of `tenant`."""
    stmt = select(approvals.c.id).where(approvals.c.id > after)
    if tenant is not None:
        stmt = stmt.where(approvals.c.tenant == tenant)
    if since is not None:
        stmt = stmt.where(approvals.c.created_at >= since)
    if until is not None:
        stmt = stmt.where(approvals.c.created_at < until)
    stmt = stmt.order_by(approvals.c.id).limit(limit)
    return list((await tx.conn.execute(stmt)).scalars().all())


async def tenants_seen(tx: Statements, tenant: str) -> bool:
    """Whether any request of `tenant` is stored (a tenant since removed from the config)."""
    stmt = select(approvals.c.id).where(approvals.c.tenant == tenant).limit(1)
    return (await tx.conn.execute(stmt)).first() is not None


def _rows(result: Any) -> list[dict[str, Any]]:
    return [dict(row) for row in result.mappings().all()]


async def bundles(tx: Statements, ids: Sequence[str]) -> list[dict[str, Any]]:
    """Everything stored about each request in `ids`, in id order, as column dictionaries:
    `request` (the row), `events` (its audit trail, oldest first), `votes`, `refusals`,
    `grants` (standing grants given from it) and `cards` (the chat messages that showed it).
    A request gone since its id was found is left out."""
    if not ids:
        return []
    conn = tx.conn
    requests = _rows(
        await conn.execute(
            select(approvals).where(approvals.c.id.in_(ids)).order_by(approvals.c.id)
        )
    )
    by_id: dict[str, dict[str, Any]] = {
        row["id"]: {
            "request": row,
            "events": [],
            "votes": [],
            "refusals": [],
            "grants": [],
            "cards": [],
        }
        for row in requests
    }
    for key, table, order in (
        ("events", approval_events, approval_events.c.seq),
        ("votes", votes, votes.c.at),
        ("refusals", refusal_counts, refusal_counts.c.actor),
        ("grants", standing_grants, standing_grants.c.created_at),
        ("cards", card_messages, card_messages.c.id),
    ):
        stmt = (
            select(table).where(table.c.approval_id.in_(ids)).order_by(table.c.approval_id, order)
        )
        for row in _rows(await conn.execute(stmt)):
            bundle = by_id[row["approval_id"]]
            # Read after its row: an event appended since is past the head the row records
            # and left out, so each request's trail ends where its row says.
            if key != "events" or row["seq"] <= bundle["request"]["audit_seq"]:
                bundle[key].append(row)
    return [by_id[row["id"]] for row in requests]


async def lock_heads(tx: Statements, ids: Sequence[str]) -> dict[str, tuple[int, str, str]]:
    """Lock the rows of `ids` (PostgreSQL: FOR UPDATE; SQLite: the write transaction holds
    the file) and read each one's chain head and state: (audit_seq, audit_head, state)."""
    if not ids:
        return {}
    stmt = select(
        approvals.c.id, approvals.c.audit_seq, approvals.c.audit_head, approvals.c.state
    ).where(approvals.c.id.in_(ids))
    if tx.conn.dialect.name == "postgresql":
        stmt = stmt.with_for_update()
    rows = (await tx.conn.execute(stmt)).all()
    return {row[0]: (row[1], row[2], row[3]) for row in rows}


def _naming_approvals() -> list[Any]:
    """Every table with a column referring to `approvals.id`, children of children first:
    the ones declared beside their statements (email links, embed tokens) too, and any a
    later release adds, so no foreign key stops a delete."""
    return [
        table
        for table in reversed(metadata.sorted_tables)
        if table is not approvals
        and any(fk.column is approvals.c.id for fk in table.foreign_keys)
    ]


async def remove(tx: Statements, ids: Sequence[str]) -> None:
    """Delete the requests `ids` and every row that names them, children first. The caller
    locked them (`lock_heads`) and wrote them to a file that is already on disk."""
    if not ids:
        return
    conn = tx.conn
    cards = select(card_messages.c.id).where(card_messages.c.approval_id.in_(ids))
    await conn.execute(delete(reply_prompts).where(reply_prompts.c.card_message_id.in_(cards)))
    for table in _naming_approvals():
        column = next(fk.parent for fk in table.foreign_keys if fk.column is approvals.c.id)
        await conn.execute(delete(table).where(column.in_(ids)))
    await conn.execute(delete(approvals).where(approvals.c.id.in_(ids)))


async def record_batch(tx: Statements, batch: Mapping[str, Any]) -> bool:
    """Write a batch's ledger row; False when it is there already (another run finished it)."""
    stmt = (
        insert_for(tx.conn.dialect.name, archive_batches)
        .values(**batch)
        .on_conflict_do_nothing(index_elements=["id"])
        .returning(archive_batches.c.id)
    )
    return (await tx.conn.execute(stmt)).first() is not None


async def recorded(tx: Statements, names: Iterable[str]) -> set[str]:
    """Which of the batch ids `names` the ledger holds."""
    found: set[str] = set()
    chunk: list[str] = []
    for name in [*names, None]:
        if name is not None:
            chunk.append(name)
        if chunk and (name is None or len(chunk) == 500):
            stmt = select(archive_batches.c.id).where(archive_batches.c.id.in_(chunk))
            found.update((await tx.conn.execute(stmt)).scalars().all())
            chunk = []
    return found


async def batches(tx: Statements, limit: int = 1000) -> list[dict[str, Any]]:
    """The ledger, newest first."""
    stmt = select(archive_batches).order_by(archive_batches.c.created_at.desc()).limit(limit)
    return _rows(await tx.conn.execute(stmt))


async def counts_before(tx: Statements, cutoff: datetime) -> tuple[int, int]:
    """How many requests are final and untouched since `cutoff` (archivable or held back),
    and how many of those may be archived now: what `db archive --dry-run` reports."""
    old_final = and_(
        one_of(approvals.c.state, *FINAL_STATES),
        exists().where(
            approval_events.c.approval_id == approvals.c.id,
            approval_events.c.seq == approvals.c.audit_seq,
            approval_events.c.at < cutoff,
        ),
    )
    count = select(func.count()).select_from(approvals)
    total = (await tx.conn.execute(count.where(old_final))).scalar_one()
    ready = (await tx.conn.execute(count.where(_archivable(cutoff)))).scalar_one()
    return int(total), int(ready)


__all__ = [
    "FINAL_STATES",
    "archivable",
    "batches",
    "bundles",
    "counts_before",
    "exportable",
    "lock_heads",
    "record_batch",
    "recorded",
    "remove",
    "tenants_seen",
]
