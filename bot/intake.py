"""Creating approval requests: the one code path behind `signoff approvals request` and
`POST /v1/approvals`.

Parsing (bot.validation.parse_json) refuses what could not be hashed faithfully (NaN
literals, duplicate keys); validation (pydantic) refuses unknown fields and wrong types, and
canonicalisation refuses numbers outside the exact double range; creation routes the request
and inserts it idempotently on (tenant, run_id, hash) together with its `requested` audit
event.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import partial
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, Field, StrictStr

from bot import audit, edits, effects, standing, transitions
from bot.canonical import MAX_DEPTH, approval_hash, canonical_json, check_canonical, sha256_hex
from bot.clock import Clock, utc_iso
from bot.destinations import url_problem
from bot.durations import format_duration, parse_duration
from bot.errors import (
    ApproversOutsideRoute,
    InvalidRequest,
)
from bot.model import Kind, State
from bot.routing import Directory, Route, covers
from bot.validation import (
    IS_DURATION,
    IS_HTTP_URL,
    IS_TTL,
    IS_WHOLE,
    MAX_REQUEST_BYTES,
    NO_NUL,
    StrictModel,
    parse_json,
    validate,
)
from store.records import Approval, Delegation
from store.repository import Store, Tx

# How much deeper the decision webhook's body holds a request's fields than the request.
WEBHOOK_ENVELOPE = 1
# A question's options are buttons on every surface: a few, each short.
MAX_OPTIONS = 5
MAX_OPTION = 80

JsonValue = Any
M = TypeVar("M", bound=BaseModel)


class ToolCall(StrictModel):
    name: Annotated[StrictStr, Field(min_length=1, max_length=256), NO_NUL]
    arguments: dict[str, JsonValue]


class PresentationField(StrictModel):
    label: Annotated[StrictStr, Field(min_length=1, max_length=200)]
    value: StrictStr | int | float | bool | None


class Presentation(StrictModel):
    title: Annotated[StrictStr, Field(min_length=1, max_length=300)]
    summary: Annotated[StrictStr, Field(max_length=4000)] | None = None
    fields: list[PresentationField] | None = None


Option = Annotated[StrictStr, Field(min_length=1, max_length=MAX_OPTION), NO_NUL]


class Question(StrictModel):
    """What a question offers: a few options to choose from, or (without them) a reply in
    words."""

    options: Annotated[list[Option], Field(min_length=2, max_length=MAX_OPTIONS)] | None = None


class RequestBody(StrictModel):
    """The create body (docs/reference.md, "HTTP API")."""

    run_id: Annotated[StrictStr, Field(min_length=1, max_length=256), NO_NUL]
    capability: Annotated[
        StrictStr,
        Field(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$"),
    ]
    # A tool call carries `tool` (and may carry its `input_schema`); a question, `question`.
    # Not nullable: a field a request does not have is left out (_check_kind).
    tool: ToolCall = None  # type: ignore[assignment]
    question: Question = None  # type: ignore[assignment]
    input_schema: dict[str, JsonValue] = None  # type: ignore[assignment]
    presentation: Presentation
    # interrupted_side_effect is raised by signoff itself, never asked for by an agent.
    kind: Literal["tool_call", "question"] = "tool_call"
    step: JsonValue = None
    reason: Annotated[StrictStr, Field(max_length=4000), NO_NUL] | None = None
    requested_by: Annotated[StrictStr, Field(min_length=1, max_length=128), NO_NUL] | None = None
    approvers: Annotated[list[StrictStr], Field(min_length=1)] | None = None
    approval_ttl: Annotated[StrictStr, IS_DURATION, IS_TTL] | None = None
    grant_ttl: Annotated[StrictStr, IS_DURATION, IS_TTL] | None = None
    required_approvals: Annotated[int, Field(ge=1, le=50), IS_WHOLE] | None = None
    preconditions: JsonValue = None
    resume: JsonValue = None
    callback_url: Annotated[StrictStr, IS_HTTP_URL, NO_NUL] | None = None


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    body: RequestBody
    # The presentation exactly as sent: it is hashed and stored as is, so an agent computing
    # the hash on its side over what it sent gets the same value.
    raw_presentation: dict[str, Any]
    # A question's `question` exactly as sent (hashed as is, like the presentation).
    raw_question: dict[str, Any] | None = None


def validate_request(document: Any) -> ParsedRequest:
    """Validate a parsed JSON document as a create body; InvalidRequest lists failing fields."""
    try:
        body = validate(RequestBody, document)
    except InvalidRequest as refused:
        # A missing `tool` is a failing field too, listed with the others.
        if isinstance(document, dict) and document.get("kind", "tool_call") == "tool_call":
            if "tool" not in document and refused.fields is not None:
                fields = [*refused.fields, {"field": "tool", "message": "Field required"}]
                summary = "; ".join(f"{f['field']}: {f['message']}" for f in fields[:5])
                raise InvalidRequest(f"invalid request: {summary}", fields=fields) from None
        raise
    _check_kind(body)
    # Everything the agent chose must survive canonicalisation (refuses 1e400, 2**60, ...),
    # with a level to spare: its decision webhook carries the record one level deeper
    # ({"approval": {..., "tool": {"arguments": ...}}}), and what was accepted must be
    # deliverable.
    check_canonical(document, max_depth=MAX_DEPTH - WEBHOOK_ENVELOPE)
    if body.input_schema is not None:
        edits.check_schema(body.input_schema)
    return ParsedRequest(
        body=body,
        raw_presentation=document["presentation"],
        raw_question=document.get("question") if body.kind == Kind.QUESTION else None,
    )


def _check_kind(body: RequestBody) -> None:
    """A tool call has a tool and no question; a question, the reverse, and one answer."""

    def refuse(field: str, message: str) -> None:
        raise InvalidRequest(
            f"invalid request: {field}: {message}", fields=[{"field": field, "message": message}]
        )

    if body.kind == Kind.QUESTION:
        if body.question is None:
            refuse("question", 'a question (kind "question") needs `question`')
        for field in ("tool", "input_schema"):
            if getattr(body, field) is not None:
                refuse(field, f"a question has no call: leave out `{field}`")
        options = body.question.options or [] if body.question else []
        if len(set(options)) < len(options):
            refuse("question.options", "the options must differ from each other")
        if (body.required_approvals or 1) > 1:
            refuse("required_approvals", "a question is answered by one person")
    else:
        if body.tool is None:
            refuse("tool", "a tool call needs `tool`")
        if body.question is not None:
            refuse("question", '`question` is only for a request of kind "question"')


def parse_request(data: bytes | str, limit: int = MAX_REQUEST_BYTES) -> ParsedRequest:
    return validate_request(parse_json(data, limit))


def _narrow(directory: Directory, route: Route, asked: list[str] | None) -> list[str]:
    """A request may narrow its route's approvers, never widen them."""
    if asked is None:
        return list(route.approvers)
    allowed = set(route.approvers) | directory.expand(route.approvers)
    outside = [a for a in asked if a not in allowed]
    if outside:
        raise ApproversOutsideRoute(
            f"approvers {outside} are not approvers on the route for {route.capability!r} "
            f"(allowed: {sorted(allowed)}); a request may narrow its approvers, never widen them"
        )
    return list(dict.fromkeys(asked))


