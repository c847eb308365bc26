"""The Slack App Home: each person's pending approvals and delegations, in the Home tab.

The Home tab of the app shows the person who opens it (a verified Slack user id, mapped to a
principal) what they may decide now, soonest deadline first: the title, the time left, who
it is assigned to (and whom they stand in for, as a delegate), the short hash, Approve and
Reject buttons (the card's own action ids and button values, so a press from the Home
decides exactly like a press on the card, bound to the hash shown) and, with [web]
configured, an "Open in browser" link to the approval's page; then their live delegations,
made or received. Which requests are listed is the web inbox's rule (bot.inbox).

The view is published (`views.publish`) when:

- the person opens the Home tab (`app_home_opened`);
- the Slack channel posts or updates a card of a request: for everyone it concerns who has a
  Slack account (the assignee and approvers, their groups' members, their active delegates,
  the requester), once per state of the request, so a decision anywhere (Slack, Telegram,
  the web, the CLI, the clocks) takes it off their Homes when the card is updated;
- a notice reaches someone in Slack direct messages (a delegation starting or ending);
- they press Approve or Reject on the Home: it is republished with what happened, or why not.

One person's Home is published once at a time; what changes meanwhile is shown by one more
publish after a pause in proportion to the last one's duration, and at least a second after
the last one began (`_republish`).

A request whose cards all go to other surfaces is on a Slack user's Home the next time they
open it. Slack allows 100 blocks a view: the first 20 requests are listed, with how many
more there are.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot import inbox
from bot.card import Card, card_for
from bot.card_sections import OPEN_IN_BROWSER, progress, votes_line
from bot.delegations import Delegations
from bot.routing import Directory
from bot.visible import visible
from channels import slack_card
from channels.conversation import Conversation

log = logging.getLogger("signoff.slack")

HOME = "home"
"""Where a press came from when it came from the Home tab (no channel to answer in)."""

SHOWN = 20  # requests listed on the Home
COUNTED = 500  # requests counted for "… and N more"
DELEGATIONS_SHOWN = 20
MAX_BLOCKS = 100  # Slack's limit for a Home view
_PEOPLE = 50  # at most this many Homes refreshed for one request
_CONCURRENT = 5
_BUDGET = 8.0  # seconds a refresh may take, so a card job ends well inside its lease
_REMEMBERED = 2000  # request states whose Homes were refreshed, remembered to skip repeats
# Between two publishes of one person's Home, a pause of this many times the last one's
# duration (at most _PAUSE_MAX seconds): a Home takes a bounded share of the server.
_PAUSE = 4
_PAUSE_MAX = 2.0
# ... and at least this long after the last one began: Slack allows an app about 100
# views.publish a minute per workspace (Tier 4), and a person does not read faster.
_INTERVAL = 1.0


class SlackHome:
    def __init__(
        self,
        client: AsyncWebClient,
        chat: Conversation,
        delegations: Delegations,
        page: Callable[[str], str] | None,
    ) -> None:
        """`page`, when [web] is configured: the approval's page for an approval id."""
        self.client = client
        self.chat = chat
        self.delegations = delegations
        self.store = delegations.store
        self.directory: Directory = delegations.directory
        self.clock = delegations.clock
        self.page = page
        self._refreshed: OrderedDict[tuple[Any, ...], None] = OrderedDict()
        # Per Slack user: the publish under way, and whether something changed since it began.
        self._publishing: dict[str, asyncio.Task[None]] = {}
        self._stale: set[str] = set()

    async def publish(self, user_id: str, *, note: str | None = None) -> None:
        """Publish `user_id`'s Home; `note`, a line at the top (what a press did, or why not)."""
        view = await self.view(user_id, note=note)
        await self.client.views_publish(user_id=user_id, view=view)

    async def tell(self, user_id: str, text: str) -> None:
        """What a press on the Home did, said at the top of the Home (best effort)."""
        await self._publish_quietly(user_id, note=text)

    async def view(self, user_id: str, *, note: str | None = None) -> dict[str, Any]:
        now = self.clock.now()
        result: list[dict[str, Any]] = [{"type": "header", "text": _plain("Your approvals")}]
        if note:
            result.append({"type": "section", "text": _plain(note)})
        principal = self.directory.principal_for("slack", user_id)
        if principal is None:
            text = self.chat.unlinked(user_id, deciding=False)
            result.append({"type": "section", "text": _mrkdwn(slack_card.escape(text))})
            return _home(result)
        found = await inbox.pending_for(
            self.store, self.directory, principal.key, now, limit=SHOWN, count=COUNTED
        )
        result.append(
            {
                "type": "context",
                "elements": [
                    _plain(
                        f"For {principal.name}. Time left as of "
                        f"{now:%Y-%m-%d %H:%M} UTC; this tab refreshes when you open it."
                    )
                ],
            }
        )
        result.append({"type": "header", "text": _plain("Waiting for you")})
        if not found.items:
            result.append({"type": "section", "text": _plain("Nothing is waiting for you.")})
        for item in found.items:
            card = card_for(self.directory, item.approval, now)
            whom = item.standing.on_behalf_of
            result += _item(card, self.directory.name_of(whom) if whom else None, self.page)
        hidden = found.counted - len(found.items)
        if hidden > 0 or found.more is not None:
            count = f"more than {hidden}" if found.more is not None else str(hidden)
            result.append(
                {
                    "type": "context",
                    "elements": [
                        _plain(
                            f"… and {count} more waiting for you, due later"
                            + ("; /signoff web gives a link to all of them" if self.page else "")
                        )
                    ],
                }
            )
        result += await self._delegations(principal.key)
        return _home(result)

    async def _delegations(self, principal: str) -> list[dict[str, Any]]:
        live = await self.delegations.involving(principal)
        out: list[dict[str, Any]] = [{"type": "header", "text": _plain("Your delegations")}]
        if not live:
            out.append({"type": "section", "text": _plain("No delegations made or received.")})
            return out
        lines = [
            f"{slack_card.escape(self.delegations.describe(d))} (`{d.id}`)"
            for d in live[:DELEGATIONS_SHOWN]
        ]
        if len(live) > DELEGATIONS_SHOWN:
            lines.append(f"… and {len(live) - DELEGATIONS_SHOWN} more")
        out.append({"type": "section", "text": _mrkdwn("\n".join(lines)[:3000])})
        out.append(
            {
                "type": "context",
                "elements": [_mrkdwn("End one you made with `/signoff revoke ID`.")],
            }
        )
        return out

    # -- refreshing the Homes a change concerns ----------------------------------------------

    async def refresh_approval(self, approval_id: str) -> None:
        """Republish the Homes of everyone a request concerns who has a Slack account, once
        per state of the request (a request with several cards is refreshed once). Never
        raises: the card is what the outbox job is for."""
        try:
            people = await self._concerned(approval_id)
            if people:
                await self.refresh_principals(people)
        except Exception:
            log.exception("could not refresh the Slack Homes for %s", approval_id)

    async def refresh_principals(self, keys: Iterable[str]) -> None:
        """Republish these principals' Homes (those with a Slack account), at most a few at a
        time and within a time budget; failures are logged, never raised."""
        users = sorted(
            {
                str(account)
                for key in keys
                if (p := self.directory.principals.get(key)) is not None
                and (account := p.account("slack"))
            }
        )[:_PEOPLE]
        gate = asyncio.Semaphore(_CONCURRENT)

        async def one(user: str) -> None:
            async with gate:
                await self._republish(user)

        try:
            async with asyncio.timeout(_BUDGET):
                await asyncio.gather(*(one(u) for u in users))
        except TimeoutError:
            log.warning("refreshing %d Slack Homes took over %ss; left", len(users), _BUDGET)

    async def _republish(self, user_id: str) -> None:
        """See that `user_id`'s Home is published as it is now.

        One publish per person is under way at a time; calls made meanwhile share the next
        one, which starts after a pause in proportion to how long the last one took, so a
        burst of decisions costs a person's Home a few renderings, not one per card. The
        call that asks for that next publish waits for it; the calls after it, which it
        covers too, return at once, so card jobs do not queue up behind a Home."""
        running = self._publishing.get(user_id)
        if running is not None and not running.done():
            if user_id in self._stale:
                return  # the next publish is asked for already, and starts after this call
            self._stale.add(user_id)
        else:
            running = asyncio.create_task(self._publish_until_fresh(user_id))
            self._publishing[user_id] = running
            running.add_done_callback(lambda t: self._forget(user_id, t))
        # Shielded: a caller out of time stops waiting, the publish goes on for the others.
        await asyncio.shield(running)

    def _forget(self, user_id: str, task: asyncio.Task[None]) -> None:
        if self._publishing.get(user_id) is task:
            del self._publishing[user_id]

    async def _publish_until_fresh(self, user_id: str) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._stale.discard(user_id)
            began = loop.time()
            await self._publish_quietly(user_id)
            if user_id not in self._stale:
                return
            took = loop.time() - began
            await asyncio.sleep(max(min(took * _PAUSE, _PAUSE_MAX), _INTERVAL - took))

    async def close(self) -> None:
        """Stop the publishes under way (shutdown)."""
        tasks = list(self._publishing.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _concerned(self, approval_id: str) -> set[str]:
        """Who may see `approval_id` on their Home: those entitled, their active delegates and
        the requester; empty if the Homes were already refreshed for this state of it."""
        now = self.clock.now()
        async with self.store.read() as tx:
            row = await tx.get_approval(approval_id)
            if row is None:
                return set()
            key = (row.id, row.state, row.hash, row.assignee, row.assigned_note, row.decided_at)
            key += (len(row.votes),)
            if key in self._refreshed:
                return set()
            entitled = set(self.directory.entitled(row))
            delegates = {d.delegate for d in await tx.delegations_from(entitled, now)}
        self._refreshed[key] = None
        while len(self._refreshed) > _REMEMBERED:
            self._refreshed.popitem(last=False)
        return entitled | delegates | ({row.requested_by} if row.requested_by else set())

    async def _publish_quietly(self, user_id: str, *, note: str | None = None) -> None:
        try:
            await self.publish(user_id, note=note)
        except SlackApiError as exc:
            log.warning(
                "could not publish the Slack Home of %s: %s", user_id, exc.response.get("error")
            )
        except Exception:
            log.exception("could not publish the Slack Home of %s", user_id)


def _item(
    card: Card, standing_in_for: str | None, page: Callable[[str], str] | None
) -> list[dict[str, Any]]:
    """One request: its title, what and when, and its buttons."""
    when = (
        f"{card.expires_in} left (until {card.expires_at:%Y-%m-%d %H:%M} UTC)"
        if card.expires_in is not None
        else "past its deadline"
    )
    facts = [_plain(f"{card.capability} · {when}"), _plain(f"Assigned to {card.assignee}")]
    if standing_in_for:
        facts.append(_plain(f"You decide for {standing_in_for}"))
    if card.progress:
        facts.append(_plain(progress(card).line))
    if card.votes:
        facts.append(_plain(votes_line(card)))
    facts.append(_mrkdwn(f"`{card.short_hash}`"))
    if page is not None:
        url = slack_card.escape(page(card.approval_id))
        facts.append(_mrkdwn(f"<{url}|{OPEN_IN_BROWSER}>"))
    out: list[dict[str, Any]] = [
        {"type": "section", "text": _plain(card.title, 3000)},
        {"type": "context", "elements": facts},
    ]
    if card.expires_in is not None:
        out.append(
            {
                "type": "actions",
                "block_id": f"signoff_home_{card.approval_id}",
                "elements": [
                    slack_card._approve_button(card),
                    {
                        "type": "button",
                        "action_id": slack_card.REJECT,
                        "style": "danger",
                        "text": _plain("Reject"),
                        "value": slack_card.button_value(card),
                    },
                ],
            }
        )
    out.append({"type": "divider"})
    return out


def _home(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    assert len(blocks) <= MAX_BLOCKS, len(blocks)
    return {"type": "home", "blocks": blocks}


def _plain(text: str, limit: int = 2000) -> dict[str, Any]:
    text = visible(text)  # invisible and reordering characters as escapes, as on the card
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return {"type": "plain_text", "text": text or " ", "emoji": False}


def _mrkdwn(text: str) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": text}


def from_home(body: dict[str, Any]) -> bool:
    """Whether an interaction came from the Home tab."""
    return (body.get("view") or {}).get("type") == "home"
