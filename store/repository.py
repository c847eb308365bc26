"""Every SQL statement signoff runs, one method each.

`Store.write()` opens a write transaction (BEGIN IMMEDIATE on SQLite), `Store.read()` a read
one; both yield a `Tx` whose methods are the statements (those on refusal counts come from
store/refusals.py). Callers compose a transition from
them (lock, conditional update, audit event, outbox jobs) inside one transaction. Driver
errors are translated into signoff's own errors (store.engine.translated_errors).
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from contextlib import asynccontextmanager, nullcontext
from dataclasses import fields
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Select,
    Table,
    and_,
    bindparam,
    delete,
    func,
    literal_column,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from store.commits import NOTIFY, CommitSignal, watch_commits
from store.driver import DriverStatement
from store.driver import run as driver_run
from store.engine import (
    BEGIN_MODE,
    NO_BEGIN,
    WriterLock,
    create_engine,
    is_sqlite,
    translated_errors,
)
from store.records import (
    Approval,
    Candidate,
    CardMessage,
    ChainHead,
    Delegation,
    Event,
    OutboxJob,
    ReplyPrompt,
    Vote,
)
from store.refusals import RefusalStatements
from store.schema import (
    approval_events,
    approvals,
    card_messages,
    delegations,
    inbound_deliveries,
    outbox,
    reply_prompts,
    votes,
    web_logins,
)


class WriteTurns:
    """This process's SQLite writers, one at a time: a waiting foreground writer goes before
    every waiting background one, except that a background writer passed over
    `_PASSED_OVER` times in a row goes next, so the outbox is slowed, never starved."""

    _PASSED_OVER = 8

    def __init__(self) -> None:
        self._busy = False
        self._foreground: deque[asyncio.Future[None]] = deque()
        self._background: deque[asyncio.Future[None]] = deque()
        self._passed_over = 0

    @asynccontextmanager
    async def turn(self, background: bool = False) -> AsyncIterator[None]:
        if self._busy or self._foreground or self._background:
            waiter = asyncio.get_running_loop().create_future()
            queue = self._background if background else self._foreground
            queue.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._next()  # the turn was handed to us as we were cancelled: pass it on
                else:
                    queue.remove(waiter)
                raise
        else:
            self._busy = True
        try:
            yield
        finally:
            self._next()

    def _next(self) -> None:
        """Hand the turn to the next waiter, or mark it free."""
        if self._background and (not self._foreground or self._passed_over >= self._PASSED_OVER):
            queue = self._background
            self._passed_over = 0
        elif self._foreground:
            queue = self._foreground
            self._passed_over += 1 if self._background else 0
        else:
            self._busy = False
            return
        queue.popleft().set_result(None)


class Store:
    """A database handle: opens transactions, owns the engine."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        sqlite = is_sqlite(engine)
        self._writer = engine.execution_options(**{BEGIN_MODE: "IMMEDIATE"}) if sqlite else engine
        self._reader = engine.execution_options(**{BEGIN_MODE: NO_BEGIN}) if sqlite else engine
        # SQLite admits one writer per file. Queueing this process's writers here, instead of
        # letting them all contend for the file lock, spares them SQLite's busy-wait sleeps
        # (which grow to 100 ms); other processes still wait on busy_timeout.
        self._write_turn: WriteTurns | None = WriteTurns() if sqlite else None
        # ... and across processes on one host (`serve --workers`), an flock beside the file.
        self._file_turn = WriterLock.for_engine(engine)
        self.commits = CommitSignal()

    @classmethod
    def from_url(cls, url: str, **engine_kwargs: Any) -> Store:
        return cls(create_engine(url, **engine_kwargs))

    async def close(self) -> None:
        await self.engine.dispose()
        if self._file_turn is not None:
            self._file_turn.close()

    @asynccontextmanager
    async def write(self, *, background: bool = False) -> AsyncIterator[Tx]:
        """A write transaction; commits when the block exits normally, rolls back otherwise.

        `background`: work nobody is waiting on (the outbox's claims and settles). On SQLite
        its turn comes after the turns of writers someone waits on (a click, an API call),
        so a burst of outbox work does not queue in front of a person's decision."""
        async with (
            self._write_turn.turn(background) if self._write_turn else nullcontext(),
            translated_errors(),
            self._file_turn.held() if self._file_turn else nullcontext(),
            self._writer.begin() as conn,
        ):
            tx = Tx(conn)
            yield tx
        # Reached only once the transaction committed (an exception skips it).
        if tx.queued:
            self.commits.fire()

    async def watch_commits(self, woken: Callable[[], None], stop: asyncio.Event) -> None:
        """Call `woken` when another process commits new outbox jobs (store/commits.py)."""
        await watch_commits(self.engine, woken, stop)

    @asynccontextmanager
    async def read(self) -> AsyncIterator[Tx]:
        """Reads. Each statement sees the committed database as it is when it runs (on SQLite
        as at PostgreSQL's READ COMMITTED: no snapshot spans the block)."""
        async with translated_errors(), self._reader.connect() as conn:
            yield Tx(conn, reading=True)


def _insert(dialect: str, table: Table) -> Any:
    """INSERT with the dialect's ON CONFLICT support (both speak the same clause). Imported
    here: the CLI on SQLite never loads the PostgreSQL dialect."""
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(table)
    from sqlalchemy.dialects import sqlite

    return sqlite.insert(table)


# Statements used on every request are built once: building and keying a SQLAlchemy
# statement costs more CPU than running it. Values travel as bound parameters.

