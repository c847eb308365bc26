"""The operator dashboard: what is pending, overdue or stuck, across every tenant.

GET /dashboard shows, for principals marked `operator = true`:
- every pending request, overdue first and then the soonest deadline, a keyset page at a time
  (the sweeper's own index on pending rows by expiry serves it, however many rows there are);
- the most recent human decisions with who decided, from which surface and how long it took;
- dead outbox jobs, each with a Retry button that requeues it as `signoff outbox retry` does;
- two server-rendered SVG charts over the last days (channels/web/charts.py): pending
  requests at the end of each day, and how long decisions took (a histogram). Both come from
  bounded SQL aggregates over indexed columns (per-day counts of audit events, binned decision
  times), never from reading every row.
GET /dashboard/approvals/{id} shows one approval's audit trail with its hash chain verified
as it is displayed (bot.audit.verify), and its execution state.

Everyone else gets a 403 that says why. Every query here is in store/dashboard.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from aiohttp import web

from bot import audit
from bot.card import card_votes
from bot.card_sections import vote_item
from bot.durations import format_duration
from bot.errors import NotFound, NotPending
from bot.model import execution_of
from bot.operator import RECORDED_REFUSALS
from bot.outbox.requeue import retry_dead_job
from bot.routing import GROUP_PREFIX, Directory, covers
from channels.web.charts import DECISION_BINS, decision_chart, pending_chart
from store.records import Approval, Delegation, OutboxJob

if TYPE_CHECKING:
    from channels.web.site import Site, Visitor
    from store.repository import Tx


DASHBOARD = "/dashboard"
PAGE_SIZE = 100
RECENT = 50
DEAD_SHOWN = 100
CHART_DAYS = 14

NOT_AN_OPERATOR = (
    "The dashboard is for operators: it shows every tenant's requests, the outbox and the "
    "audit trail. {who} is not one. An operator is a principal with `operator = true` in its "
    "[principals.{key}] entry of the configuration."
)


def add_routes(app: web.Application, channel: Site) -> None:
    pages = Dashboard(channel)
    app.router.add_get(DASHBOARD, pages.overview)
    app.router.add_get(DASHBOARD + "/", pages.overview)
    app.router.add_get(DASHBOARD + "/approvals/{approval_id}", pages.approval)
    app.router.add_post(DASHBOARD + r"/outbox/{job_id:\d+}/retry", pages.retry)


# -- what the templates show -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PendingRow:
    id: str
    title: str
    tenant: str
    capability: str
    created_at: datetime
    age: str
    expires_at: datetime
    overdue: bool
    time_left: str  # "3 h 5 m", or "overdue by 2 h"
    assignee: str
    assigned_note: str | None
    delegate: str | None
    escalation_level: int
    quorum: str | None  # "2 of 3" for an N-of-M request


@dataclass(frozen=True, slots=True)
class DecisionRow:
    id: str
    title: str
    tenant: str
    decision: str  # approved, rejected, cancelled
    state: str  # where the request is now
    decider: str
    surface: str
    votes: tuple[str, ...]  # a quorum's, in the card's words: every person it took
    decided_at: datetime
    time_to_decide: str


@dataclass(frozen=True, slots=True)
class DeadJobRow:
    id: int
    kind: str
    approval_id: str | None
    destination: str
    attempts: int
    last_error: str
    died_at: datetime | None


@dataclass(frozen=True, slots=True)
class TimelineEvent:
    seq: int
    type: str
    actor: str
    at: datetime
    data: str
    hash: str
    prev_hash: str
    broken: bool


# -- the pages -------------------------------------------------------------------------------


class Dashboard:
    def __init__(self, channel: Site) -> None:
        self.channel = channel

    @property
    def directory(self) -> Directory:
        return self.channel.directory

    async def _operator(self, request: web.Request) -> Visitor | web.Response:
        """The signed-in operator, or the page saying why not (401 sign in, 403 not one)."""
        visitor = await self.channel.visitor(request)
        if isinstance(visitor, web.Response):
            return visitor
        if not visitor.principal.operator:
            return self._not_an_operator(request, visitor)
        return visitor

    def _not_an_operator(self, request: web.Request, visitor: Visitor) -> web.Response:
        who = f"{visitor.principal.name} ({visitor.principal.key})"
        message = NOT_AN_OPERATOR.format(who=who, key=visitor.principal.key)
        return self.channel.refusal(request, visitor, 403, message, title="Operators only")

    async def overview(self, request: web.Request) -> web.Response:
        visitor = await self._operator(request)
        if isinstance(visitor, web.Response):
            return visitor
        now = self.channel.clock.now()
        after = _cursor(request.query.get("after"))
        before = None if after else _cursor(request.query.get("before"))
        today = now.astimezone(UTC).date()
        first_day = today - timedelta(days=CHART_DAYS - 1)
        # The end of each day but today, then now: what happened in between moves the counts.
        ends = [_midnight(first_day + timedelta(days=i)) for i in range(1, CHART_DAYS)] + [now]
        async with self.channel.store.read() as tx:
            rows = await tx.dashboard_pending(limit=PAGE_SIZE + 1, after=after, before=before)
            pending, overdue = await tx.dashboard_pending_counts(now)
            assignees = sorted(
                {r.assignee for r in rows if not r.assignee.startswith(GROUP_PREFIX)}
            )
            away = await tx.delegations_from(assignees, now) if assignees else []
            recent = await tx.dashboard_recent_decisions(RECENT)
            dead = await tx.list_jobs(states=["dead"], limit=DEAD_SHOWN + 1)
            flow = await tx.dashboard_pending_flow(ends)
            histogram = await tx.dashboard_decision_times(
                now - timedelta(days=CHART_DAYS), now, [edge for edge, _ in DECISION_BINS]
            )
            retried = await self._retried(tx, request.query.get("retried"))
            grants = await tx.count_live_standing_grants(now)

        # One row more than a page says whether there is another page in that direction.
        more = len(rows) > PAGE_SIZE
        if before is not None:
            rows = rows[-PAGE_SIZE:] if more else rows
            has_prev, has_next = more, True
        else:
            rows = rows[:PAGE_SIZE]
            has_prev, has_next = after is not None, more
        page = [self._pending_row(row, now, away) for row in rows]
        context: dict[str, Any] = {
            "now": now,
            "pending": page,
            "pending_total": pending,
            "overdue_total": overdue,
            "prev_url": f"{DASHBOARD}?before={_cursor_text(rows[0])}"
            if has_prev and rows
            else None,
            "next_url": f"{DASHBOARD}?after={_cursor_text(rows[-1])}"
            if has_next and rows
            else None,
            "first_url": DASHBOARD if after or before else None,
            "recent": [self._decision_row(*item) for item in recent],
            "dead": [_dead_row(job) for job in dead[:DEAD_SHOWN]],
            "dead_more": len(dead) > DEAD_SHOWN,
            "charts": [
                pending_chart(flow, pending, first_day, today),
                decision_chart(histogram, CHART_DAYS),
            ],
            "status": retried,
            "grants_total": grants,
        }
        return self.channel.page(request, visitor, "dashboard.html", context)

    async def _retried(self, tx: Tx, text: str | None) -> str | None:
        """The status line after a Retry (the redirect names the job)."""
        job_id = _job_id(text)
        job = await tx.get_job(job_id) if job_id is not None else None
        if job is None:
            return None
        return (
            f"Outbox job {job.id} ({job.kind}) is queued again with a fresh set of attempts "
            f"(now {job.state})."
        )

    def _pending_row(self, row: Approval, now: datetime, away: Sequence[Delegation]) -> PendingRow:
        overdue = now >= row.expires_at
        left = row.expires_at - now
        return PendingRow(
            id=row.id,
            title=_title(row),
            tenant=row.tenant,
            capability=row.capability,
            created_at=row.created_at,
            age=format_duration(now - row.created_at),
            expires_at=row.expires_at,
            overdue=overdue,
            time_left=f"overdue by {format_duration(-left)}" if overdue else format_duration(left),
            assignee=self.directory.describe(row.assignee),
            assigned_note=row.assigned_note,
            delegate=self._delegate(row, away),
            escalation_level=row.escalation_level,
            quorum=f"{row.required_approvals} needed" if row.required_approvals > 1 else None,
        )

    def _delegate(self, row: Approval, away: Sequence[Delegation]) -> str | None:
        """Who decides in the assignee's place right now: the earliest started active
        delegation of the assignee whose scope covers the request (as intake picks it)."""
        if row.assignee.startswith(GROUP_PREFIX):
            return None
        for delegation in sorted(away, key=lambda d: (d.starts_at, d.id)):
            if delegation.principal == row.assignee and covers(delegation, row.capability):
                until = (
                    f" until {delegation.ends_at:%Y-%m-%d %H:%M} UTC" if delegation.ends_at else ""
                )
                return self.directory.describe(delegation.delegate) + until
        return None

    def _decision_row(self, row: Approval, decision: str | None, actor: str | None) -> DecisionRow:
        assert row.decided_at is not None  # the query reads decided rows only
        via, _, who = (actor or "").partition(":")
        return DecisionRow(
            id=row.id,
            title=_title(row),
            tenant=row.tenant,
            decision=decision or row.state,
            state=row.state,
            decider=self.directory.describe(row.decided_by) if row.decided_by else "—",
            surface=via if who else (actor or "unknown"),
            votes=tuple(vote_item(vote).line for vote in card_votes(row, self.directory)),
            decided_at=row.decided_at,
            time_to_decide=format_duration(row.decided_at - row.created_at),
        )

    async def approval(self, request: web.Request) -> web.Response:
        visitor = await self._operator(request)
        if isinstance(visitor, web.Response):
            return visitor
        approval_id = request.match_info["approval_id"]
        async with self.channel.store.read() as tx:
            row = await tx.get_approval(approval_id)
            events = await tx.events_for(approval_id) if row else []
            refusals = await tx.refusal_counts(approval_id) if row else []
        if row is None:
            return self.channel.refusal(
                request,
                visitor,
                404,
                f"There is no approval with id {approval_id[:100]}.",
                title="Not found",
            )
        try:
            report = await audit.verify(self.channel.store, approval_id)
        except NotFound:  # deleted between the two reads
            report = None
        broken = report.broken if report is not None else None
        timeline = [
            TimelineEvent(
                seq=e.seq,
                type=e.type,
                actor=e.actor or "—",
                at=e.at,
                data=_compact(e.data),
                hash=e.hash,
                prev_hash=e.prev_hash,
                broken=broken is not None and broken.event_id == e.id,
            )
            for e in events
        ]
        if broken is None and report is not None:
            chain = (
                f"Chain intact: {report.events_checked} events, each hash recomputed and linked "
                "to the one before; the approval row agrees with the end of its trail and its "
                "stored call still hashes to the hash it was requested with."
            )
        elif broken is None:
            chain = "Chain broken: the approval has no audit events at all."
        else:
            where = (
                f"at event #{broken.seq}: "
                if broken.seq and "event #" not in broken.problem
                else ""
            )
            chain = f"Chain broken {where}{broken.problem}."
        context = {
            "row": row,
            "title": _title(row),
            "assignee": self.directory.describe(row.assignee),
            "decided_by": self.directory.describe(row.decided_by) if row.decided_by else None,
            "votes": [vote_item(vote).line for vote in card_votes(row, self.directory)],
            "execution": execution_of(row.state).value,
            "outcome": None
            if row.outcome is None
            else json.dumps(row.outcome, indent=2, ensure_ascii=False),
            "timeline": timeline,
            "refusals": refusals,  # every refused attempt, counted (the trail holds the first)
            "recorded_refusals": RECORDED_REFUSALS,
            "chain_ok": broken is None and report is not None,
            "chain": chain,
            "now": self.channel.clock.now(),
        }
        return self.channel.page(request, visitor, "dashboard_approval.html", context)

    async def retry(self, request: web.Request) -> web.StreamResponse:
        posted = await self.channel.form(request)
        if isinstance(posted, web.Response):
            return posted
        visitor, _form = posted
        if not visitor.principal.operator:
            return self._not_an_operator(request, visitor)
        job_id = _job_id(request.match_info["job_id"])
        if job_id is None:
            return self.channel.refusal(
                request, visitor, 404, "There is no such outbox job; nothing was retried."
            )
        try:
            job = await retry_dead_job(
                self.channel.store,
                self.channel.clock,
                job_id,
                by=f"{visitor.principal.key} from the dashboard",
            )
        except NotFound:
            return self.channel.refusal(
                request, visitor, 404, f"There is no outbox job {job_id}; nothing was retried."
            )
        except NotPending as exc:
            return self.channel.refusal(
                request,
                visitor,
                409,
                f"Outbox job {job_id} is {exc.state}, not dead: only dead jobs are retried, "
                "so nothing was changed.",
            )
        raise web.HTTPSeeOther(f"{DASHBOARD}?retried={job.id}#dead-jobs")


# -- helpers ---------------------------------------------------------------------------------


def _midnight(day: date) -> datetime:
    return datetime.combine(day, datetime.min.time(), UTC)


def _job_id(text: str | None) -> int | None:
    """An outbox job id from a URL: ASCII digits within the column's range, else None."""
    if not text or not (text.isascii() and text.isdigit()) or len(text) > 10:
        return None
    value = int(text)
    return value if 0 < value < 2**31 else None


