"""What a transition causes outside the database, queued in the transition's own transaction.

The outbox runner (bot/outbox.py) performs these jobs later, from any replica, with retries:
a decision webhook to the agent side, and an update of every chat card that shows the
approval. Because they are written with the transition, a crash can delay them, never lose
them; dedupe keys make queueing the same effect twice a no-op.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from bot.clock import utc_iso
from bot.errors import NoRoute
from bot.model import State, public_record
from bot.routing import Directory
from store.records import Approval, Event
from store.repository import Tx

# Transitions the agent side must hear about: terminal, or actionable (approved: claim it).
WEBHOOK_STATES = frozenset(
    {
        State.APPROVED,
        State.REJECTED,
        State.EXPIRED,
        State.CANCELLED,
        State.SUPERSEDED,
        State.OUTCOME_UNKNOWN,
    }
)


async def enqueue_cards(
    tx: Tx, directory: Directory, approval: Approval, notify: Iterable[str], now: datetime
) -> None:
    """Queue a `post_card` job per message the new approval's cards need: one per channel
    target, and for a `...:dm` target one per approver with an account on that surface (so a
    retry re-posts only the message that failed, never the ones already sent)."""
    for target in notify:
        surface, _, where = target.partition(":")
        if where == "dm":
            recipients = sorted(
                p for p in directory.expand(approval.approvers) if directory.reaches(p, surface)
            )
            targets = [f"{surface}:@{principal}" for principal in recipients]
        else:
            targets = [target]
        for one in targets:
            await _post_card(tx, approval, one, now)


async def _post_card(tx: Tx, approval: Approval, target: str, now: datetime) -> None:
    # One card per approval and target, however many causes ask for it.
    await tx.enqueue(
        "post_card",
        {"target": target},
        now=now,
        approval_id=approval.id,
        dedupe_key=f"post_card:{approval.id}:{target}",
    )


# The notify surfaces that can reach one person directly.
_PERSONAL_SURFACES = ("slack", "telegram")


async def enqueue_personal_cards(
    tx: Tx, directory: Directory, approval: Approval, who: str, now: datetime
) -> None:
    """Queue a card to `who` (a principal, or each member of a group) in their direct
    messages, on each chat surface the request's route notifies and they have an account on:
    the new assignee after a hand-off or an escalation, a delegate while someone is away.
    Someone who already has a card for this request in their direct messages gets no
    second one (the same dedupe key as the route's own `...:dm` cards)."""
    surfaces = {target.partition(":")[0] for target in route_notify(directory, approval)}
    for surface in _PERSONAL_SURFACES:
        if surface not in surfaces:
            continue
        for principal in sorted(directory.members(who)):
            if directory.reaches(principal, surface):
                await _post_card(tx, approval, f"{surface}:@{principal}", now)


async def enqueue_notice(
    tx: Tx, directory: Directory, principal: str, text: str, now: datetime, key: str
) -> None:
    """Queue a plain message to one principal on every chat surface they have an account on
    (a delegation starting or ending). `key` makes queueing the same notice twice a no-op."""
    for surface in _PERSONAL_SURFACES:
        if directory.reaches(principal, surface):
            target = f"{surface}:@{principal}"
            await tx.enqueue(
                "notice",
                {"target": target, "text": text},
                now=now,
                dedupe_key=f"notice:{key}:{target}",
            )


def route_notify(directory: Directory, approval: Approval) -> tuple[str, ...]:
    """Where the request's route sends cards, by today's config (nothing if no route
    matches any more)."""
    try:
        return directory.route_for(approval.tenant, approval.capability).notify
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
        await tx.enqueue(
            "webhook",
            {"url": url, "tenant": approval.tenant, "delivery_id": delivery, "body": body},
            now=now,
            approval_id=approval.id,
            dedupe_key=f"webhook:{delivery}",
        )
    for message in await tx.card_messages_for(approval.id):
        await tx.enqueue(
            "update_card",
            {"card_message_id": message.id, "state": approval.state, "version": approval.version},
            now=now,
            approval_id=approval.id,
            dedupe_key=f"update_card:{message.id}:{approval.version}",
        )
