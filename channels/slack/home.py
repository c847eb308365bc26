"""The Slack App Home: each person's pending approvals and delegations, in the Home tab.

The Home tab of the app shows the person who opens it (a verified Slack user id, mapped to a
principal) what they may decide now, soonest deadline first: the title, the time left, who
it is assigned to (and whom they stand in for, as a delegate), the short hash, Approve and
Reject buttons (the card's own action ids and button values, so a press from the Home
decides exactly like a press on the card, bound to the hash shown: a question's options, or
Answer…, on a question; Edit… where the route allows edits, and Answer…) and, with [web]
configured, an "Open in browser" link to the approval's page; then their live delegations,
made or received; then the live standing grants they gave (every one, for an operator:
bot.grant_views.visible_grants), each with a Revoke button (channels.slack.grants). Which
requests are listed is the web inbox's rule (bot.inbox).

The view is published (`views.publish`) at once when the person opens the Home tab
(`app_home_opened`), and in the background (channels.slack.home_refresh: debounced, once a
second at most per person, retried until it succeeds) when:

- the Slack channel posts or updates a card of a request: for everyone it concerns who has a
  Slack account (the assignee and approvers, their groups' members, their active delegates,
  the requester), once per state of the request, so a decision anywhere (Slack, Telegram,
  the web, the CLI, the clocks) takes it off their Homes when the card is updated;
- a notice reaches someone in Slack direct messages (a delegation starting or ending);
- they press a button on the Home (Approve, Reject, a grant's Revoke…): it is republished
  with what happened, or why not, right after the press is answered.

Nothing waits for these: a card job's lease is for its card, a press's answer for Slack's
three seconds.

A request whose cards all go to other surfaces is on a Slack user's Home the next time they
open it. Slack allows 100 blocks a view: the first 20 requests are listed, with how many
more there are.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot import grant_views, inbox
from bot.card import Card, card_for
from bot.card_sections import OPEN_IN_BROWSER, progress, votes_line
from bot.delegations import Delegations
from bot.errors import RetryLater
from bot.routing import Directory
from bot.visible import visible
from channels.conversation import Conversation
from channels.slack import card as slack_card
from channels.slack.home_refresh import HomeRefresh
from store.records import StandingGrant

log = logging.getLogger("signoff.slack")

HOME = "home"
"""Where a press came from when it came from the Home tab (no channel to answer in)."""

SHOWN = 20  # requests listed on the Home
COUNTED = 500  # requests counted for "… and N more"
DELEGATIONS_SHOWN = 20
GRANTS_SHOWN = 10  # with 20 requests and the rest, exactly Slack's 100 blocks
MAX_BLOCKS = 100  # Slack's limit for a Home view
_REMEMBERED = 2000  # request states whose Homes were refreshed, remembered to skip repeats
# Slack errors no retry of a publish changes (the token, or the user, is gone).
_NEVER = frozenset(
    {"user_not_found", "account_inactive", "invalid_auth", "not_authed", "token_revoked"}
)


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
        self.due = HomeRefresh(self._publish_due, self._concerned_all, self._everyone)

    async def publish(self, user_id: str, *, note: str | None = None) -> None:
        """Publish `user_id`'s Home; `note`, a line at the top (what a press did, or why not)."""
        view = await self.view(user_id, note=note)
        await self.client.views_publish(user_id=user_id, view=view)

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
        result += await self._grants(principal.key, now, MAX_BLOCKS - len(result))
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

    async def _grants(self, principal: str, now: datetime, room: int) -> list[dict[str, Any]]:
        """The live standing grants `principal` may revoke, newest first, in `room` blocks."""
        live = await grant_views.visible_grants(self.store, self.directory, principal, now)
        out: list[dict[str, Any]] = [{"type": "header", "text": _plain("Standing grants")}]
        if not live:
            words = "None live. “Allow the same…” beside Approve gives one."
            out.append({"type": "section", "text": _plain(words)})
            return out
        shown = live[: max(min(GRANTS_SHOWN, room - 2), 0)]
        out += [_grant(grant) for grant in shown]
        if len(live) > len(shown):
            words = f"… and {len(live) - len(shown)} more: `signoff grants list` lists them all"
            out.append({"type": "context", "elements": [_mrkdwn(words)]})
        return out

    # -- refreshing the Homes a change concerns (channels.slack.home_refresh) -------------------

    def refresh_approval(self, approval_id: str) -> None:
        """The Homes of everyone a request concerns who has a Slack account are due for a
        publish: published in the background, never waited for (a card job's lease is the
        card's)."""
        self.due.approval(approval_id)

    def refresh_principals(self, keys: Iterable[str]) -> None:
        """These principals' Homes (those with a Slack account) are due for a publish."""
        self.due.people(self._accounts(keys))

    async def tell(self, user_id: str, text: str) -> None:
        """What a press on the Home did, said at the top of the Home: published right after
        the press is answered, never before."""
        self.due.people([user_id], note=text)

    async def settled(self) -> None:
        """Wait until every Home due is published (tests)."""
        await self.due.settled()

    async def close(self) -> None:
        """Stop the publishes under way (shutdown)."""
        await self.due.close()

    def _accounts(self, keys: Iterable[str]) -> set[str]:
        return {
            str(account)
            for key in keys
            if (p := self.directory.principals.get(key)) is not None
            and (account := p.account("slack"))
        }

    def _everyone(self) -> set[str]:
        return self._accounts(self.directory.principals)

    async def _publish_due(self, user_id: str, note: str | None) -> None:
        """One due publish; raises what is worth retrying."""
        try:
            await self.publish(user_id, note=note)
        except SlackApiError as exc:
            if exc.response.status_code == 429:
                retry_after = exc.response.headers.get("Retry-After")
                delay = float(retry_after) if _number(retry_after) else 5.0
                raise RetryLater("Slack asked to wait", delay=delay) from exc
            error = str(exc.response.get("error"))
            if error in _NEVER:
                log.warning("could not publish the Slack Home of %s: %s", user_id, error)
                return
            raise

    async def _concerned_all(self, approval_ids: list[str]) -> set[str]:
        """The Slack users whose Homes these requests may be on (one read for them all):
        those entitled, their active delegates and the requester; none for a request whose
        Homes were already refreshed for its state (a request with several cards)."""
        people: set[str] = set()
        seen: list[tuple[Any, ...]] = []
        delegates: dict[frozenset[str], set[str]] = {}
        now = self.clock.now()
        async with self.store.read() as tx:
            rows = await tx.home_changes(approval_ids)
            for approval_id in approval_ids:
                row = rows.get(approval_id)
                if row is None:
                    continue
                key = (row.id, row.state, row.hash, row.assignee, row.assigned_note)
                key += (row.decided_at, row.votes)
                if key in self._refreshed:
                    continue
                entitled = frozenset(self.directory.entitled(row))
                if entitled not in delegates:  # a burst's requests mostly share their approvers
                    found = await tx.delegations_from(entitled, now)
                    delegates[entitled] = {d.delegate for d in found}
                people |= entitled | delegates[entitled]
                people |= {row.requested_by} if row.requested_by else set()
                seen.append(key)
        # Remembered once found: a failed read is looked up again, not skipped.
        for key in seen:
            self._refreshed[key] = None
        while len(self._refreshed) > _REMEMBERED:
            self._refreshed.popitem(last=False)
        return self._accounts(people)


