"""The kinds of outbox job, and how the effects a change causes (bot.effects) become jobs
queued inside its transaction.

Decision modules state their effects as data and hand them to `bot.effects.cause`; `enqueue`
(installed there when this package is imported) turns each into its jobs. The runner
(bot.outbox.runner) performs them later, from any replica, with retries: a decision webhook to
the agent side, a card to post or update, a notice to one person, and what a delegation's
start and end cause. Because they are written in the transaction of the change that causes
them, a crash can delay them, never lose them; dedupe keys make queueing the same effect
twice a no-op.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from enum import StrEnum

from bot import effects, surfaces
from bot.clock import utc_iso
from bot.errors import NoRoute
from bot.model import State, public_record
from bot.routing import Directory
from bot.target import Target
from store.outbox import NewJob
from store.records import Approval, Delegation, Event
from store.repository import Tx


class JobKind(StrEnum):
    """What an outbox job does; the runner dispatches on it (bot.bootstrap.outbox_handlers)."""

    WEBHOOK = "webhook"  # the decision webhook to the agent side
    POST_CARD = "post_card"  # a new request's card, to one target
    UPDATE_CARD = "update_card"  # a posted card, re-rendered for the request's current state
    NOTICE = "notice"  # plain text to one person
    DELEGATION_STARTED = "delegation_started"  # due at a delegation's start
    DELEGATION_ENDED = "delegation_ended"  # due at its end, or at once on revocation
    REMINDER = "reminder"  # a reminder before expiry: under one card, or to one assignee


# Transitions the agent side must hear about: terminal, or actionable (approved: claim it).
WEBHOOK_STATES = frozenset(
    {
        State.APPROVED,
        State.REJECTED,
        State.EXPIRED,
        State.CANCELLED,
        State.SUPERSEDED,
        State.OUTCOME_UNKNOWN,
        State.ANSWERED,
    }
)


async def enqueue_cards(
    tx: Tx, directory: Directory, approval: Approval, notify: Iterable[Target], now: datetime
) -> None:
    """Queue a `post_card` job per message the new approval's cards need: one per channel
    target, and for a `...:dm` target one per approver with an account on that surface (so a
    retry re-posts only the message that failed, never the ones already sent)."""
    cards = []
    for target in notify:
        if target.every_approver:
            recipients = sorted(
                p
                for p in directory.expand(approval.approvers)
                if directory.reaches(p, target.surface)
            )
            targets = [Target.personal(target.surface, principal) for principal in recipients]
        else:
            targets = [target]
        cards += [_post_card(approval, one) for one in targets]
    await tx.enqueue_all(cards, now=now)


def _post_card(approval: Approval, target: Target) -> NewJob:
    # One card per approval and target, however many causes ask for it.
    return NewJob(
        JobKind.POST_CARD,
        {"target": str(target)},
        dedupe_key=f"{JobKind.POST_CARD}:{approval.id}:{target}",
        approval_id=approval.id,
        subject=approval,
    )


def _personal_surfaces() -> list[str]:
    """The notify surfaces that can reach one person directly (bot.surfaces)."""
    return [surface.name for surface in surfaces.personal()]


async def enqueue_personal_cards(
    tx: Tx, directory: Directory, approval: Approval, who: str, now: datetime
) -> None:
    """Queue a card to `who` (a principal, or each member of a group) in their direct
    messages, on each chat surface the request's route notifies and they have an account on:
    the new assignee after a hand-off or an escalation, a delegate while someone is away.
    Someone who already has a card for this request in their direct messages gets no
    second one (the same dedupe key as the route's own `...:dm` cards)."""
    surfaces = {target.surface for target in route_notify(directory, approval)}
    cards = [
        _post_card(approval, Target.personal(surface, principal))
        for surface in _personal_surfaces()
        if surface in surfaces
        for principal in sorted(directory.members(who))
        if directory.reaches(principal, surface)
    ]
    await tx.enqueue_all(cards, now=now)


async def enqueue_notice(
    tx: Tx, directory: Directory, principal: str, text: str, now: datetime, key: str
) -> None:
    """Queue a plain message to one principal on every chat surface they have an account on
    (a delegation starting or ending). `key` makes queueing the same notice twice a no-op."""
    for surface in _personal_surfaces():
        if directory.reaches(principal, surface):
            target = Target.personal(surface, principal)
            await tx.enqueue(
                JobKind.NOTICE,
                {"target": str(target), "text": text},
                now=now,
                dedupe_key=f"{JobKind.NOTICE}:{key}:{target}",
            )


def route_notify(directory: Directory, approval: Approval) -> tuple[Target, ...]:
    """Where the request's route sends cards, by today's config (nothing if no route
    matches any more)."""
    try:
        return directory.route_of(approval).notify
    except NoRoute:
        return ()


def webhook_url(directory: Directory, approval: Approval) -> str | None:
    """The request's own callback_url wins over the tenant's webhook_url."""
    if approval.callback_url:
        return approval.callback_url
    tenant = directory.tenants.get(approval.tenant)
    return tenant.webhook_url if tenant else None


async def enqueue_transition(
    tx: Tx, directory: Directory, approval: Approval, event: Event, now: datetime
) -> None:
    """Queue the webhook (if the new state warrants one and there is a URL) and a card update
    for every message showing this approval."""
    queued: list[NewJob] = []
    url = webhook_url(directory, approval)
    if approval.state in WEBHOOK_STATES and url:
        delivery = f"{approval.id}.{event.seq}"
        body = {
            "delivery_id": delivery,
            "event": event.type,
            "occurred_at": utc_iso(event.at),
            "approval": public_record(approval),
        }
        if "follow_up_id" in event.data:
            # outcome_unknown: the interrupted_side_effect approval that asks to run it again
            body["follow_up_id"] = event.data["follow_up_id"]
        queued.append(
            NewJob(
                JobKind.WEBHOOK,
                {"url": url, "tenant": approval.tenant, "delivery_id": delivery, "body": body},
                dedupe_key=f"{JobKind.WEBHOOK}:{delivery}",
                approval_id=approval.id,
            )
        )
    for message in await tx.card_messages_for(approval.id):
        queued.append(_card_update(approval, message.id))
    await tx.enqueue_all(queued, now=now)


def _card_update(approval: Approval, card_message_id: int) -> NewJob:
    return NewJob(
        JobKind.UPDATE_CARD,
        {"card_message_id": card_message_id, "state": approval.state, "version": approval.version},
        dedupe_key=f"{JobKind.UPDATE_CARD}:{card_message_id}:{approval.version}",
        approval_id=approval.id,
    )


async def enqueue_card_update(
    tx: Tx, approval: Approval, card_message_id: int, now: datetime
) -> None:
    """Re-render one posted card for `approval` as it is now (one job per card and version)."""
    await tx.enqueue_all([_card_update(approval, card_message_id)], now=now)


async def enqueue_delegation(tx: Tx, delegation: Delegation, now: datetime) -> None:
    """A new delegation's edges: its start (cards and notices), and its end if it has one."""
    await tx.enqueue(
        JobKind.DELEGATION_STARTED,
        {"delegation_id": delegation.id},
        now=now,
        run_after=delegation.starts_at,
        dedupe_key=f"{JobKind.DELEGATION_STARTED}:{delegation.id}",
    )
    if delegation.ends_at is not None:
        await tx.enqueue(
            JobKind.DELEGATION_ENDED,
            {"delegation_id": delegation.id, "reason": "ended"},
            now=now,
            run_after=delegation.ends_at,
            dedupe_key=f"{JobKind.DELEGATION_ENDED}:{delegation.id}",
        )


async def enqueue_revocation(tx: Tx, delegation_id: str, now: datetime) -> None:
    """A delegation revoked before its end: both people are told now."""
    await tx.enqueue(
        JobKind.DELEGATION_ENDED,
        {"delegation_id": delegation_id, "reason": "revoked"},
        now=now,
        dedupe_key=f"{JobKind.DELEGATION_ENDED}:{delegation_id}:revoked",
    )


async def enqueue_reminders(
    tx: Tx, directory: Directory, approval: Approval, now: datetime
) -> None:
    """A reminder before `approval` expires (bot.reminders): a reply under each card posted
    for it, and a direct message to each assignee (the assignee, or each member of the
    assignee group) on each chat surface the route notifies and they have an account on,
    unless their card is in those direct messages (the reply under it reaches them)."""
    for message in await tx.card_messages_for(approval.id):
        await tx.enqueue(
            JobKind.REMINDER,
            {"card_message_id": message.id},
            now=now,
            approval_id=approval.id,
            dedupe_key=f"{JobKind.REMINDER}:{approval.id}:card:{message.id}",
        )
    # Someone whose card is in their own direct messages has the reply there already.
    carded = {
        str(job.payload.get("target"))
        for job in await tx.outbox_jobs(approval_id=approval.id)
        if job.kind == JobKind.POST_CARD and job.state == "done"
    }
    surfaces = {target.surface for target in route_notify(directory, approval)}
    for surface in _personal_surfaces():
        if surface not in surfaces:
            continue
        for principal in sorted(directory.members(approval.assignee)):
            target = Target.personal(surface, principal)
            if directory.reaches(principal, surface) and str(target) not in carded:
                await tx.enqueue(
                    JobKind.REMINDER,
                    {"target": str(target)},
                    now=now,
                    approval_id=approval.id,
                    dedupe_key=f"{JobKind.REMINDER}:{approval.id}:{target}",
                )


async def enqueue(
    tx: Tx, directory: Directory | None, caused: Sequence[effects.Effect], now: datetime
) -> None:
    """Queue the jobs of each effect in `caused`, in order, as `bot.effects.cause` asks: the
    statements each costs are the ones its function above costs alone."""
    for effect in caused:
        match effect:
            case effects.Announce(approval, event):
                await enqueue_transition(tx, _routed(directory), approval, event, now)
            case effects.PostCards(approval, targets):
                await enqueue_cards(tx, _routed(directory), approval, targets, now)
            case effects.PersonalCards(approval, who):
                await enqueue_personal_cards(tx, _routed(directory), approval, who, now)
            case effects.CardUpdate(approval, card_message_id):
                await enqueue_card_update(tx, approval, card_message_id, now)
            case effects.Notice(principal, text, key):
                await enqueue_notice(tx, _routed(directory), principal, text, now, key)
            case effects.DelegationEdges(delegation):
                await enqueue_delegation(tx, delegation, now)
            case effects.DelegationRevoked(delegation_id):
                await enqueue_revocation(tx, delegation_id, now)
            case effects.Reminders(approval):
                await enqueue_reminders(tx, _routed(directory), approval, now)


def _routed(directory: Directory | None) -> Directory:
    if directory is None:
        raise TypeError("this effect is routed by the directory: pass it to bot.effects.cause")
    return directory


effects.install(enqueue)