_GET_APPROVAL = select(approvals).where(approvals.c.id == bindparam("id"))
_GET_TENANT_APPROVAL = _GET_APPROVAL.where(approvals.c.tenant == bindparam("tenant"))
_CANDIDATE_COLUMNS = [approvals.c[f.name] for f in fields(Candidate)]
# On SQLite FOR UPDATE renders as nothing: the IMMEDIATE transaction already excludes
# every other writer.
_LOCK_APPROVAL = _GET_APPROVAL.with_for_update()
_LOCK_APPROVAL_OR_SKIP = _GET_APPROVAL.with_for_update(skip_locked=True)
_APPROVAL_BY_KEY = select(approvals).where(
    approvals.c.tenant == bindparam("tenant"),
    approvals.c.run_id == bindparam("run_id"),
    approvals.c.hash == bindparam("hash"),
)
_LIVE_STEP_REQUESTS = (
    select(approvals.c.id)
    .where(
        approvals.c.tenant == bindparam("tenant"),
        approvals.c.run_id == bindparam("run_id"),
        approvals.c.step_key == bindparam("step_key"),
        approvals.c.state.in_(["pending", "approved"]),
        approvals.c.id != bindparam("besides"),
    )
    .order_by(approvals.c.created_at, approvals.c.id)
)
_INSERT_EVENT = approval_events.insert().returning(approval_events)
_EVENTS_FOR = (
    select(approval_events)
    .where(approval_events.c.approval_id == bindparam("approval_id"))
    .order_by(approval_events.c.seq)
)
_VOTES_FOR = (
    select(votes).where(votes.c.approval_id == bindparam("approval_id")).order_by(votes.c.at)
)
_CARD_MESSAGE_AT = select(card_messages).where(
    card_messages.c.channel == bindparam("channel"),
    card_messages.c.address == bindparam("address"),
    card_messages.c.message_id == bindparam("message_id"),
)
_CARD_MESSAGES_FOR = (
    select(card_messages)
    .where(card_messages.c.approval_id == bindparam("approval_id"))
    .order_by(card_messages.c.id)
)
_CARD_MESSAGE = select(card_messages).where(card_messages.c.id == bindparam("id"))
_LOCK_APPROVALS_OR_FAIL = (
    select(approvals.c.id)
    .where(approvals.c.id.in_(bindparam("ids", expanding=True)))
    .order_by(approvals.c.id)
    .with_for_update(nowait=True)
)
_MARK_CARD_RENDERED = (
    update(card_messages)
    .where(card_messages.c.id == bindparam("w_id"))
    .values(
        rendered_state=bindparam("v_state", type_=card_messages.c.rendered_state.type),
        updated_at=bindparam("v_at", type_=card_messages.c.updated_at.type),
    )
)
# The outbox runner's own statements, run on every claim and settle.
_DUE_JOBS = (
    select(outbox.c.id)
    .where(
        outbox.c.state == "queued",
        outbox.c.kind.in_(bindparam("kinds", expanding=True)),
        outbox.c.run_after <= bindparam("now"),
        or_(outbox.c.locked_until.is_(None), outbox.c.locked_until <= bindparam("now")),
    )
    .order_by(outbox.c.run_after, outbox.c.id)
    .limit(bindparam("limit"))
    .with_for_update(skip_locked=True)
)
_CLAIM_JOBS = (
    update(outbox)
    .where(outbox.c.id.in_(_DUE_JOBS.scalar_subquery()))
    .values(
        locked_by=bindparam("w_worker", type_=outbox.c.locked_by.type),
        locked_until=bindparam("w_lease_until", type_=outbox.c.locked_until.type),
        attempts=outbox.c.attempts + 1,
    )
    .returning(outbox)
)
_HELD_JOBS = and_(
    outbox.c.id.in_(bindparam("ids", expanding=True)),
    outbox.c.locked_by == bindparam("worker"),
)
_FINISH_JOBS = (
    update(outbox)
    .where(_HELD_JOBS)
    .values(
        locked_by=None,
        locked_until=None,
        state="done",
        done_at=bindparam("w_done_at", type_=outbox.c.done_at.type),
    )
    .returning(outbox.c.id)
)
_DEFER_JOBS = (
    update(outbox)
    .where(_HELD_JOBS)
    .values(
        locked_by=None,
        locked_until=None,
        run_after=bindparam("w_run_after", type_=outbox.c.run_after.type),
        attempts=outbox.c.attempts - 1,
    )
    .returning(outbox.c.id)
)


@functools.cache
def _insert_card_message(dialect: str) -> Any:
    return (
        _insert(dialect, card_messages)
        .on_conflict_do_nothing(index_elements=["channel", "address", "message_id"])
        .returning(card_messages)
    )


@functools.cache
def _insert_approval(dialect: str) -> Any:
    return (
        _insert(dialect, approvals)
        .on_conflict_do_nothing(index_elements=["tenant", "run_id", "hash"])
        .returning(approvals)
    )


# Columns the database fills in when an INSERT leaves them out: an insert through the driver
# path builds its record from the values it sent, so it only takes values that name these.
_SERVER_DEFAULTED = frozenset(c.name for c in approvals.c if c.server_default is not None)


@functools.cache
def _driver_insert_approval(dialect: Dialect, keys: tuple[str, ...]) -> DriverStatement:
    statement = (
        _insert(dialect.name, approvals)
        .on_conflict_do_nothing(index_elements=["tenant", "run_id", "hash"])
        .returning(approvals.c.id)
    )
    return DriverStatement(statement, dialect, keys=keys, returns=[approvals.c.id])


@functools.cache
def _driver_insert_event(dialect: Dialect, keys: tuple[str, ...]) -> DriverStatement:
    statement = approval_events.insert().returning(approval_events.c.id)
    return DriverStatement(statement, dialect, keys=keys, returns=[approval_events.c.id])


@functools.cache
def _record_delivery(dialect: str) -> Any:
    return (
        _insert(dialect, inbound_deliveries)
        .on_conflict_do_nothing(index_elements=["source", "delivery_id"])
        .returning(inbound_deliveries.c.delivery_id)
    )


@functools.cache
def _driver_record_delivery(dialect: Dialect) -> DriverStatement:
    # Every signed Slack request and Telegram update writes one: the replay guard.
    keys = ("source", "delivery_id", "received_at")
    returns = [inbound_deliveries.c.delivery_id]
    return DriverStatement(_record_delivery(dialect.name), dialect, keys=keys, returns=returns)


@functools.cache
def _driver_enqueue(dialect: Dialect) -> DriverStatement:
    return DriverStatement(_enqueue(dialect.name), dialect, keys=_JOB_KEYS)


@functools.cache
def _driver_select(dialect: Dialect, statement: Any, table: Table) -> DriverStatement:
    """A statement returning whole rows of `table` (SELECT, or RETURNING *)."""
    return DriverStatement(statement, dialect, returns=list(table.c))


@functools.cache
def _delegations_from(count: int) -> Any:
    """Active delegations by any of `count` principals (:p0 ... :pN-1) at :now: one statement
    per count, so it is built and compiled once, not per request."""
    now = bindparam("now", type_=delegations.c.starts_at.type)
    return select(delegations).where(
        delegations.c.principal.in_([bindparam(f"p{i}") for i in range(count)]),
        delegations.c.starts_at <= now,
        or_(delegations.c.ends_at.is_(None), delegations.c.ends_at > now),
        delegations.c.revoked_at.is_(None),
    )


_DELEGATIONS_TO = select(delegations).where(
    delegations.c.delegate == bindparam("delegate"),
    delegations.c.starts_at <= bindparam("now", type_=delegations.c.starts_at.type),
    or_(
        delegations.c.ends_at.is_(None),
        delegations.c.ends_at > bindparam("now", type_=delegations.c.starts_at.type),
    ),
    delegations.c.revoked_at.is_(None),
)


_JOB_KEYS = (
    "kind",
    "approval_id",
    "payload",
    "dedupe_key",
    "state",
    "attempts",
    "run_after",
    "created_at",
)


@functools.cache
def _insert_vote(dialect: str) -> Any:
    return (
        _insert(dialect, votes)
        .on_conflict_do_nothing(index_elements=["approval_id", "principal"])
        .returning(votes.c.principal)
    )


@functools.cache
def _enqueue(dialect: str) -> Any:
    return _insert(dialect, outbox).on_conflict_do_nothing(index_elements=["dedupe_key"])