def _capped(asked: str | None, route_value: timedelta, name: str) -> timedelta:
    if asked is None:
        return route_value
    value = parse_duration(asked)
    if value > route_value:  # never over 365 days either: the body's model refused that
        raise InvalidRequest(
            f"{name} {asked!r} is longer than the route allows ({format_duration(route_value)}); "
            "a request may shorten it, not extend it",
            fields=[{"field": name, "message": "longer than the route allows"}],
        )
    return value


@dataclass(frozen=True, slots=True)
class Draft:
    """Everything a new approval row is made from, already routed and hashed."""

    tenant: str
    run_id: str
    kind: Kind
    capability: str
    tool_name: str
    tool_args: Any
    presentation: Any
    hash: str
    reason: str | None
    requested_by: str | None
    approvers: list[str]
    required_approvals: int
    allow_self_approval: bool
    approval_ttl: timedelta
    grant_ttl: timedelta
    first_escalation: timedelta | None
    step: Any = None
    preconditions: Any = None
    resume: Any = None
    callback_url: str | None = None
    origin_id: str | None = None
    # The assignee is away: who decides in their place (an active delegation), shown on the
    # card and in the audit trail.
    delegated_to: str | None = None
    assigned_note: str | None = None
    remind_before: timedelta | None = None  # the route's: its assignees are reminded then
    question: Any = None
    input_schema: Any = None