def _number(text: str | None) -> bool:
    try:
        return text is not None and float(text) >= 0
    except ValueError:
        return False


def _item(
    card: Card, standing_in_for: str | None, page: Callable[[str], str] | None
) -> list[dict[str, Any]]:
    """One request: its title, what and when, and its buttons."""
    when = (
        f"{card.expires_in} left (until {card.expires_at:%Y-%m-%d %H:%M} UTC)"
        if card.expires_in is not None
        else "past its deadline"
    )
    what = f"Question · {card.capability}" if card.question else card.capability
    facts = [_plain(f"{what} · {when}"), _plain(f"Assigned to {card.assignee}")]
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
        # The card's own buttons (a question's options, Edit… where the route allows it),
        # without Delegate….
        elements = slack_card.decision_elements(card, delegate=False)
        out.append(
            {
                "type": "actions",
                "block_id": f"signoff_home_{card.approval_id}",
                "elements": elements,
            }
        )
    out.append({"type": "divider"})
    return out


def _grant(grant: StandingGrant) -> dict[str, Any]:
    """One standing grant: what it allows, and Revoke (Slack asks first)."""
    text = f"{slack_card.escape(grant_views.describe(grant))} (`{grant.id}`)"
    return {
        "type": "section",
        "block_id": f"signoff_grant_{grant.id}",
        "text": _mrkdwn(text[:3000]),
        "accessory": {
            "type": "button",
            "action_id": slack_card.REVOKE_GRANT,
            "style": "danger",
            "text": _plain("Revoke", 75),
            "value": grant.id,
            "confirm": {
                "title": _plain("Revoke this grant?", 100),
                "text": _plain("Later calls it would have approved will wait for a person.", 300),
                "confirm": _plain("Revoke", 30),
                "deny": _plain("Keep it", 30),
                "style": "danger",
            },
        },
    }


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


def channel_of(body: dict[str, Any]) -> str | None:
    """The channel a press came from; HOME for the Home tab."""
    if from_home(body):
        return HOME
    return (body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id")


def from_home(body: dict[str, Any]) -> bool:
    """Whether an interaction came from the Home tab."""
    return (body.get("view") or {}).get("type") == "home"