@functools.cache
def _update_approval(columns: tuple[str, ...], states: int, by_version: bool, by_hash: bool) -> Any:
    """UPDATE approvals SET <columns>, version = version + 1 WHERE id AND state IN (:w_s0
    ... :w_sN-1) [AND version] [AND hash] RETURNING *, one statement per shape."""
    conditions = [
        approvals.c.id == bindparam("w_id"),
        approvals.c.state.in_([bindparam(f"w_s{i}") for i in range(states)]),
    ]
    if by_version:
        conditions.append(approvals.c.version == bindparam("w_version"))
    if by_hash:
        conditions.append(approvals.c.hash == bindparam("w_hash"))
    values: dict[str, Any] = {
        name: bindparam(f"v_{name}", type_=approvals.c[name].type) for name in columns
    }
    values["version"] = approvals.c.version + 1
    return update(approvals).where(*conditions).values(values).returning(approvals)


_PAGE_FILTERS = frozenset({"state", "run_id", "capability", "assignee"})
# Written as SQL literals, not parameters: a partial index (WHERE state = 'pending') is only
# chosen when the query's own condition says so in the text, on SQLite and in PostgreSQL's
# generic plans alike.
_PENDING = approvals.c.state == literal_column("'pending'")
_ZERO = literal_column("0")
# Any constant, the same in every replica: the advisory lock key of delegation writes.
_DELEGATIONS_LOCK = 0x5160FF_DE1E
# The first half of the two-part advisory lock key of a (tenant, run, step); the second is a
# hash of those.
_STEP_LOCKS = 0x5_7E9

_DUE_COLUMN = {
    "pending": approvals.c.expires_at,
    "approved": approvals.c.grant_expires_at,
    "executing": approvals.c.lease_until,
}


