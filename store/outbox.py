"""The statements on `outbox`: queueing jobs in a transition's transaction, and the
runner's claims, settles, retries and pruning (bot/outbox/runner.py).

A family of `Tx` (store/repository.py). A transaction that queues or requeues a job says so
(`Tx.queued`), so `Store.write` wakes the runner after the commit; on PostgreSQL it also
sends the NOTIFY other processes listen for (store/commits.py).
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import and_, bindparam, delete, func, or_, select, update
from sqlalchemy.engine import Dialect

from store.commits import NOTIFY
from store.fast_path import DriverStatement
from store.fast_path import run as driver_run
from store.records import Approval, OutboxJob
from store.schema import outbox
from store.statements import Statements, insert_for, one_of

# The outbox runner's own statements, run on every claim and settle: one statement per
# shape (the runner's kinds, the number of jobs settled together), each compiled once for the
# driver path.
_UNLEASED = or_(outbox.c.locked_until.is_(None), outbox.c.locked_until <= bindparam("now"))


def _queued(kinds: tuple[str, ...]) -> Any:
    return and_(one_of(outbox.c.state, "queued"), one_of(outbox.c.kind, *kinds))


@functools.cache
def _next_due(kinds: tuple[str, ...]) -> Any:
    """When the next job falls due (now or earlier if one is due), without a lock or a
    write: what an idle runner asks at each poll. A leased job falls due when its lease runs
    out."""
    return select(
        select(func.min(outbox.c.run_after))
        .where(_queued(kinds), _UNLEASED)
        .scalar_subquery()
        .label("free"),
        select(func.min(outbox.c.locked_until))
        .where(_queued(kinds), outbox.c.locked_until > bindparam("now"))
        .scalar_subquery()
        .label("leased"),
    )


@functools.cache
def _claim_jobs(kinds: tuple[str, ...]) -> Any:
    due = (
        select(outbox.c.id)
        .where(_queued(kinds), outbox.c.run_after <= bindparam("now"), _UNLEASED)
        .order_by(outbox.c.run_after, outbox.c.id)
        .limit(bindparam("limit"))
        .with_for_update(skip_locked=True)
    )
    return (
        update(outbox)
        .where(outbox.c.id.in_(due.scalar_subquery()))
        .values(
            locked_by=bindparam("w_holder", type_=outbox.c.locked_by.type),
            locked_until=bindparam("w_lease_until", type_=outbox.c.locked_until.type),
            attempts=outbox.c.attempts + 1,
        )
        .returning(outbox)
    )


def _held_jobs(n: int) -> Any:
    """`n` jobs by id (bound as id0 ... idN-1), still held by `holder`."""
    ids = [bindparam(f"id{i}", type_=outbox.c.id.type) for i in range(n)]
    return and_(outbox.c.id.in_(ids), outbox.c.locked_by == bindparam("holder"))


def _release_held(n: int, **values: Any) -> Any:
    """`n` held jobs let go of, with `values` set; the ids of those still held."""
    return (
        update(outbox)
        .where(_held_jobs(n))
        .values(locked_by=None, locked_until=None, **values)
        .returning(outbox.c.id)
    )


@functools.cache
def _finish_jobs(n: int) -> Any:
    return _release_held(
        n, state="done", done_at=bindparam("w_done_at", type_=outbox.c.done_at.type)
    )


@functools.cache
def _defer_jobs(n: int) -> Any:
    return _release_held(
        n,
        run_after=bindparam("w_run_after", type_=outbox.c.run_after.type),
        attempts=outbox.c.attempts - 1,
    )


def _ids(job_ids: Collection[int]) -> dict[str, int]:
    return {f"id{i}": job_id for i, job_id in enumerate(sorted(job_ids))}


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
def _enqueue(dialect: str) -> Any:
    return insert_for(dialect, outbox).on_conflict_do_nothing(index_elements=["dedupe_key"])


@functools.cache
def _enqueue_held(dialect: str) -> Any:
    """A job queued leased to this process's runner (store/commits.py): the row, unless its
    dedupe key was queued before."""
    return _enqueue(dialect).returning(outbox)


@functools.cache
def _driver_enqueue(dialect: Dialect) -> DriverStatement:
    return DriverStatement(_enqueue(dialect.name), dialect, keys=_JOB_KEYS)


_ROW_KEYS = (*_JOB_KEYS, "locked_by", "locked_until")
# Jobs per INSERT: a statement is compiled and kept per number of rows, so there are few.
_ROWS_AT_ONCE = 16


@functools.cache
def _enqueue_rows(dialect: str, n: int, held: bool) -> Any:
    """`n` jobs in one INSERT (values bound as kind0 ... locked_until<n-1>), returning the
    rows queued (less those whose dedupe key was queued before): whole when some are
    leased at birth (`held`), else their ids only, not every payload decoded back."""
    rows = [{k: bindparam(f"{k}{i}", type_=outbox.c[k].type) for k in _ROW_KEYS} for i in range(n)]
    return _enqueue(dialect).values(rows).returning(*([outbox] if held else [outbox.c.id]))


def _job_row(
    kind: str,
    payload: Mapping[str, Any],
    approval_id: str | None,
    dedupe_key: str | None,
    run_after: datetime,
    now: datetime,
    lease: tuple[str, datetime] | None,
) -> dict[str, Any]:
    """A new job's row; one `lease` gives its runner (an attempt counted, as a claim does)."""
    row = {
        "kind": kind,
        "approval_id": approval_id,
        "payload": dict(payload),
        "dedupe_key": dedupe_key,
        "state": "queued",
        "attempts": 0,
        "run_after": run_after,
        "created_at": now,
    }
    if lease is not None:
        row |= {"locked_by": lease[0], "locked_until": lease[1], "attempts": 1}
    return row