def _title(row: Approval) -> str:
    presentation = row.presentation if isinstance(row.presentation, dict) else {}
    return str(presentation.get("title") or row.capability)


def _compact(data: Any) -> str:
    try:
        return json.dumps(data, ensure_ascii=False, sort_keys=True, separators=(", ", ": "))
    except (TypeError, ValueError):
        return repr(data)


def _cursor_text(row: Approval) -> str:
    return f"{row.expires_at.astimezone(UTC).strftime('%Y%m%dT%H%M%S.%fZ')}~{row.id}"


def _cursor(text: str | None) -> tuple[datetime, str] | None:
    """(expires_at, id) from a page link; None (the first page) for anything else."""
    if not text or "~" not in text or len(text) > 80:
        return None
    moment, _, approval_id = text.partition("~")
    try:
        when = datetime.strptime(moment, "%Y%m%dT%H%M%S.%fZ").replace(tzinfo=UTC)
    except ValueError:
        return None
    return (when, approval_id) if approval_id else None


def _dead_row(job: OutboxJob) -> DeadJobRow:
    return DeadJobRow(
        id=job.id,
        kind=job.kind,
        approval_id=job.approval_id,
        destination=destination(job),
        attempts=job.attempts,
        last_error=job.last_error or "—",
        died_at=job.done_at,
    )


def destination(job: OutboxJob) -> str:
    """Where a job delivers, in the terms its payload uses."""
    payload = job.payload if isinstance(job.payload, Mapping) else {}
    for key, shown in (
        ("url", "{}"),
        ("target", "{}"),
        ("card_message_id", "card message {}"),
        ("delegation_id", "delegation {}"),
    ):
        if payload.get(key) is not None:
            return shown.format(payload[key])
    return "—"