class Tx(RefusalStatements):
    """The statements, bound to one connection: a write transaction, or a read (`Store`)."""

    def __init__(self, conn: AsyncConnection, *, reading: bool = False) -> None:
        self.conn = conn
        self._dialect = conn.dialect.name
        self._raw: Any = None
        # Whether this transaction queued or requeued an outbox job (Store.write tells the
        # runner after the commit).
        self.queued = False
        # SQLite reads begin no transaction (Store.read): any statement may take the driver.
        self._reading = reading and self._dialect == "sqlite"

    async def _driver(self) -> Any | None:
        """The driver's connection for the hot statements (store/driver.py), or None while
        no transaction is open on it yet: the caller then takes the Core path, which opens
        one."""
        if self._raw is None:
            self._raw = (await self.conn.get_raw_connection()).driver_connection
        if self._dialect == "sqlite":
            return self._raw if self._reading or self._raw.in_transaction else None
        return self._raw if self._raw.is_in_transaction() else None

    async def _rows(
        self, statement: Any, params: Mapping[str, Any], table: Table
    ) -> list[Mapping[str, Any]]:
        """Whole rows of `table` through the driver path (or Core when it cannot be taken)."""
        driver = await self._driver()
        if driver is None:
            return list(await self._all(statement, params))
        compiled = _driver_select(self.conn.dialect, statement, table)
        rows = await driver_run(driver, self._dialect, compiled, params)
        return [compiled.mapping(r) for r in rows]

    async def _driver_row(self, statement: Any, params: Mapping[str, Any]) -> Approval | None:
        """One approval through the driver path (or Core when it cannot be taken)."""
        rows = await self._rows(statement, params, approvals)
        return Approval.from_row(rows[0]) if rows else None

    async def _one(self, stmt: Any, params: Mapping[str, Any]) -> Mapping[str, Any] | None:
        # Count returned rows, not rowcount: SQLite reports -1 with RETURNING.
        return (await self.conn.execute(stmt, dict(params))).mappings().first()

    async def _all(self, stmt: Any, params: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
        return (await self.conn.execute(stmt, dict(params))).mappings().all()

    # -- approvals -------------------------------------------------------------------------

    async def insert_approval(self, values: Mapping[str, Any]) -> Approval | None:
        """Insert a new approval; None when (tenant, run_id, hash) already exists."""
        driver = await self._driver() if _SERVER_DEFAULTED <= values.keys() else None
        if driver is None:
            row = await self._one(_insert_approval(self._dialect), values)
            return Approval.from_row(row) if row else None
        statement = _driver_insert_approval(self.conn.dialect, tuple(values))
        if not await driver_run(driver, self._dialect, statement, values):
            return None
        # What RETURNING * would give back: the values sent, NULL where none was.
        return Approval.from_row({c.name: values.get(c.name) for c in approvals.c})

    async def approval_by_key(self, tenant: str, run_id: str, hash_: str) -> Approval | None:
        """The approval for one call in one run (the idempotency key)."""
        row = await self._one(_APPROVAL_BY_KEY, {"tenant": tenant, "run_id": run_id, "hash": hash_})
        return Approval.from_row(row) if row else None

    async def get_approval(self, approval_id: str, tenant: str | None = None) -> Approval | None:
        """One approval, optionally only if it belongs to `tenant`."""
        if tenant is None:
            return await self._driver_row(_GET_APPROVAL, {"id": approval_id})
        return await self._driver_row(_GET_TENANT_APPROVAL, {"id": approval_id, "tenant": tenant})

    async def lock_step(self, tenant: str, run_id: str, step_key: str) -> None:
        """Take the lock of one (tenant, run, step) until this transaction ends, so two new
        requests of the same step cannot each miss the other and both stay live. SQLite
        write transactions are exclusive already; PostgreSQL takes an advisory lock."""
        if self._dialect == "postgresql":
            key = f"{tenant}\n{run_id}\n{step_key}"  # a collision only serialises more
            await self.conn.execute(
                select(func.pg_advisory_xact_lock(_STEP_LOCKS, func.hashtext(key)))
            )

    async def live_step_requests(
        self, tenant: str, run_id: str, step_key: str, *, besides: str
    ) -> list[str]:
        """Ids of the pending or approved requests of one (tenant, run, step) but `besides`,
        oldest first."""
        params = {"tenant": tenant, "run_id": run_id, "step_key": step_key, "besides": besides}
        return [r["id"] for r in await self._all(_LIVE_STEP_REQUESTS, params)]

    async def approval_followed_by(self, follow_up_id: str) -> Approval | None:
        """The approval whose lapsed lease raised `follow_up_id` (its interrupted_side_effect
        follow-up)."""
        row = await self._one(select(approvals).where(approvals.c.follow_up_id == follow_up_id), {})
        return Approval.from_row(row) if row else None

    async def lock_approval(
        self, approval_id: str, *, skip_locked: bool = False
    ) -> Approval | None:
        """Read an approval and hold its row lock until commit. With skip_locked, a row
        another transaction holds reads as None instead of being waited for (PostgreSQL;
        SQLite's write transaction already excludes every other writer)."""
        stmt = _LOCK_APPROVAL_OR_SKIP if skip_locked else _LOCK_APPROVAL
        return await self._driver_row(stmt, {"id": approval_id})

    async def update_approval(
        self,
        approval_id: str,
        *,
        expect_states: Collection[str],
        values: Mapping[str, Any],
        expect_version: int | None = None,
        expect_hash: str | None = None,
    ) -> Approval | None:
        """The conditional transition: UPDATE ... WHERE id AND state IN expected [AND version]
        [AND hash], bumping version. None when the row did not match (someone else won)."""
        states = sorted(expect_states)
        stmt = _update_approval(
            tuple(sorted(values)), len(states), expect_version is not None, expect_hash is not None
        )
        params: dict[str, Any] = {f"v_{name}": value for name, value in values.items()}
        params |= {f"w_s{i}": state for i, state in enumerate(states)}
        params["w_id"] = approval_id
        if expect_version is not None:
            params["w_version"] = expect_version
        if expect_hash is not None:
            params["w_hash"] = expect_hash
        return await self._driver_row(stmt, params)

    async def page_approvals(
        self,
        tenant: str,
        *,
        filters: Mapping[str, str],
        before: tuple[datetime, str] | None,
        limit: int,
    ) -> list[Approval]:
        """One page of a tenant's approvals, newest first, after the cursor `before`
        ((created_at, id) of the last row of the previous page). `filters` are equality
        conditions on state, run_id, capability, assignee.

        With a state (and nothing else) the page is a range of the (tenant, state,
        created_at, id) index read backwards from the cursor (0009): its cost follows
        `limit`, not how many rows the tenant has, or how few are in that state."""
        stmt: Select[Any] = select(approvals).where(approvals.c.tenant == tenant)
        for name, value in filters.items():
            if name not in _PAGE_FILTERS:
                raise ValueError(f"cannot filter approvals on {name!r}")
            stmt = stmt.where(approvals.c[name] == value)
        if before is not None:
            # A row value, which both databases turn into one index range (an OR of two
            # conditions is a filter over every row before the cursor on SQLite).
            stmt = stmt.where(
                tuple_(approvals.c.created_at, approvals.c.id)
                < tuple_(
                    bindparam("before_at", before[0], type_=approvals.c.created_at.type),
                    bindparam("before_id", before[1], type_=approvals.c.id.type),
                )
            )
        stmt = stmt.order_by(approvals.c.created_at.desc(), approvals.c.id.desc()).limit(limit)
        rows = (await self.conn.execute(stmt)).mappings().all()
        return [Approval.from_row(r) for r in rows]

    async def due(self, state: str, now: datetime, limit: int) -> list[str]:
        """Ids of approvals in `state` whose clock ran out by `now`, oldest first: pending
        past expires_at, approved past grant_expires_at, executing past lease_until."""
        column = _DUE_COLUMN[state]
        stmt = (
            select(approvals.c.id)
            .where(approvals.c.state == state, column <= now)
            .order_by(column)
            .limit(limit)
        )
        return list((await self.conn.execute(stmt)).scalars().all())

    async def due_escalations(self, now: datetime, limit: int) -> list[str]:
        """Ids of pending approvals whose next escalation step is due, oldest first."""
        stmt = (
            select(approvals.c.id)
            .where(approvals.c.state == "pending", approvals.c.escalate_at <= now)
            .order_by(approvals.c.escalate_at)
            .limit(limit)
        )
        return list((await self.conn.execute(stmt)).scalars().all())

    async def clear_escalation(self, approval_id: str) -> None:
        """No escalation step left for this approval (its route's chain changed)."""
        await self.conn.execute(
            update(approvals).where(approvals.c.id == approval_id).values(escalate_at=None)
        )

    async def past_last_escalation(self) -> list[tuple[str, int]]:
        """(tenant, count) of pending approvals that escalated and have no step left: a
        range of the partial index that holds only those rows (0009)."""
        stmt = (
            select(approvals.c.tenant, func.count())
            .where(
                _PENDING, approvals.c.escalation_level > _ZERO, approvals.c.escalate_at.is_(None)
            )
            .group_by(approvals.c.tenant)
        )
        return [tuple(row) for row in (await self.conn.execute(stmt)).all()]  # type: ignore[misc]

    async def pending_page(self, after_id: str, limit: int) -> list[Approval]:
        """Pending approvals in id order after `after_id` (a scan in bounded pages)."""
        stmt = (
            select(approvals)
            .where(approvals.c.state == "pending", approvals.c.id > after_id)
            .order_by(approvals.c.id)
            .limit(limit)
        )
        return [Approval.from_row(r) for r in (await self.conn.execute(stmt)).mappings().all()]

    async def pending_summary(self) -> list[tuple[str, str, int, datetime]]:
        """(tenant, capability, pending count, oldest created_at) for the metrics: read from
        the partial index of pending rows in its own order (0009), never from the table."""
        stmt = (
            select(
                approvals.c.tenant,
                approvals.c.capability,
                func.count(),
                func.min(approvals.c.created_at),
            )
            .where(_PENDING)
            .group_by(approvals.c.tenant, approvals.c.capability)
        )
        return [tuple(row) for row in (await self.conn.execute(stmt)).all()]  # type: ignore[misc]

    async def list_approvals(
        self, *, tenant: str | None = None, state: str | None = None, limit: int = 100
    ) -> list[Approval]:
        """The newest approvals first, optionally of one tenant and in one state."""
        stmt: Select[Any] = select(approvals)
        if tenant is not None:
            stmt = stmt.where(approvals.c.tenant == tenant)
        if state is not None:
            stmt = stmt.where(approvals.c.state == state)
        stmt = stmt.order_by(approvals.c.created_at.desc(), approvals.c.id.desc()).limit(limit)
        rows = (await self.conn.execute(stmt)).mappings().all()
        return [Approval.from_row(r) for r in rows]

    # -- audit events ----------------------------------------------------------------------

    async def insert_event(self, values: Mapping[str, Any]) -> Event:
        """Append one audit event (bot.audit computed its chain hashes; the caller moved the
        approval's chain head in the same transaction)."""
        driver = await self._driver()
        if driver is None:
            row = await self._one(_INSERT_EVENT, values)
            assert row is not None
            return Event.from_row(row)
        statement = _driver_insert_event(self.conn.dialect, tuple(values))
        (row,) = await driver_run(driver, self._dialect, statement, values)
        return Event.from_row({**values, **statement.mapping(row)})

    async def events_for(self, approval_id: str) -> list[Event]:
        """One approval's audit trail, oldest first."""
        rows = await self._rows(_EVENTS_FOR, {"approval_id": approval_id}, approval_events)
        return [Event.from_row(r) for r in rows]

    async def chain_page(
        self,
        *,
        approval_id: str | None = None,
        after: tuple[str, int] | None = None,
        limit: int = 1000,
    ) -> list[tuple[Event, ChainHead]]:
        """Events in (approval_id, seq) order, a page at a time, each with what its approval
        row records about the trail (chain head, state, decider, hash), for verification."""
        head = [
            approvals.c.audit_seq,
            approvals.c.audit_head,
            approvals.c.state,
            approvals.c.decided_by,
            approvals.c.hash.label("approval_hash"),
            approvals.c.kind,
            approvals.c.capability,
            approvals.c.presentation,
            approvals.c.tool_name,
            approvals.c.tool_args,
        ]
        stmt = select(approval_events, *head).join(
            approvals, approvals.c.id == approval_events.c.approval_id
        )
        if approval_id is not None:
            stmt = stmt.where(approval_events.c.approval_id == approval_id)
        if after is not None:
            last_approval, last_seq = after
            stmt = stmt.where(
                or_(
                    approval_events.c.approval_id > last_approval,
                    and_(
                        approval_events.c.approval_id == last_approval,
                        approval_events.c.seq > last_seq,
                    ),
                )
            )
        stmt = stmt.order_by(approval_events.c.approval_id, approval_events.c.seq).limit(limit)
        rows = (await self.conn.execute(stmt)).mappings().all()
        return [
            (
                Event.from_row(r),
                ChainHead(
                    r["audit_seq"],
                    r["audit_head"],
                    r["state"],
                    r["decided_by"],
                    r["approval_hash"],
                    r["kind"],
                    r["capability"],
                    r["presentation"],
                    r["tool_name"],
                    r["tool_args"],
                ),
            )
            for r in rows
        ]

    async def approvals_without_events(self, limit: int = 10) -> list[str]:
        """Ids of approvals whose whole audit trail is gone (every approval has a
        `requested` event from the transaction that created it)."""
        stmt = (
            select(approvals.c.id)
            .where(
                ~select(approval_events.c.id)
                .where(approval_events.c.approval_id == approvals.c.id)
                .exists()
            )
            .order_by(approvals.c.id)
            .limit(limit)
        )
        return list((await self.conn.execute(stmt)).scalars().all())

    # -- votes -----------------------------------------------------------------------------

    async def insert_vote(self, values: Mapping[str, Any]) -> bool:
        """Record one principal's vote; False when that principal already voted."""
        return (await self._one(_insert_vote(self._dialect), values)) is not None

    async def votes_for(self, approval_id: str) -> list[Vote]:
        """The votes cast on an approval, oldest first."""
        rows = await self._rows(_VOTES_FOR, {"approval_id": approval_id}, votes)
        return [Vote.from_row(r) for r in rows]

    # -- cards -----------------------------------------------------------------------------

    async def card_messages_for(self, approval_id: str) -> list[CardMessage]:
        """Every chat message that shows this approval (each needs updating on a transition)."""
        rows = await self._rows(_CARD_MESSAGES_FOR, {"approval_id": approval_id}, card_messages)
        return [CardMessage.from_row(r) for r in rows]

    # -- outbox ----------------------------------------------------------------------------

    async def enqueue(
        self,
        kind: str,
        payload: Mapping[str, Any],
        *,
        now: datetime,
        approval_id: str | None = None,
        dedupe_key: str | None = None,
        run_after: datetime | None = None,
    ) -> None:
        """Queue a job in the caller's transaction, due now or at `run_after`; a repeated
        dedupe_key is a no-op."""
        job = {
            "kind": kind,
            "approval_id": approval_id,
            "payload": dict(payload),
            "dedupe_key": dedupe_key,
            "state": "queued",
            "attempts": 0,
            "run_after": run_after or now,
            "created_at": now,
        }
        driver = await self._driver()
        if driver is None:
            await self.conn.execute(_enqueue(self._dialect), job)
        else:
            await driver_run(driver, self._dialect, _driver_enqueue(self.conn.dialect), job)
        await self._jobs_queued()

    async def _jobs_queued(self) -> None:
        """Mark the transaction as one that makes outbox work; on PostgreSQL also tell the
        other processes, at commit (a NOTIFY is sent only if the transaction commits)."""
        if self.queued:
            return
        self.queued = True
        if self._dialect == "postgresql":
            await self.conn.exec_driver_sql(NOTIFY)

    async def outbox_jobs(
        self, *, approval_id: str | None = None, state: str | None = None
    ) -> list[OutboxJob]:
        stmt = select(outbox).order_by(outbox.c.id)
        if approval_id is not None:
            stmt = stmt.where(outbox.c.approval_id == approval_id)
        if state is not None:
            stmt = stmt.where(outbox.c.state == state)
        return [OutboxJob.from_row(r) for r in (await self.conn.execute(stmt)).mappings().all()]

    async def claim_jobs(
        self,
        worker: str,
        *,
        now: datetime,
        lease_until: datetime,
        limit: int,
        kinds: Collection[str],
    ) -> list[OutboxJob]:
        """Take up to `limit` due jobs for `worker` until `lease_until`, counting an attempt.

        Due: queued, run_after reached, and not leased (or the lease of a worker that died
        has run out). PostgreSQL skips rows another replica is claiming right now (FOR UPDATE
        SKIP LOCKED); on SQLite the write transaction already excludes every other writer,
        and the lease condition keeps a second process off a job the first one holds.
        """
        params = {
            "kinds": sorted(kinds),
            "now": now,
            "limit": limit,
            "w_worker": worker,
            "w_lease_until": lease_until,
        }
        rows = await self._all(_CLAIM_JOBS, params)
        return sorted((OutboxJob.from_row(r) for r in rows), key=lambda j: (j.run_after, j.id))

    async def finish_job(self, job_id: int, worker: str, *, now: datetime) -> bool:
        """Mark a job done; False if `worker` no longer holds it (its lease ran out and
        another worker took it: that one reports the outcome)."""
        return await self._settle(job_id, worker, state="done", done_at=now)

    async def finish_jobs(
        self, job_ids: Collection[int], worker: str, *, now: datetime
    ) -> set[int]:
        """`finish_job` for many jobs in one statement; the ids `worker` still held (and so
        marked done)."""
        if not job_ids:
            return set()
        params = {"ids": sorted(job_ids), "worker": worker, "w_done_at": now}
        return {row[0] for row in (await self.conn.execute(_FINISH_JOBS, params)).all()}

    async def reschedule_job(
        self, job_id: int, worker: str, *, run_after: datetime, error: str
    ) -> bool:
        """Put a failed job back in the queue for another attempt at `run_after`."""
        return await self._settle(job_id, worker, run_after=run_after, last_error=error)

    async def defer_job(
        self, job_id: int, worker: str, *, run_after: datetime, error: str | None = None
    ) -> bool:
        """Put a claimed job back until `run_after`, its attempt not counted (it was over its
        fair share of the runner's slots, or the far side asked to wait: `error` says so)."""
        values: dict[str, Any] = {"run_after": run_after, "attempts": outbox.c.attempts - 1}
        if error is not None:
            values["last_error"] = error
        return await self._settle(job_id, worker, **values)

    async def defer_jobs(
        self, job_ids: Collection[int], worker: str, *, run_after: datetime
    ) -> set[int]:
        """`defer_job` for many jobs in one statement; the ids `worker` still held."""
        if not job_ids:
            return set()
        params = {"ids": sorted(job_ids), "worker": worker, "w_run_after": run_after}
        return {row[0] for row in (await self.conn.execute(_DEFER_JOBS, params)).all()}

    async def bury_job(self, job_id: int, worker: str, *, now: datetime, error: str) -> bool:
        """Give up on a job that used its attempts: dead until `signoff outbox retry`."""
        return await self._settle(job_id, worker, state="dead", done_at=now, last_error=error)

    async def _settle(self, job_id: int, worker: str, **values: Any) -> bool:
        stmt = (
            update(outbox)
            .where(outbox.c.id == job_id, outbox.c.locked_by == worker)
            .values(locked_by=None, locked_until=None, **values)
            .returning(outbox.c.id)
        )
        return (await self.conn.execute(stmt)).first() is not None

    async def release_jobs(self, worker: str) -> int:
        """Hand back every job `worker` holds without counting the attempt (clean shutdown)."""
        stmt = (
            update(outbox)
            .where(outbox.c.locked_by == worker, outbox.c.state == "queued")
            .values(locked_by=None, locked_until=None, attempts=outbox.c.attempts - 1)
            .returning(outbox.c.id)
        )
        released = len((await self.conn.execute(stmt)).all())
        if released:
            await self._jobs_queued()
        return released

    async def requeue_job(self, job_id: int, *, now: datetime) -> OutboxJob | None:
        """Give a dead job a fresh set of attempts, due now; None if no dead job has that id."""
        stmt = (
            update(outbox)
            .where(outbox.c.id == job_id, outbox.c.state == "dead")
            .values(
                state="queued",
                attempts=0,
                run_after=now,
                locked_by=None,
                locked_until=None,
                done_at=None,
            )
            .returning(outbox)
        )
        row = (await self.conn.execute(stmt)).mappings().first()
        if row is None:
            return None
        await self._jobs_queued()
        return OutboxJob.from_row(row)

    async def get_job(self, job_id: int) -> OutboxJob | None:
        row = await self._one(select(outbox).where(outbox.c.id == job_id), {})
        return OutboxJob.from_row(row) if row else None

    async def list_jobs(self, *, states: Collection[str], limit: int = 100) -> list[OutboxJob]:
        """Jobs in `states`, oldest first."""
        stmt = (
            select(outbox)
            .where(outbox.c.state.in_(list(states)))
            .order_by(outbox.c.id)
            .limit(limit)
        )
        return [OutboxJob.from_row(r) for r in (await self.conn.execute(stmt)).mappings().all()]

    async def outbox_summary(self) -> list[tuple[str, str, int]]:
        """(kind, state, count) of queued and dead jobs, for the metrics: two ranges of the
        (state, run_after) index, so the week of done jobs kept is never read."""
        stmt = (
            select(outbox.c.kind, outbox.c.state, func.count())
            .where(outbox.c.state.in_(["queued", "dead"]))
            .group_by(outbox.c.kind, outbox.c.state)
        )
        return [tuple(row) for row in (await self.conn.execute(stmt)).all()]  # type: ignore[misc]

    async def prune_jobs(self, *, done_before: datetime, limit: int) -> int:
        """Delete up to `limit` jobs that finished before `done_before`. Dead jobs stay until
        an operator retries them."""
        old = (
            select(outbox.c.id)
            .where(outbox.c.state == "done", outbox.c.done_at < done_before)
            .order_by(outbox.c.id)
            .limit(limit)
        )
        stmt = delete(outbox).where(outbox.c.id.in_(old.scalar_subquery())).returning(outbox.c.id)
        return len((await self.conn.execute(stmt)).all())

    # -- card messages (chat renderings of an approval) -------------------------------------

    async def insert_card_message(self, values: Mapping[str, Any]) -> CardMessage:
        """Record a posted card; posting the same message twice records it once."""
        row = await self._one(_insert_card_message(self._dialect), values)
        if row is not None:
            return CardMessage.from_row(row)
        existing = await self.card_message_at(
            values["channel"], values["address"], values["message_id"]
        )
        assert existing is not None  # the conflict that skipped our insert is this row
        return existing

    async def lock_approvals_or_fail(self, approval_ids: Collection[str]) -> None:
        """Lock these approvals' rows until commit, or fail at once (PostgreSQL's NOWAIT) if
        another transaction holds one: for a transaction that takes several row locks in
        an order of its own (the outbox's batch settle), so it never waits while holding
        some and so can never be half of a deadlock. SQLite's write lock covers it."""
        if self._dialect == "postgresql" and approval_ids:
            await self.conn.execute(_LOCK_APPROVALS_OR_FAIL, {"ids": sorted(approval_ids)})

    async def card_message(self, card_message_id: int) -> CardMessage | None:
        rows = await self._rows(_CARD_MESSAGE, {"id": card_message_id}, card_messages)
        return CardMessage.from_row(rows[0]) if rows else None

    async def card_message_at(
        self, channel: str, address: str, message_id: str
    ) -> CardMessage | None:
        """The card shown by one chat message (a click or reply names the message)."""
        where = {"channel": channel, "address": address, "message_id": message_id}
        rows = await self._rows(_CARD_MESSAGE_AT, where, card_messages)
        return CardMessage.from_row(rows[0]) if rows else None

    async def mark_card_rendered(self, card_message_id: int, *, state: str, now: datetime) -> None:
        params = {"w_id": card_message_id, "v_state": state, "v_at": now}
        await self.conn.execute(_MARK_CARD_RENDERED, params)

    async def move_card_messages(self, channel: str, old_address: str, new_address: str) -> int:
        """Say that every card (and question) in `old_address` is now in `new_address`: a
        Telegram group upgraded to a supergroup keeps its messages and their ids under a new
        chat id. Returns how many cards moved."""
        moved = await self.conn.execute(
            update(card_messages)
            .where(card_messages.c.channel == channel, card_messages.c.address == old_address)
            .values(address=new_address)
            .returning(card_messages.c.id)
        )
        await self.conn.execute(
            update(reply_prompts)
            .where(reply_prompts.c.channel == channel, reply_prompts.c.address == old_address)
            .values(address=new_address)
        )
        return len(moved.all())

    # -- delegations ------------------------------------------------------------------------

    async def lock_delegations(self) -> None:
        """Take the delegations table's writer lock until this transaction ends, so a check
        across several rows (no circle) and the insert that relies on it are one step. SQLite
        write transactions are exclusive already; PostgreSQL takes an advisory lock."""
        if self._dialect == "postgresql":
            await self.conn.execute(select(func.pg_advisory_xact_lock(_DELEGATIONS_LOCK)))

    async def insert_delegation(self, values: Mapping[str, Any]) -> Delegation:
        row = await self._one(delegations.insert().returning(delegations), values)
        assert row is not None
        return Delegation.from_row(row)

    async def get_delegation(self, delegation_id: str) -> Delegation | None:
        row = await self._one(select(delegations).where(delegations.c.id == delegation_id), {})
        return Delegation.from_row(row) if row else None

    async def list_delegations(self, *, live_at: datetime | None = None) -> list[Delegation]:
        """Every delegation, or with `live_at` those not over by then (active or to come),
        soonest first."""
        stmt = select(delegations).order_by(delegations.c.starts_at, delegations.c.id)
        if live_at is not None:
            stmt = stmt.where(
                delegations.c.revoked_at.is_(None),
                or_(delegations.c.ends_at.is_(None), delegations.c.ends_at > live_at),
            )
        return [Delegation.from_row(r) for r in (await self.conn.execute(stmt)).mappings().all()]

    async def delegations_to(self, delegate: str, now: datetime) -> list[Delegation]:
        """Delegations naming `delegate` that are active at `now`."""
        params = {"delegate": delegate, "now": now}
        rows = await self._rows(_DELEGATIONS_TO, params, delegations)
        return [Delegation.from_row(r) for r in rows]

    async def delegations_from(
        self, principals: Collection[str], now: datetime
    ) -> list[Delegation]:
        """Delegations by any of `principals` that are active at `now` (one query however
        many approvers a request has)."""
        if not principals:
            return []
        names = sorted(principals)
        params: dict[str, Any] = {f"p{i}": name for i, name in enumerate(names)}
        params["now"] = now
        rows = await self._rows(_delegations_from(len(names)), params, delegations)
        return [Delegation.from_row(r) for r in rows]

    async def revoke_delegation(
        self, delegation_id: str, *, now: datetime, by: str
    ) -> Delegation | None:
        """Revoke a delegation not yet revoked; None if it was (or does not exist)."""
        row = await self._one(
            update(delegations)
            .where(delegations.c.id == delegation_id, delegations.c.revoked_at.is_(None))
            .values(revoked_at=now, revoked_by=by)
            .returning(delegations),
            {},
        )
        return Delegation.from_row(row) if row else None

    # -- inbound chat traffic ---------------------------------------------------------------

    async def record_delivery(self, source: str, delivery_id: str, now: datetime) -> bool:
        """Remember an inbound delivery (a Telegram update id); False if it was seen before,
        by this replica or another."""
        values = {"source": source, "delivery_id": delivery_id, "received_at": now}
        driver = await self._driver()
        if driver is None:
            return await self._one(_record_delivery(self._dialect), values) is not None
        statement = _driver_record_delivery(self.conn.dialect)
        return bool(await driver_run(driver, self._dialect, statement, values))

    async def prune_deliveries(self, received_before: datetime) -> int:
        """Forget deliveries old enough that the platform no longer redelivers them, and the
        prompts asked as long ago."""
        await self.conn.execute(
            delete(reply_prompts).where(reply_prompts.c.created_at < received_before)
        )
        result = await self.conn.execute(
            delete(inbound_deliveries).where(inbound_deliveries.c.received_at < received_before)
        )
        return int(result.rowcount or 0)

    # -- web sign-in links ------------------------------------------------------------------

    async def insert_web_login(
        self, token_hash: str, principal: str, now: datetime, expires_at: datetime
    ) -> None:
        await self.conn.execute(
            web_logins.insert().values(
                token_hash=token_hash, principal=principal, created_at=now, expires_at=expires_at
            )
        )

    async def use_web_login(self, token_hash: str, now: datetime) -> str | None:
        """Mark a sign-in link used, once and before it expires (a conditional update, so two
        replicas opening the same link at once cannot both succeed); its principal, or None."""
        stmt = (
            update(web_logins)
            .where(
                web_logins.c.token_hash == token_hash,
                web_logins.c.used_at.is_(None),
                web_logins.c.expires_at > now,
            )
            .values(used_at=now)
            .returning(web_logins.c.principal)
        )
        row = await self._one(stmt, {})
        return str(row["principal"]) if row else None

    async def web_login(self, token_hash: str) -> Mapping[str, Any] | None:
        """The link's row (principal, expires_at, used_at), to say why it was refused."""
        return await self._one(select(web_logins).where(web_logins.c.token_hash == token_hash), {})

    async def prune_web_logins(self, expired_before: datetime) -> int:
        result = await self.conn.execute(
            delete(web_logins).where(web_logins.c.expires_at < expired_before)
        )
        return int(result.rowcount or 0)

    async def insert_prompt(self, values: Mapping[str, Any]) -> None:
        await self.conn.execute(reply_prompts.insert().values(**values))

    async def prompt_at(self, channel: str, address: str, message_id: str) -> ReplyPrompt | None:
        """The question a chat message asked, if it is one of ours."""
        row = await self._one(
            select(reply_prompts).where(
                reply_prompts.c.channel == channel,
                reply_prompts.c.address == address,
                reply_prompts.c.message_id == message_id,
            ),
            {},
        )
        return ReplyPrompt.from_row(row) if row else None

    async def append_event(self, approval: Approval, values: Mapping[str, Any]) -> Event | None:
        """Append an audit event that changes nothing else (a refused attempt): moves the
        chain head if nobody appended since `approval` was read; None if someone did."""
        moved = await self._one(
            update(approvals)
            .where(approvals.c.id == approval.id, approvals.c.audit_seq == approval.audit_seq)
            .values(audit_seq=values["seq"], audit_head=values["hash"])
            .returning(approvals.c.id),
            {},
        )
        if moved is None:
            return None
        return await self.insert_event(values)

    # -- web inbox ---------------------------------------------------------------------------

    async def pending_naming(
        self,
        keys: Collection[str],
        now: datetime,
        after: tuple[datetime, str] | None,
        limit: int,
    ) -> list[Candidate]:
        """Pending approvals still open at `now` whose assignee or approvers name one of
        `keys` (principals and "group:NAME" entries), soonest deadline first, after the
        cursor `after` ((expires_at, id) of the last row already read): the inbox's
        candidates, along the partial index on pending rows' expires_at, filtered in the
        database so a page never ships other people's requests to be looked at. The caller
        judges each candidate by the eligibility rule itself, then reads the few it shows
        whole (`approvals_in`): a Home counting hundreds parses none of their calls."""
        if self._dialect == "postgresql":
            named = func.json_array_elements_text(approvals.c.approvers).table_valued("value")
        else:
            named = func.json_each(approvals.c.approvers).table_valued("value")
        listed = select(named.c.value).where(named.c.value.in_(list(keys))).exists()
        stmt = select(*_CANDIDATE_COLUMNS).where(
            approvals.c.state == "pending",
            approvals.c.expires_at > now,
            or_(approvals.c.assignee.in_(list(keys)), listed),
        )
        if after is not None:
            expires, last_id = after
            stmt = stmt.where(
                or_(
                    approvals.c.expires_at > expires,
                    and_(approvals.c.expires_at == expires, approvals.c.id > last_id),
                )
            )
        stmt = stmt.order_by(approvals.c.expires_at, approvals.c.id).limit(limit)
        rows = (await self.conn.execute(stmt)).mappings().all()
        return [Candidate.from_row(r) for r in rows]

    async def approvals_in(self, approval_ids: Collection[str]) -> dict[str, Approval]:
        """The approvals with these ids, by id (those that exist)."""
        if not approval_ids:
            return {}
        stmt = select(approvals).where(approvals.c.id.in_(list(approval_ids)))
        rows = (await self.conn.execute(stmt)).mappings().all()
        return {r["id"]: Approval.from_row(r) for r in rows}

    # -- web dashboard -----------------------------------------------------------------------

    async def dashboard_pending(
        self,
        *,
        limit: int,
        after: tuple[datetime, str] | None = None,
        before: tuple[datetime, str] | None = None,
    ) -> list[Approval]:
        """One keyset page of every tenant's pending approvals, soonest deadline first (so
        the overdue lead), along the partial index on pending rows' expires_at: the rows
        after (expires_at, id) `after`, or the `limit` rows just before `before`."""
        stmt = select(approvals).where(approvals.c.state == "pending")
        expires, key = approvals.c.expires_at, approvals.c.id
        if before is not None:
            at, last_id = before
            stmt = stmt.where(or_(expires < at, and_(expires == at, key < last_id)))
            stmt = stmt.order_by(expires.desc(), key.desc()).limit(limit)
            rows = (await self.conn.execute(stmt)).mappings().all()
            return [Approval.from_row(r) for r in reversed(rows)]
        if after is not None:
            at, last_id = after
            stmt = stmt.where(or_(expires > at, and_(expires == at, key > last_id)))
        stmt = stmt.order_by(expires, key).limit(limit)
        return [Approval.from_row(r) for r in (await self.conn.execute(stmt)).mappings().all()]

    async def dashboard_pending_counts(self, now: datetime) -> tuple[int, int]:
        """(pending, of which overdue at `now`) across every tenant, from the partial index."""
        from sqlalchemy import case

        overdue = case((approvals.c.expires_at <= now, 1), else_=0)
        stmt = select(func.count(), func.coalesce(func.sum(overdue), 0)).where(
            approvals.c.state == "pending"
        )
        total, late = (await self.conn.execute(stmt)).one()
        return int(total), int(late)

    async def dashboard_recent_decisions(
        self, limit: int
    ) -> list[tuple[Approval, str | None, str | None]]:
        """The latest human decisions, newest first: each approval with the type and actor of
        the audit event that decided it (the actor names the surface: "web:alice")."""
        decided = and_(
            approval_events.c.approval_id == approvals.c.id,
            approval_events.c.at == approvals.c.decided_at,
            approval_events.c.type.in_(["approved", "rejected", "cancelled"]),
        )
        stmt = (
            select(
                approvals,
                approval_events.c.type.label("decision_event"),
                approval_events.c.actor.label("decision_actor"),
            )
            .select_from(approvals.outerjoin(approval_events, decided))
            .where(approvals.c.decided_at.is_not(None))
            .order_by(approvals.c.decided_at.desc(), approvals.c.id.desc())
            .limit(limit)
        )
        rows = (await self.conn.execute(stmt)).mappings().all()
        return [(Approval.from_row(r), r["decision_event"], r["decision_actor"]) for r in rows]

    async def dashboard_pending_flow(self, boundaries: Sequence[datetime]) -> list[tuple[int, int]]:
        """For each interval (boundaries[i], boundaries[i + 1]]: how many requests were made
        and how many left pending, from the audit trail. Left pending: approved or rejected,
        or expired, cancelled or superseded while pending (the event's `from`; those events
        also close approved grants). Each count is a range of the (type, at) index, which
        SQLite and PostgreSQL count without sorting or grouping anything; only expired,
        cancelled and superseded events are read beyond the index."""
        spans = len(boundaries) - 1
        if spans < 1:
            return []
        params = {f"b{i}": moment for i, moment in enumerate(boundaries)}
        row = (await self.conn.execute(Tx._dashboard_flow(spans), params)).one()
        return [(int(row[3 * i]), int(row[3 * i + 1]) - int(row[3 * i + 2])) for i in range(spans)]

    @staticmethod
    @functools.cache
    def _dashboard_flow(spans: int) -> Any:
        """One row of 3 counts per span, built once per number of spans (building and keying
        a statement of this size costs more than running it)."""
        events = approval_events.c
        ends = ["approved", "rejected", "expired", "cancelled", "superseded"]
        closing = ["expired", "cancelled", "superseded"]
        from_elsewhere = func.coalesce(events.data["from"].as_string(), "pending") != "pending"
        at = approval_events.c.at.type

        def count(i: int, types: list[str], *more: Any) -> Any:
            lo, hi = bindparam(f"b{i}", type_=at), bindparam(f"b{i + 1}", type_=at)
            where = [events.type.in_(types), events.at > lo, events.at <= hi, *more]
            return select(func.count()).select_from(approval_events).where(*where)

        columns = []
        for i in range(spans):
            columns += [
                count(i, ["requested"]).scalar_subquery(),
                count(i, ends).scalar_subquery(),
                count(i, closing, from_elsewhere).scalar_subquery(),
            ]
        return select(*columns)

    async def dashboard_decision_times(
        self, since: datetime, until: datetime, edges: Sequence[int]
    ) -> list[int]:
        """How many human decisions in (since, until] took less than each of `edges`
        (seconds, ascending) from the request, bin by bin; the last count is the rest. Read
        from the (decided_at, created_at) index alone."""
        stmt = Tx._dashboard_decision_times(self._dialect, tuple(edges))
        counts = [0] * (len(edges) + 1)
        for index, n in (await self.conn.execute(stmt, {"since": since, "until": until})).all():
            counts[int(index)] = int(n)
        return counts

    @staticmethod
    @functools.cache
    def _dashboard_decision_times(dialect: str, edges: tuple[int, ...]) -> Any:
        from sqlalchemy import case, extract, literal_column

        decided, created = approvals.c.decided_at, approvals.c.created_at
        if dialect == "postgresql":
            seconds = extract("epoch", decided - created)
        else:
            seconds = (func.julianday(decided) - func.julianday(created)) * 86400
        # Literal numbers, not parameters: the statement is built once, and PostgreSQL would
        # not match a GROUP BY expression whose literals are separate parameters anyway.
        bin_ = case(
            *[
                (seconds < literal_column(str(int(edge))), literal_column(str(i)))
                for i, edge in enumerate(edges)
            ],
            else_=literal_column(str(len(edges))),
        )
        when = bindparam("since", type_=decided.type), bindparam("until", type_=decided.type)
        binned = (
            select(bin_.label("bin"))
            .where(decided.is_not(None), decided > when[0], decided <= when[1])
            .subquery()
        )
        return select(binned.c.bin, func.count()).group_by(binned.c.bin)

    # -- reminders

    async def due_reminders(self, now: datetime, limit: int) -> list[str]:
        """Ids of pending approvals whose reminder is due by `now` and not yet sent, soonest
        first."""
        stmt = (
            select(approvals.c.id)
            .where(
                approvals.c.state == "pending",
                approvals.c.reminded_at.is_(None),
                approvals.c.remind_at <= now,
            )
            .order_by(approvals.c.remind_at)
            .limit(limit)
        )
        return list((await self.conn.execute(stmt)).scalars().all())

    async def mark_reminded(self, approval_id: str, now: datetime) -> bool:
        """Record that the approval's reminder went out, only if it is still pending, due and
        not yet reminded: True for the one caller that wins, so two sweepers never remind
        twice."""
        stmt = (
            update(approvals)
            .where(
                approvals.c.id == approval_id,
                approvals.c.state == "pending",
                approvals.c.reminded_at.is_(None),
                approvals.c.remind_at <= now,
            )
            .values(reminded_at=now)
        )
        return (await self.conn.execute(stmt)).rowcount == 1
