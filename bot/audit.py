"""The audit trail: an append-only, hash-chained list of events per approval.

Each event stores `prev_hash` (the previous event's hash, or 64 zeros for the first) and its
own `hash`, the SHA-256 of the canonical JSON of
`{approval_id, seq, type, actor, at, data, prev_hash}`. The approval row records the chain's
head (`audit_seq`, `audit_head`), moved by the same statement as the transition the event
records. Editing, deleting or re-ordering any event, or cutting the newest ones off, breaks
the chain; `verify` finds the first broken link of every approval, and every approval whose
stored call no longer hashes to the hash it was requested (and decided) with.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.canonical import approval_hash, canonical_json, sha256_hex
from bot.clock import utc_iso
from bot.errors import NotFound, SignoffError
from store.records import Approval, ChainHead, Event
from store.repository import Store, Tx

GENESIS = "0" * 64


def event_hash(
    *,
    approval_id: str,
    seq: int,
    type: str,
    actor: str | None,
    at: datetime,
    data: dict[str, Any],
    prev_hash: str,
) -> str:
    return sha256_hex(
        canonical_json(
            {
                "approval_id": approval_id,
                "seq": seq,
                "type": type,
                "actor": actor,
                "at": utc_iso(at),
                "data": data,
                "prev_hash": prev_hash,
            }
        )
    )


def next_event(
    approval_id: str,
    type: str,
    *,
    after_seq: int,
    after_hash: str,
    actor: str | None,
    at: datetime,
    data: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The row of the event that follows (after_seq, after_hash) in an approval's chain.

    The caller writes it with `Tx.insert_event` and moves the approval's head to
    `{"audit_seq": row["seq"], "audit_head": row["hash"]}` in the same transaction, under the
    approval's row lock, so the chain cannot fork.
    """
    data = data or {}
    seq = after_seq + 1
    own = event_hash(
        approval_id=approval_id,
        seq=seq,
        type=type,
        actor=actor,
        at=at,
        data=data,
        prev_hash=after_hash,
    )
    return {
        "approval_id": approval_id,
        "seq": seq,
        "type": type,
        "actor": actor,
        "at": at,
        "data": data,
        "prev_hash": after_hash,
        "hash": own,
    }


def head_of(event: dict[str, Any]) -> dict[str, Any]:
    """The approval columns that record `event` as its chain's head."""
    return {"audit_seq": event["seq"], "audit_head": event["hash"]}


async def note(
    tx: Tx, row: Approval, event_type: str, *, actor: str, at: datetime, data: dict[str, Any]
) -> Event:
    """Append an event that changes nothing but the trail (a refused attempt, a failed
    integrity check) to `row`, locked in `tx`. The event repeats the row's state and
    decider, so the trail still ends where the row is."""
    data = data | {"state": row.state}
    if row.decided_by is not None:
        data["decided_by"] = row.decided_by
    event = next_event(
        row.id,
        event_type,
        after_seq=row.audit_seq,
        after_hash=row.audit_head,
        actor=actor,
        at=at,
        data=data,
    )
    stored = await tx.append_event(row, event)
    if stored is None:
        raise RuntimeError(f"audit head of {row.id} moved under its lock")
    return stored


def content_hash(
    kind: str, capability: str, presentation: Any, tool: str, args: Any, question: Any = None
) -> str:
    """The request hash the stored fields give now, or "not hashable" when they cannot be
    hashed at all (a row altered outside signoff may not be canonical JSON any more)."""
    try:
        return approval_hash(kind, capability, presentation, tool, args, question)
    except SignoffError:
        return "not hashable"


def row_hash(row: Approval) -> str:
    """`content_hash` of an approval's stored call (or question) as it is now."""
    return content_hash(
        row.kind, row.capability, row.presentation, row.tool_name, row.tool_args, row.question
    )


@dataclass(frozen=True, slots=True)
class Broken:
    event_id: int | None
    approval_id: str
    seq: int
    problem: str


@dataclass(frozen=True, slots=True)
class Report:
    events_checked: int
    approvals_checked: int
    problems: tuple[Broken, ...] = ()  # one per broken approval, in id order

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def broken(self) -> Broken | None:
        """The first broken approval's problem."""
        return self.problems[0] if self.problems else None


def _check(event: Event, previous: Event | None) -> str | None:
    expected_seq = previous.seq + 1 if previous else 1
    if event.seq != expected_seq:
        return f"expected event #{expected_seq}, found #{event.seq} (an event is missing)"
    expected_prev = previous.hash if previous else GENESIS
    if event.prev_hash != expected_prev:
        return "prev_hash does not match the previous event's hash"
    try:
        recomputed = event_hash(
            approval_id=event.approval_id,
            seq=event.seq,
            type=event.type,
            actor=event.actor,
            at=event.at,
            data=event.data,
            prev_hash=event.prev_hash,
        )
    except Exception as exc:  # an edited row may not even be canonical JSON any more
        return f"content cannot be hashed: {exc}"
    if recomputed != event.hash:
        return "content does not match its hash (the event was altered)"
    return None


def chain_problem(row: Approval, events: list[Event]) -> str | None:
    """What is wrong with one approval's chain as read (all its events, oldest first), or
    None when every link holds and it ends where the row says it does."""
    previous: Event | None = None
    for event in events:
        if problem := _check(event, previous):
            return f"event #{event.seq}: {problem}"
        previous = event
    if previous is None or (previous.seq, previous.hash) != (row.audit_seq, row.audit_head):
        return "the approval's recorded chain head does not match its last event"
    return None