def new_approval(
    draft: Draft, *, now: datetime, actor: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The row values of a new pending approval and its `requested` audit event (the first
    link of its chain); the caller inserts both in one transaction."""
    approval_id = str(uuid.uuid4())
    expires_at = now + draft.approval_ttl
    assignee = draft.approvers[0]
    requested = audit.next_event(
        approval_id,
        "requested",
        after_seq=0,
        after_hash=audit.GENESIS,
        actor=actor,
        at=now,
        data={
            "state": State.PENDING.value,
            "hash": draft.hash,
            "kind": draft.kind.value,
            "capability": draft.capability,
            "tool": draft.tool_name,
            "run_id": draft.run_id,
            "assignee": assignee,
            "approvers": draft.approvers,
            "expires_at": utc_iso(expires_at),
            "requested_by": draft.requested_by,
            **({"origin_id": draft.origin_id} if draft.origin_id else {}),
            **({"delegated_to": draft.delegated_to} if draft.delegated_to else {}),
        },
    )
    values = {
        "id": approval_id,
        "tenant": draft.tenant,
        "run_id": draft.run_id,
        "step": draft.step,
        "kind": draft.kind.value,
        "capability": draft.capability,
        "tool_name": draft.tool_name,
        "tool_args": draft.tool_args,
        "presentation": draft.presentation,
        "reason": draft.reason,
        "hash": draft.hash,
        "requested_by": draft.requested_by,
        "assignee": assignee,
        "approvers": draft.approvers,
        "required_approvals": draft.required_approvals,
        "allow_self_approval": draft.allow_self_approval,
        "state": State.PENDING.value,
        "preconditions": draft.preconditions,
        "resume": draft.resume,
        "callback_url": draft.callback_url,
        "created_at": now,
        "expires_at": expires_at,
        "escalate_at": now + draft.first_escalation if draft.first_escalation else None,
        "escalation_level": 0,
        # None when the route does not remind, or the request's own TTL is too short to.
        "remind_at": (
            expires_at - draft.remind_before
            if draft.remind_before and expires_at - draft.remind_before > now
            else None
        ),
        "assigned_note": draft.assigned_note,
        "grant_ttl_s": int(draft.grant_ttl.total_seconds()),
        "origin_id": draft.origin_id,
        "step_key": step_key(draft.step),
        "question": draft.question,
        "input_schema": draft.input_schema,
        "version": 1,
        **audit.head_of(requested),
    }
    return values, requested


def step_key(step: Any) -> str | None:
    """What identifies a request's step among its run's requests: the SHA-256 of the
    step's canonical JSON (None for a request without a step)."""
    return None if step is None else sha256_hex(canonical_json(step))


@dataclass(frozen=True, slots=True)
class Created:
    approval: Approval
    created: bool
    # The older requests of the same step that this one replaced (committed with it).
    superseded: tuple[transitions.Transition, ...] = ()
    # Its approval by a standing grant, made in the same transaction (bot/standing.py).
    granted: transitions.Transition | None = None


async def create_request(
    store: Store, directory: Directory, clock: Clock, tenant: str, request: ParsedRequest
) -> Created:
    """Route and store a request; asking again for the same (tenant, run_id, hash) returns the
    existing approval with created=False and writes nothing."""
    body = request.body
    allowed = directory.tenant(tenant).allow_private_callbacks
    if body.callback_url is not None:
        problem = url_problem(body.callback_url, allow_private=allowed)
        if problem is not None:
            raise InvalidRequest(
                f"callback_url cannot be called back: {problem}",
                fields=[{"field": "callback_url", "message": problem}],
            )
    # The route is the call's: a route with `when` judges the arguments the agent sent.
    route = directory.route_for(tenant, body.capability, body.tool.arguments if body.tool else {})
    approvers = _narrow(directory, route, body.approvers)
    # One person answers a question, whatever the route's quorum.
    question = body.kind == Kind.QUESTION
    required = 1 if question else body.required_approvals or route.required_approvals
    if required < route.required_approvals and not question:
        raise InvalidRequest(
            f"required_approvals {required} is below the route's {route.required_approvals}",
            fields=[{"field": "required_approvals", "message": "below the route's minimum"}],
        )
    available = len(directory.expand(approvers))
    if required > available:
        raise InvalidRequest(
            f"required_approvals {required} exceeds the {available} distinct approvers available",
            fields=[{"field": "required_approvals", "message": "more than available approvers"}],
        )
    approval_ttl = _capped(body.approval_ttl, route.approval_ttl, "approval_ttl")
    grant_ttl = _capped(body.grant_ttl, route.grant_ttl, "grant_ttl")
    tool_name, tool_args = (body.tool.name, body.tool.arguments) if body.tool else ("", {})
    hash_ = approval_hash(
        body.kind,
        body.capability,
        request.raw_presentation,
        tool_name,
        tool_args,
        request.raw_question,
    )
    now = clock.now()
    draft = Draft(
        tenant=tenant,
        run_id=body.run_id,
        kind=Kind(body.kind),
        capability=body.capability,
        tool_name=tool_name,
        tool_args=tool_args,
        presentation=request.raw_presentation,
        question=request.raw_question,
        input_schema=body.input_schema,
        hash=hash_,
        reason=body.reason,
        requested_by=body.requested_by,
        approvers=approvers,
        required_approvals=required,
        allow_self_approval=route.allow_self_approval,
        approval_ttl=approval_ttl,
        grant_ttl=grant_ttl,
        first_escalation=route.escalation[0].after if route.escalation else None,
        remind_before=route.remind_before,
        step=body.step,
        preconditions=body.preconditions,
        resume=body.resume,
        callback_url=body.callback_url,
    )
    # Built before the transaction, as if nobody were away (the usual case), to keep the
    # write lock short; rebuilt inside it when someone is.
    values, requested = new_approval(draft, now=now, actor=f"agent:{tenant}")
    try:
        return await store.write_shared(  # type: ignore[no-any-return]
            partial(
                _insert,
                directory=directory,
                draft=draft,
                values=values,
                requested=requested,
                route=route,
                now=now,
            )
        )
    except _AskedBefore as asked:  # its insert rolled back
        return Created(asked.approval, created=False)


class _AskedBefore(Exception):
    def __init__(self, approval: Approval) -> None:
        self.approval = approval


async def _insert(
    tx: Tx,
    directory: Directory,
    draft: Draft,
    values: dict[str, Any],
    requested: dict[str, Any],
    route: Route,
    now: datetime,
) -> Created:
    """The create's writes, in the transaction `Store.write_shared` gives it (on SQLite
    shared with the creates waiting beside it: it uses nothing but `tx`)."""
    tenant, run_id, hash_, approvers = draft.tenant, draft.run_id, draft.hash, draft.approvers
    actor = f"agent:{tenant}"
    # Read in the transaction that inserts, not one of its own: a delegation that
    # committed before this request did is seen, from whichever replica made it.
    away = await delegations_of(tx, directory, approvers, draft.capability, now)
    delegated = away.get(approvers[0])
    if delegated is not None:
        values, requested = new_approval(
            replace(
                draft,
                delegated_to=delegated.delegate,
                assigned_note=away_note(directory, delegated),
            ),
            now=now,
            actor=actor,
        )
    if values["step_key"] is not None:
        await tx.lock_step(tenant, run_id, values["step_key"])
    approval = await tx.insert_approval(values)
    if approval is None:
        existing = await tx.approval_by_key(tenant, run_id, hash_)
        assert existing is not None  # the conflict that skipped our insert is this row
        return Created(existing, created=False)
    # Asked for before, and approved as edited since (its hash is the revision's now):
    # the same request, not a new one. Looked for after the insert, which waited for an
    # edit of the conflicting row still in progress; the step's other live requests are
    # read by the same statement, after the step's lock.
    earlier = await tx.earlier_requests(
        tenant, run_id, hash_, values["step_key"], besides=approval.id
    )
    if earlier.edited_id is not None:
        edited = await tx.get_approval(earlier.edited_id)
        assert edited is not None  # just seen, and requests are never deleted
        raise _AskedBefore(edited)
    await tx.insert_event(requested)
    superseded = await _replace_older(tx, directory, approval, earlier.live_step, now)
    # Inside a person's standing grant: approved by it at once, in this transaction.
    granted = await standing.approve_by_grant(tx, directory, approval, route, now)
    if granted is not None:
        approval = granted.approval
        if not route.notify_grant_uses:
            return Created(approval, created=True, superseded=superseded, granted=granted)
    # Approvers who are away: their delegates get the card too; if the assignee is one
    # of them, the card and the trail say who decides in their place.
    await effects.cause(
        tx,
        effects.PostCards(approval, route.notify),
        *(effects.PersonalCards(approval, delegation.delegate) for delegation in away.values()),
        now=approval.created_at,
        directory=directory,
    )
    return Created(approval, created=True, superseded=superseded, granted=granted)


async def _replace_older(
    tx: Tx, directory: Directory, new: Approval, live_step: list[str], now: datetime
) -> tuple[transitions.Transition, ...]:
    """The newest request of a step is its only grant: asking again for the same run and
    step with a different call supersedes the older requests of that step that have not
    started (`live_step`: pending, or approved and unclaimed, when read). A request without
    a step replaces nothing."""
    note = f"replaced by a newer request for the same step ({new.id})"
    moved = []
    for older_id in live_step:
        older = await tx.lock_approval(older_id)
        if older is None or older.state not in (State.PENDING, State.APPROVED):
            continue
        moved.append(
            await transitions.apply(
                tx,
                directory,
                older,
                {"state": State.SUPERSEDED.value, "decision_note": note, "superseded_by": new.id},
                State.SUPERSEDED.value,
                now=now,
                actor=f"agent:{new.tenant}",
                data={"note": note, "from": older.state, "superseded_by": new.id},
            )
        )
    return tuple(moved)


async def delegations_of(
    tx: Tx, directory: Directory, approvers: list[str], capability: str, now: datetime
) -> dict[str, Delegation]:
    """For each principal among `approvers` (group members included) with an active
    delegation covering `capability`: that delegation, the earliest started if several."""
    active = await tx.delegations_from(directory.expand(approvers), now)
    found: dict[str, Delegation] = {}
    for delegation in sorted(active, key=lambda d: (d.starts_at, d.id)):
        if covers(delegation, capability):
            found.setdefault(delegation.principal, delegation)
    return found


def away_note(directory: Directory, delegation: Delegation) -> str:
    until = f" until {delegation.ends_at:%Y-%m-%d %H:%M} UTC" if delegation.ends_at else ""
    name = directory.name_of(delegation.delegate)
    return f"{name} decides as delegate{until}"
