"""The statements on one approval row: insert it, read it, lock it, move it.

A family of `Tx` (store/repository.py). Every state change is `update_approval`'s
conditional UPDATE (bot/transitions.py); the locks here order the transactions that race on
one row, or on one step of a run.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping
from typing import Any, NamedTuple

from sqlalchemy import String, bindparam, func, literal_column, select, union_all, update
from sqlalchemy.engine import Dialect

from store.commits import APPROVALS_CHANNEL
from store.fast_path import DriverStatement
from store.fast_path import run as driver_run
from store.records import Approval
from store.schema import approvals
from store.statements import Statements, insert_for, one_of
from store.votes import with_votes

_GET_APPROVAL = select(approvals).where(approvals.c.id == bindparam("id"))
_GET_TENANT_APPROVAL = _GET_APPROVAL.where(approvals.c.tenant == bindparam("tenant"))
# On SQLite FOR UPDATE renders as nothing: the IMMEDIATE transaction already excludes
# every other writer.
_LOCK_APPROVAL = _GET_APPROVAL.with_for_update()
_LOCK_APPROVAL_OR_SKIP = _GET_APPROVAL.with_for_update(skip_locked=True)
_LOCK_VERSION = (
    select(approvals.c.version).where(approvals.c.id == bindparam("id")).with_for_update()
)
_APPROVAL_BY_KEY = select(approvals).where(
    approvals.c.tenant == bindparam("tenant"),
    approvals.c.run_id == bindparam("run_id"),
    approvals.c.hash == bindparam("hash"),
)
# After a new request's insert, in one statement: a request of the same run asked for with
# this hash and approved as edited since (it has another hash now), and the other live
# requests of its step (none for a request without a step: `step_key = NULL` is never
# true). Two arms, so that each reads along its own partial index. Sorted in
# Python, not by ORDER BY: a step has a request or two, and asked to sort them SQLite
# (without ANALYZE's statistics) reads the tenant's every request along the index that is
# already in created_at order rather than the step's partial index.
_SAME_RUN = (approvals.c.tenant == bindparam("tenant"), approvals.c.run_id == bindparam("run_id"))
_EARLIER_REQUESTS = union_all(
    select(approvals.c.id, approvals.c.created_at, literal_column("1").label("edited")).where(
        *_SAME_RUN, approvals.c.original_hash == bindparam("hash")
    ),
    select(approvals.c.id, approvals.c.created_at, literal_column("0").label("edited")).where(
        *_SAME_RUN,
        approvals.c.step_key == bindparam("step_key"),
        one_of(approvals.c.state, "pending", "approved"),
        approvals.c.id != bindparam("besides"),
    ),
)

# Every request of one step of a run, whatever its state (a release asks whether a newer one
# was made while its call was claimed); a run has a few requests, read along the unique
# (tenant, run_id, hash) index.
_STEP_REQUESTS = select(approvals.c.id, approvals.c.created_at).where(
    *_SAME_RUN, approvals.c.step_key == bindparam("step_key")
)


class EarlierRequests(NamedTuple):
    """What a new request's insert found among its run's requests (`earlier_requests`)."""

    edited_id: str | None  # the request asked for with this call, approved as edited since
    live_step: list[str]  # the step's other pending or approved requests, oldest first


@functools.cache
def _lock_versions_or_fail(n: int) -> Any:
    """`n` approvals' versions, their rows locked (ids bound as id0 ... idN-1), or an error
    at once."""
    ids = [bindparam(f"id{i}", type_=approvals.c.id.type) for i in range(n)]
    return (
        select(approvals.c.id, approvals.c.version)
        .where(approvals.c.id.in_(ids))
        .order_by(approvals.c.id)
        .with_for_update(nowait=True)
    )


# Ids bound per statement when reading many approvals' states: under SQLite's default limit
# of bound parameters on old builds (999), and a few fixed statement shapes at most.
_STATES_AT_ONCE = 500


@functools.cache
def _approval_states(n: int) -> Any:
    ids = [bindparam(f"id{i}", type_=approvals.c.id.type) for i in range(n)]
    return select(approvals.c.id, approvals.c.state).where(approvals.c.id.in_(ids))


# The first half of the two-part advisory lock key of a (tenant, run, step); the second is a
# hash of those.
_STEP_LOCKS = 0x5_7E9
_LOCK_STEP = select(
    func.pg_advisory_xact_lock(_STEP_LOCKS, func.hashtext(bindparam("key", type_=String)))
)


@functools.cache
def _insert_approval(dialect: str) -> Any:
    return (
        insert_for(dialect, approvals)
        .on_conflict_do_nothing(index_elements=["tenant", "run_id", "hash"])
        .returning(approvals)
    )


# Columns the database fills in when an INSERT leaves them out: an insert through the driver
# path builds its record from the values it sent, so it only takes values that name these.
_SERVER_DEFAULTED = frozenset(c.name for c in approvals.c if c.server_default is not None)


@functools.cache
def _driver_insert_approval(dialect: Dialect, keys: tuple[str, ...]) -> DriverStatement:
    statement = (
        insert_for(dialect.name, approvals)
        .on_conflict_do_nothing(index_elements=["tenant", "run_id", "hash"])
        .returning(approvals.c.id)
    )
    return DriverStatement(statement, dialect, keys=keys, returns=[approvals.c.id])


@functools.cache
def _update_approval(
    columns: tuple[str, ...], states: int, by_version: bool, by_hash: bool, notify: bool
) -> Any:
    """UPDATE approvals SET <columns>, version = version + 1 WHERE id AND state IN (:w_s0
    ... :w_sN-1) [AND version] [AND hash] RETURNING *, one statement per shape. `notify`
    (PostgreSQL, a state change): the row's id is also sent on `signoff_approvals` at
    commit, inside the same statement (no round trip of its own), for waits held by other
    processes (store/commits.py)."""
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
    statement = update(approvals).where(*conditions).values(values)
    if notify:
        sent = func.pg_notify(APPROVALS_CHANNEL, approvals.c.id).label("notified")
        return statement.returning(approvals, sent)
    return statement.returning(approvals)


class ApprovalStatements(Statements):
    """Single approvals: insert, read, lock and the conditional transition."""

    async def _driver_row(self, statement: Any, params: Mapping[str, Any]) -> Approval | None:
        """One approval through the driver path (or Core when it cannot be taken)."""
        rows = await self._rows(statement, params)
        return await with_votes(self, Approval.from_row(rows[0]) if rows else None)

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
        params = {"tenant": tenant, "run_id": run_id, "hash": hash_}
        return await self._driver_row(_APPROVAL_BY_KEY, params)

    async def get_approval(self, approval_id: str, tenant: str | None = None) -> Approval | None:
        """One approval, optionally only if it belongs to `tenant`."""
        if tenant is None:
            return await self._driver_row(_GET_APPROVAL, {"id": approval_id})
        return await self._driver_row(_GET_TENANT_APPROVAL, {"id": approval_id, "tenant": tenant})

    async def earlier_requests(
        self, tenant: str, run_id: str, hash_: str, step_key: str | None, *, besides: str
    ) -> EarlierRequests:
        """For the request `besides`, just inserted: the request of its run asked for with
        the same hash and approved as edited since, if any, and the ids of the other live
        requests of its step (none without a step). One statement where it was two."""
        params = {
            "tenant": tenant,
            "run_id": run_id,
            "hash": hash_,
            "step_key": step_key,
            "besides": besides,
        }
        rows = await self._rows(_EARLIER_REQUESTS, params)
        edited = [r["id"] for r in rows if int(r["edited"])]
        live = sorted(
            (r for r in rows if not int(r["edited"])), key=lambda r: (r["created_at"], r["id"])
        )
        return EarlierRequests(edited[0] if edited else None, [r["id"] for r in live])

    async def lock_step(self, tenant: str, run_id: str, step_key: str) -> None:
        """Take the lock of one (tenant, run, step) until this transaction ends, so two new
        requests of the same step cannot each miss the other and both stay live. SQLite
        write transactions are exclusive already; PostgreSQL takes an advisory lock."""
        if self._dialect == "postgresql":
            key = f"{tenant}\n{run_id}\n{step_key}"  # a collision only serialises more
            await self._rows(_LOCK_STEP, {"key": key})

    async def step_requests(self, tenant: str, run_id: str, step_key: str) -> list[str]:
        """The ids of every request of one (tenant, run, step), oldest first: by created_at,
        then id, the order `earlier_requests` gives the step's live ones."""
        params = {"tenant": tenant, "run_id": run_id, "step_key": step_key}
        rows = await self._rows(_STEP_REQUESTS, params)
        return [r["id"] for r in sorted(rows, key=lambda r: (r["created_at"], r["id"]))]

    async def approval_followed_by(self, follow_up_id: str) -> Approval | None:
        """The approval whose lapsed lease raised `follow_up_id` (its interrupted_side_effect
        follow-up)."""
        row = await self._one(select(approvals).where(approvals.c.follow_up_id == follow_up_id), {})
        return await with_votes(self, Approval.from_row(row) if row else None)

    async def lock_approval(
        self, approval_id: str, *, skip_locked: bool = False
    ) -> Approval | None:
        """Read an approval and hold its row lock until commit. With skip_locked, a row
        another transaction holds reads as None instead of being waited for (PostgreSQL;
        SQLite's write transaction already excludes every other writer)."""
        stmt = _LOCK_APPROVAL_OR_SKIP if skip_locked else _LOCK_APPROVAL
        return await self._driver_row(stmt, {"id": approval_id})

    async def lock_version(self, approval_id: str) -> int | None:
        """An approval's version, its row locked until commit (None if it is gone): for a
        writer that only asks whether the row moved since it read it (a card's settle),
        spared reading and decoding the whole row."""
        rows = await self._rows(_LOCK_VERSION, {"id": approval_id})
        return int(rows[0]["version"]) if rows else None

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
        moves = "state" in values
        stmt = _update_approval(
            tuple(sorted(values)),
            len(states),
            expect_version is not None,
            expect_hash is not None,
            moves and self._dialect == "postgresql",
        )
        params: dict[str, Any] = {f"v_{name}": value for name, value in values.items()}
        params |= {f"w_s{i}": state for i, state in enumerate(states)}
        params["w_id"] = approval_id
        if expect_version is not None:
            params["w_version"] = expect_version
        if expect_hash is not None:
            params["w_hash"] = expect_hash
        updated = await self._driver_row(stmt, params)
        if updated is not None and self.held:
            self._forget_subject(approval_id)
        if updated is not None and moves:
            self.moved.append(approval_id)
        return updated

    async def approval_states(self, approval_ids: Collection[str]) -> dict[str, str]:
        """The state of each of these approvals that exists (for waits that learn only that
        another process committed something, store/commits.py)."""
        found: dict[str, str] = {}
        ids = sorted(approval_ids)
        for start in range(0, len(ids), _STATES_AT_ONCE):
            chunk = ids[start : start + _STATES_AT_ONCE]
            params = {f"id{i}": approval_id for i, approval_id in enumerate(chunk)}
            for row in await self._rows(_approval_states(len(chunk)), params):
                found[row["id"]] = row["state"]
        return found

    async def lock_versions_or_fail(self, approval_ids: Collection[str]) -> dict[str, int]:
        """These approvals' versions, their rows locked until commit, or fail at once
        (PostgreSQL's NOWAIT) if another transaction holds one: for a transaction that takes
        several row locks in an order of its own (the outbox's batch settle), so it never
        waits while holding some and so can never be half of a deadlock. SQLite's write lock
        covers it; there this is one read of the versions. Gone rows are left out."""
        if not approval_ids:
            return {}
        ids = {f"id{i}": approval_id for i, approval_id in enumerate(sorted(approval_ids))}
        rows = await self._rows(_lock_versions_or_fail(len(ids)), ids)
        return {r["id"]: int(r["version"]) for r in rows}