@dataclass(frozen=True, slots=True)
class NewJob:
    """A job to queue (`Tx.enqueue_all`); the fields are `Tx.enqueue`'s."""

    kind: str
    payload: Mapping[str, Any]
    dedupe_key: str  # also how the row that comes back is told apart
    approval_id: str | None = None
    subject: Approval | None = None


class OutboxStatements(Statements):
    """Queueing outbox jobs, and the runner's leases and outcomes."""

    async def enqueue(
        self,
        kind: str,
        payload: Mapping[str, Any],
        *,
        now: datetime,
        approval_id: str | None = None,
        dedupe_key: str | None = None,
        run_after: datetime | None = None,
        subject: Approval | None = None,
    ) -> None:
        """Queue a job in the caller's transaction, due now or at `run_after`; a repeated
        dedupe_key is a no-op. A job due now goes to this process's runner if it takes it:
        leased to it, and handed to it at commit (store/commits.py), carrying `subject` (the
        approval as this transaction has it) so that the runner need not read it back."""
        lease = self.taker.lease(kind) if self.taker is not None and run_after is None else None
        job = _job_row(kind, payload, approval_id, dedupe_key, run_after or now, now, lease)
        if lease is not None:
            self.leased += 1
            rows = await self._insert_rows(_enqueue_held(self._dialect), job)
            for row in rows:
                queued = OutboxJob.from_row(row)
                self.held.append(queued if subject is None else replace(queued, subject=subject))
            return
        driver = await self._driver()
        if driver is None:
            await self.conn.execute(_enqueue(self._dialect), job)
        else:
            await driver_run(driver, self._dialect, _driver_enqueue(self.conn.dialect), job)
        await self._jobs_queued()

    async def enqueue_all(self, jobs: Sequence[NewJob], *, now: datetime) -> None:
        """Queue jobs due now in the caller's transaction as `enqueue` does each, in one
        statement: a transition's webhook and its card updates cost one round trip, not one
        each (up to `_ROWS_AT_ONCE`)."""
        if len(jobs) == 1:
            [job] = jobs
            await self.enqueue(
                job.kind,
                job.payload,
                now=now,
                approval_id=job.approval_id,
                dedupe_key=job.dedupe_key,
                subject=job.subject,
            )
            return
        # A key asked for twice is one job: its repeat would take a lease for nothing.
        once: dict[str, NewJob] = {}
        for job in jobs:
            once.setdefault(job.dedupe_key, job)
        unique = list(once.values())
        for start in range(0, len(unique), _ROWS_AT_ONCE):
            await self._insert_jobs(unique[start : start + _ROWS_AT_ONCE], now)

    async def _insert_jobs(self, jobs: Sequence[NewJob], now: datetime) -> None:
        params: dict[str, Any] = {}
        leased = 0
        for i, job in enumerate(jobs):
            lease = self.taker.lease(job.kind) if self.taker is not None else None
            if lease is not None:
                leased += 1
            row = _job_row(job.kind, job.payload, job.approval_id, job.dedupe_key, now, now, lease)
            params |= {f"{key}{i}": row.get(key) for key in _ROW_KEYS}
        self.leased += leased
        rows = await self._rows(_enqueue_rows(self._dialect, len(jobs), leased > 0), params)
        if leased:  # those leased at birth are handed over at commit, with their subject
            subjects = {job.dedupe_key: job.subject for job in jobs}
            for row in rows:
                if row["locked_by"] is not None:
                    queued = OutboxJob.from_row(row)
                    self.held.append(replace(queued, subject=subjects.get(queued.dedupe_key)))
        if leased < len(jobs):
            await self._jobs_queued()

    async def _jobs_queued(self) -> None:
        """Mark the transaction as one that makes outbox work; on PostgreSQL also tell the
        other processes, at commit (a NOTIFY is sent only if the transaction commits)."""
        if self.queued:
            return
        self.queued = True
        if self._dialect == "postgresql":
            driver = await self._driver()
            if driver is not None:
                await driver.execute(NOTIFY)
            else:
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
        holder: str,
        *,
        now: datetime,
        lease_until: datetime,
        limit: int,
        kinds: Collection[str],
    ) -> list[OutboxJob]:
        """Take up to `limit` due jobs for `holder` until `lease_until`, counting an attempt.

        Due: queued, run_after reached, and not leased (or the lease of a holder that died
        has run out). PostgreSQL skips rows another replica is claiming right now (FOR UPDATE
        SKIP LOCKED); on SQLite the write transaction already excludes every other writer,
        and the lease condition keeps a second process off a job the first one holds.
        """
        if not kinds:
            return []
        params = {"now": now, "limit": limit, "w_holder": holder, "w_lease_until": lease_until}
        rows = await self._rows(_claim_jobs(tuple(sorted(kinds))), params)
        return sorted((OutboxJob.from_row(r) for r in rows), key=lambda j: (j.run_after, j.id))

    async def next_due(self, *, now: datetime, kinds: Collection[str]) -> datetime | None:
        """When `claim_jobs` would next take something (at or before `now` if it would now);
        None with nothing queued. A read: no write lock."""
        if not kinds:
            return None
        [row] = await self._rows(_next_due(tuple(sorted(kinds))), {"now": now})
        free, leased = row["free"], row["leased"]
        return min((t for t in (free, leased) if t is not None), default=None)

    async def jobs_of(
        self, approval_id: str, kind: str, states: Collection[str]
    ) -> list[OutboxJob]:
        """The jobs of `kind` queued for `approval_id` that are now in one of `states`."""
        stmt = select(outbox).where(
            outbox.c.approval_id == approval_id,
            outbox.c.kind == kind,
            outbox.c.state.in_(sorted(states)),
        )
        return [OutboxJob.from_row(row) for row in await self._all(stmt, {})]

    async def finish_job(self, job_id: int, holder: str, *, now: datetime) -> bool:
        """Mark a job done; False if `holder` no longer holds it (its lease ran out and
        another runner took it: that one reports the outcome)."""
        return await self._settle(job_id, holder, state="done", done_at=now)

    async def finish_jobs(
        self, job_ids: Collection[int], holder: str, *, now: datetime
    ) -> set[int]:
        """`finish_job` for many jobs in one statement; the ids `holder` still held (and so
        marked done)."""
        if not job_ids:
            return set()
        params = {**_ids(job_ids), "holder": holder, "w_done_at": now}
        return {row["id"] for row in await self._rows(_finish_jobs(len(job_ids)), params)}

    async def reschedule_job(
        self, job_id: int, holder: str, *, run_after: datetime, error: str
    ) -> bool:
        """Put a failed job back in the queue for another attempt at `run_after`."""
        return await self._settle(job_id, holder, run_after=run_after, last_error=error)

    async def defer_job(
        self, job_id: int, holder: str, *, run_after: datetime, error: str | None = None
    ) -> bool:
        """Put a claimed job back until `run_after`, its attempt not counted (it was over its
        fair share of the runner's slots, or the far side asked to wait: `error` says so)."""
        values: dict[str, Any] = {"run_after": run_after, "attempts": outbox.c.attempts - 1}
        if error is not None:
            values["last_error"] = error
        return await self._settle(job_id, holder, **values)

    async def defer_jobs(
        self, job_ids: Collection[int], holder: str, *, run_after: datetime
    ) -> set[int]:
        """`defer_job` for many jobs in one statement; the ids `holder` still held."""
        if not job_ids:
            return set()
        params = {**_ids(job_ids), "holder": holder, "w_run_after": run_after}
        return {row["id"] for row in await self._rows(_defer_jobs(len(job_ids)), params)}

    async def bury_job(self, job_id: int, holder: str, *, now: datetime, error: str) -> bool:
        """Give up on a job that used its attempts: dead until `signoff outbox retry`."""
        return await self._settle(job_id, holder, state="dead", done_at=now, last_error=error)

    async def _settle(self, job_id: int, holder: str, **values: Any) -> bool:
        stmt = (
            update(outbox)
            .where(outbox.c.id == job_id, outbox.c.locked_by == holder)
            .values(locked_by=None, locked_until=None, **values)
            .returning(outbox.c.id)
        )
        return (await self.conn.execute(stmt)).first() is not None

    async def release_jobs(self, holder: str) -> int:
        """Hand back every job `holder` holds without counting the attempt (clean shutdown)."""
        stmt = (
            update(outbox)
            .where(outbox.c.locked_by == holder, outbox.c.state == "queued")
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