@dataclass
class _Trail:
    """What verification has seen of one approval's chain so far."""

    head: ChainHead  # the same on every row of one approval: the join repeats it
    last: Event
    requested_hash: str | None
    decided_by: str | None = None
    # The hash of the call's current revision: the requested one, then each edit's.
    revision_hash: str | None = None
    revision_problem: str | None = None

    def follow(self, event: Event) -> None:
        self.last = event
        if "decided_by" in event.data:
            self.decided_by = event.data["decided_by"]
        if event.type == "requested":
            self.revision_hash = self.requested_hash
        elif event.type == "edited" and self.revision_problem is None:
            self.revision_problem = self._revised(event)

    def _revised(self, event: Event) -> str | None:
        """Each edit starts from the revision before it, and its arguments hash to its hash."""
        head, data = self.head, event.data
        if data.get("from_hash") != self.revision_hash:
            return f"event #{event.seq} edits a revision the trail does not have"
        made = content_hash(
            head.kind, head.capability, head.presentation, head.tool_name, data.get("arguments")
        )
        if made != data.get("hash"):
            return f"event #{event.seq}: the edited arguments do not hash to the edit's hash"
        self.revision_hash = made
        return None


def _check_row(trail: _Trail) -> str | None:
    """The approval row must agree with the end of its trail."""
    head, last = trail.head, trail.last
    if (last.seq, last.hash) != (head.audit_seq, head.audit_head):
        if last.seq < head.audit_seq:
            return (
                f"chain ends at event #{last.seq} but the approval records #{head.audit_seq} "
                "(newer events were deleted)"
            )
        return "the approval's recorded chain head does not match its last event"
    if head.state != last.data.get("state"):
        return f"the approval says {head.state!r} but its trail ends in {last.data.get('state')!r}"
    if head.decided_by != trail.decided_by:
        return (
            f"the approval says decided by {head.decided_by!r} but its trail says "
            f"{trail.decided_by!r}"
        )
    if trail.revision_problem is not None:
        return trail.revision_problem
    if head.hash != trail.revision_hash:
        if trail.revision_hash == trail.requested_hash:
            return "the approval's hash differs from the hash recorded when it was requested"
        return "the approval's hash differs from the hash of its last edit"
    if (head.original_hash or trail.requested_hash) != trail.requested_hash or (
        head.original_hash is not None
        and content_hash(
            head.kind, head.capability, head.presentation, head.tool_name, head.original_args
        )
        != head.original_hash
    ):
        return "the call as first requested (before its edit) no longer hashes to its hash"
    now = content_hash(
        head.kind, head.capability, head.presentation, head.tool_name, head.args, head.question
    )
    if now != head.hash:
        return (
            "the stored call (tool, arguments or presentation) no longer hashes to the "
            f"approval's hash {head.hash[:12]}: it was altered after it was requested"
        )
    return None


def trail_problem(head: ChainHead, events: list[Event]) -> Broken | None:
    """`verify`'s judgement of one approval held apart from the database (an archive file's
    line): every link of `events` (oldest first), and the row (`head`) held to the end of
    its trail and its stored call to its hash. None when all of it holds."""
    trail: _Trail | None = None
    for event in events:
        if problem := _check(event, trail.last if trail else None):
            return Broken(event.id, event.approval_id, event.seq, problem)
        if trail is None:
            trail = _Trail(head, event, event.data.get("hash"))
        trail.follow(event)
    if trail is None:
        return None  # the caller names the approval: it has no events to point at
    if problem := _check_row(trail):
        return Broken(trail.last.id, trail.last.approval_id, trail.last.seq, problem)
    return None


async def verify(store: Store, approval_id: str | None = None, page: int = 1000) -> Report:
    """Recompute every chain (or one approval's), hold each approval row to the end of its
    chain and its stored call to its hash, and report every broken approval (the first
    problem of each)."""
    checked = approvals = 0
    problems: list[Broken] = []
    trail: _Trail | None = None
    skipping: str | None = None  # an approval already found broken: the rest of its chain
    cursor: tuple[str, int] | None = None

    def finish(done: _Trail) -> None:
        if problem := _check_row(done):
            problems.append(Broken(done.last.id, done.last.approval_id, done.last.seq, problem))

    async with store.read() as tx:
        while batch := await tx.chain_page(approval_id=approval_id, after=cursor, limit=page):
            for event, head in batch:
                if trail is not None and trail.last.approval_id != event.approval_id:
                    finish(trail)
                    trail = None
                if event.approval_id == skipping:
                    continue
                checked += 1
                if trail is None:
                    approvals += 1
                if problem := _check(event, trail.last if trail else None):
                    problems.append(Broken(event.id, event.approval_id, event.seq, problem))
                    trail, skipping = None, event.approval_id
                    continue
                if trail is None:
                    trail = _Trail(head, event, event.data.get("hash"))
                trail.follow(event)
            cursor = (batch[-1][0].approval_id, batch[-1][0].seq)
        if trail is not None:
            finish(trail)

        if approval_id is not None and checked == 0:
            if await tx.get_approval(approval_id) is None:
                raise NotFound(f"no approval with id {approval_id!r}")
            orphans = [approval_id]
        else:
            orphans = [] if approval_id is not None else await tx.approvals_without_events(1000)
        for orphan in orphans:
            approvals += 1
            problems.append(Broken(None, orphan, 0, "approval has no audit events at all"))
    return Report(checked, approvals, tuple(sorted(problems, key=lambda b: b.approval_id)))
