"""The Slack App Home, end to end: real slack-bolt and slack-sdk code against the fake Slack
Web API (tests/fakes/slack.py, whose `views.publish` keeps each user's Home), events and
presses signed as Slack signs them, on SQLite and PostgreSQL, with a FakeClock.

Proves: opening the Home tab publishes the person's pending approvals (time left, the short
hash, Approve and Reject carrying the card's own values) and their delegations; Approve on
the Home decides exactly like the card's button, and the Home is republished without the
request; a decision anywhere else takes it off the Homes of everyone it concerned when the
card is updated; Reject on the Home goes through the card's modal; refusals are said on the
Home; an unlinked Slack user's Home says their account is not linked; the Messages tab
publishes nothing; the list stops at 20 and says how many more; with [web], each request
links to its page; a route's `confirm` dialog is on the Home's Approve too; the event (which
carries the Home, agent text and all) is read as JSON, never as a form; an event from another
workspace is refused.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from bot.delegations import Delegations
from channels.slack import home as slack_home
from channels.slack import home_refresh as slack_home_refresh
from store.repository import Store
from tests.fakes.slack_inbound import app_home_opened, sign
from tests.support.chat_server import PUBLIC_URL
from tests.support.slack_rig import CHANNEL, SECRET, SlackRig, texts_in


class HomeRig(SlackRig):
    @property
    def homes(self) -> slack_home.SlackHome:
        return self.channels["slack"].home  # type: ignore[no-any-return]

    async def published(self) -> None:
        """Wait until every Home due is published (they follow cards and presses)."""
        async with asyncio.timeout(10):
            await self.homes.settled()

    async def open_home(self, user_id: str, tab: str = "home", team_id: str = "T1") -> int:
        """`user_id` opens the app's tab; the event carries their last Home, as Slack's does."""
        body = app_home_opened(user_id, tab=tab, team_id=team_id, view=self.slack.home(user_id))
        headers = {"Content-Type": "application/json"} | sign(SECRET, body)
        async with self.http.post(f"{self.url}/slack/events", data=body, headers=headers) as r:
            return r.status

    def home(self, user_id: str) -> dict[str, Any]:
        home = self.slack.home(user_id)
        assert home is not None, f"no Home published for {user_id}"
        return home

    def listed(self, user_id: str) -> list[str]:
        """The approval ids with buttons on `user_id`'s Home, in order."""
        return [
            str(b["block_id"]).removeprefix("signoff_home_")
            for b in self.home(user_id)["blocks"]
            if b["type"] == "actions"
        ]

    def text(self, user_id: str) -> str:
        blocks = self.home(user_id)["blocks"]
        return "\n".join(texts_in(blocks, "plain_text") + texts_in(blocks, "mrkdwn"))

    async def press(self, user_id: str, action_id: str, approval_id: str) -> None:
        body = self.slack.home_click_body(user_id, action_id, f"signoff_home_{approval_id}")
        assert await self.send(body) == 200


Start = Callable[..., Awaitable[HomeRig]]


@pytest.fixture
def start(start: Callable[..., Awaitable[SlackRig]]) -> Start:
    """The folder's `start` (options `web`, `team_id`, `confirm`), making HomeRigs."""
    return functools.partial(start, kind=HomeRig)


@pytest.fixture
async def rig(start: Start, store: Store) -> HomeRig:
    return await start(store)


async def test_opening_the_home_lists_pending_approvals_and_delegations(rig: HomeRig) -> None:
    record = await rig.create()
    await Delegations(rig.store, rig.directory, rig.clock).create(
        "alice", "carol", created_by="alice"
    )
    assert await rig.open_home("U0ALICE") == 200
    home = rig.home("U0ALICE")
    assert home["type"] == "home"
    assert rig.listed("U0ALICE") == [record["id"]]
    text = rig.text("U0ALICE")
    assert "Refund €120.00 to Zoë" in text
    assert "left (until" in text
    assert f"`sha256:{record['hash'][:12]}`" in text
    assert "Carol Diaz decides for Alice Ng until revoked" in text
    assert "Open in browser" not in text  # no [web]
    [actions] = [b for b in home["blocks"] if b["type"] == "actions"]
    buttons = {e["action_id"]: e for e in actions["elements"]}
    assert sorted(buttons) == [
        "signoff_allow",
        "signoff_answer",
        "signoff_approve",
        "signoff_reject",
    ]
    assert {e["value"] for e in buttons.values()} == {f"{record['id']}:{record['hash']}"}

    # Carol (a delegate of Alice, in group finance by delegation only) sees it too, and why.
    assert await rig.open_home("U0CAROL") == 200
    assert rig.listed("U0CAROL") == [record["id"]]
    assert "You decide for Alice Ng" in rig.text("U0CAROL")
    # Erin decides nothing.
    assert await rig.open_home("U0ERIN") == 200
    assert rig.listed("U0ERIN") == []
    assert "Nothing is waiting for you." in rig.text("U0ERIN")
    assert "No delegations made or received." in rig.text("U0ERIN")


async def test_the_messages_tab_publishes_nothing(rig: HomeRig) -> None:
    assert await rig.open_home("U0ALICE", tab="messages") == 200
    assert rig.slack.calls_to("views.publish") == []


async def test_an_unlinked_slack_user_is_told_their_account_is_not_linked(rig: HomeRig) -> None:
    await rig.create()
    assert await rig.open_home("U0NOBODY") == 200
    assert rig.listed("U0NOBODY") == []
    text = rig.text("U0NOBODY")
    assert "Your Slack account (U0NOBODY) is not linked to a signoff principal" in text
    assert "Refund" not in text


async def test_approve_on_the_home_decides_and_the_home_drops_it(rig: HomeRig) -> None:
    record = await rig.create()
    other = await rig.create(run_id="run-2")
    await rig.drain()  # the cards go out, and the Homes of the finance group with them
    both = sorted([record["id"], other["id"]])  # the same deadline: in id order
    assert rig.listed("U0ALICE") == rig.listed("U0BOB") == both

    await rig.press("U0ALICE", "signoff_approve", record["id"])
    await rig.settle(record["id"], 2)
    await rig.published()
    approved = await rig.state(record["id"])
    assert (approved.state, approved.decided_by) == ("approved", "alice")
    assert (await rig.events(record["id"]))[-1].actor == "slack:alice"
    # Republished at once, saying what happened, without the request.
    assert rig.listed("U0ALICE") == [other["id"]]
    assert "Approved" in rig.text("U0ALICE")
    # Bob's Home drops it when the card is updated.
    assert record["id"] in rig.listed("U0BOB")
    await rig.drain()
    assert rig.listed("U0BOB") == [other["id"]]
    [update] = rig.slack.calls_to("chat.update", ok=True)
    assert update.args["channel"] == CHANNEL  # the card itself shows the outcome


async def test_a_decision_on_the_card_takes_it_off_every_home(rig: HomeRig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    assert rig.listed("U0ALICE") == [record["id"]]
    await rig.send(rig.slack.click_body("U0BOB", CHANNEL, card["ts"], "signoff_approve"))
    await rig.settle(record["id"], 2)
    await rig.drain()
    assert rig.listed("U0ALICE") == []
    assert rig.listed("U0BOB") == []
    assert "Nothing is waiting for you." in rig.text("U0ALICE")


async def test_a_press_on_a_stale_home_is_refused_on_the_home(rig: HomeRig) -> None:
    record = await rig.create()
    await rig.drain()
    stale = rig.slack.home_click_body("U0BOB", "signoff_approve", f"signoff_home_{record['id']}")
    await rig.press("U0ALICE", "signoff_approve", record["id"])
    await rig.settle(record["id"], 2)
    assert await rig.send(stale) == 200  # Bob's Home still showed it
    await rig.settle(record["id"], 3)
    await rig.published()
    events = await rig.events(record["id"])
    assert (events[-1].type, events[-1].actor) == ("refused", "slack:bob")
    assert "already" in rig.text("U0BOB").casefold()
    assert (await rig.state(record["id"])).decided_by == "alice"


async def test_reject_on_the_home_asks_for_a_reason_then_rejects(rig: HomeRig) -> None:
    record = await rig.create()
    await rig.drain()
    await rig.press("U0ALICE", "signoff_reject", record["id"])
    [opened] = rig.slack.calls_to("views.open", ok=True)
    view_id = opened.response["view"]["id"]  # type: ignore[index]
    submit = rig.slack.submit_body(view_id, "U0ALICE", {"reason": {"reason": "not today"}})
    assert await rig.send(submit) == 200
    await rig.settle(record["id"], 2)
    await rig.published()
    rejected = await rig.state(record["id"])
    assert (rejected.state, rejected.decision_note) == ("rejected", "not today")
    assert rig.listed("U0ALICE") == []
    assert "Rejected." in rig.text("U0ALICE")


async def test_the_home_lists_twenty_and_says_how_many_more(rig: HomeRig) -> None:
    for n in range(23):
        await rig.create(run_id=f"run-{n}")
    assert await rig.open_home("U0ALICE") == 200
    home = rig.home("U0ALICE")
    assert len(home["blocks"]) <= 100
    assert len(rig.listed("U0ALICE")) == slack_home.SHOWN == 20
    assert "… and 3 more waiting for you, due later" in rig.text("U0ALICE")


async def test_a_burst_of_cards_refreshes_a_home_at_most_once_a_second(rig: HomeRig) -> None:
    """Slack allows an app about 100 views.publish a minute per workspace (Tier 4): a burst
    of cards for one person refreshes their Home at most once a second, and the refresh
    after the burst lists every request."""
    made = [(await rig.create(run_id=f"burst-{n}"))["id"] for n in range(8)]
    await rig.drain()
    published = [
        c.at for c in rig.slack.calls_to("views.publish") if c.args["user_id"] == "U0ALICE"
    ]
    assert 1 <= len(published) < len(made)
    gaps = [later - earlier for earlier, later in itertools.pairwise(published)]
    # Timed as the fake receives them: each publish is read and rendered before it is sent,
    # which takes longer on a loaded machine, so arrivals are a little nearer than the starts
    # the interval spaces, the more so the more loaded the machine. Unthrottled, the burst
    # would arrive milliseconds apart, so half the interval still tells the two apart.
    assert all(gap >= slack_home_refresh._INTERVAL / 2 for gap in gaps), gaps
    assert sorted(rig.listed("U0ALICE")) == sorted(made)


async def test_past_what_it_counts_the_home_says_more_than(
    rig: HomeRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Home counts eligible requests up to COUNTED and says "more than" beyond it; the
    ones it lists are read whole, soonest deadline first."""
    monkeypatch.setattr(slack_home, "COUNTED", 22)
    made = []
    for n in range(23):
        made.append((await rig.create(run_id=f"run-{n}"))["id"])
        rig.clock.advance(timedelta(seconds=1))  # each one due a second after the last
    assert await rig.open_home("U0ALICE") == 200
    assert "… and more than 2 more waiting for you, due later" in rig.text("U0ALICE")
    assert rig.listed("U0ALICE") == made[: slack_home.SHOWN]


async def test_with_web_each_request_opens_in_the_browser(start: Start, store: Store) -> None:
    rig = await start(store, web=True)
    record = await rig.create()
    assert await rig.open_home("U0ALICE") == 200
    assert f"<{PUBLIC_URL}/web/approvals/{record['id']}|Open in browser>" in rig.text("U0ALICE")


async def test_agent_text_in_the_home_cannot_pose_as_a_form_field(rig: HomeRig) -> None:
    """The event carries the Home it replaces, titles and all: it is read as JSON only."""
    title = "Refund&payload=%7Bnot-json&command=/signoff&team_id=T9"
    record = await rig.create(presentation={"title": title})
    assert await rig.open_home("U0ALICE") == 200
    assert title in rig.text("U0ALICE")
    await rig.create(run_id="run-2")
    assert await rig.open_home("U0ALICE") == 200  # the event now carries that title
    assert record["id"] in rig.listed("U0ALICE")
    assert len(rig.listed("U0ALICE")) == 2


async def test_a_home_opened_in_another_workspace_is_refused(start: Start, store: Store) -> None:
    rig = await start(store, team_id="T1ACME")
    assert await rig.open_home("U0ALICE", team_id="T9OTHER") == 403
    assert rig.slack.home("U0ALICE") is None
    assert await rig.open_home("U0ALICE", team_id="T1ACME") == 200
    assert rig.slack.home("U0ALICE") is not None


async def test_approve_on_the_home_asks_first_where_the_route_says_so(
    start: Start, store: Store
) -> None:
    rig = await start(store, confirm=True)
    record = await rig.create()
    assert await rig.open_home("U0ALICE") == 200
    [actions] = [b for b in rig.home("U0ALICE")["blocks"] if b["type"] == "actions"]
    approve = actions["elements"][0]
    assert approve["action_id"] == "signoff_approve"
    assert approve["value"] == f"{record['id']}:{record['hash']}"
    assert approve["confirm"]["confirm"]["text"] == "Approve"  # Slack's dialog, as on the card


async def test_a_slow_home_holds_up_no_card_and_no_press(rig: HomeRig) -> None:
    """A Home follows cards and presses, never inside them: while Slack does not answer a
    Home's publish, the cards go out and every press is answered at Slack's usual pace; the
    Homes catch up once it answers again."""
    other = await rig.create(run_id="run-2")
    await rig.drain()  # Alice's Home lists it, at Slack's usual pace
    slow = rig.slack.held["views.publish"] = asyncio.Event()  # answers once it is set
    try:
        record = await rig.create()
        # Each step below would wait for ever on the Home it made due, were it to wait at all.
        async with asyncio.timeout(3.0):
            await rig.drain(homes=False)  # the card only, not the Homes it makes due
        posted = rig.slack.calls_to("chat.postMessage", ok=True)
        [ts] = [c.response["ts"] for c in posted if record["id"] in str(c.args["blocks"])]  # type: ignore[index]

        async with asyncio.timeout(3.0):
            await rig.send(rig.slack.click_body("U0BOB", CHANNEL, ts, "signoff_approve"))
            await rig.press("U0ALICE", "signoff_approve", other["id"])  # answered before its Home
        await rig.settle(record["id"], 2)
        await rig.settle(other["id"], 2)
        async with asyncio.timeout(3.0):
            await rig.drain(homes=False)  # the card updates
    finally:
        slow.set()
    async with asyncio.timeout(30):
        await rig.homes.settled()
    assert rig.listed("U0ALICE") == rig.listed("U0BOB") == []
    assert "Nothing is waiting for you." in rig.text("U0BOB")


async def test_a_burst_of_decisions_costs_each_home_a_few_publishes(rig: HomeRig) -> None:
    """Twenty decisions in a burst: each concerned Home is published a bounded number of
    times (once a second at most), and the last publish shows the last state."""
    made = [(await rig.create(run_id=f"burst-{n}"))["id"] for n in range(20)]
    await rig.drain()
    assert sorted(rig.listed("U0BOB")) == sorted(made)
    cards = {
        made_id: c.response["ts"]  # type: ignore[index]
        for c in rig.slack.calls_to("chat.postMessage", ok=True)
        for made_id in made
        if made_id in str(c.args["blocks"])
    }
    before = len(rig.slack.calls_to("views.publish"))
    loop = asyncio.get_running_loop()
    began = loop.time()
    for n, approval_id in enumerate(made):
        await rig.send(
            rig.slack.click_body("U0ALICE", CHANNEL, cards[approval_id], "signoff_approve")
        )
        await rig.settle(approval_id, 2)
        if n % 5 == 4:
            await rig.drain(homes=False)  # the card updates, each making the Homes due
    await rig.drain()
    took = loop.time() - began
    calls = rig.slack.calls_to("views.publish")[before:]
    for user in ("U0ALICE", "U0BOB"):
        publishes = [c for c in calls if c.args["user_id"] == user]
        assert 1 <= len(publishes) <= took / slack_home_refresh._INTERVAL + 2, (user, took)
        assert rig.listed(user) == []
        assert "Nothing is waiting for you." in rig.text(user)


async def test_a_vote_towards_a_quorum_republishes_the_homes_it_concerns(rig: HomeRig) -> None:
    """A change seen before is not published again, but a vote is a change: the Homes of
    the other approvers show it (the refresh compares the votes cast, not only the state)."""
    record = await rig.create(capability="quorum.move")  # 2 of alice, bob, carol; no card
    rig.homes.refresh_approval(record["id"])
    await rig.published()
    assert rig.listed("U0BOB") == [record["id"]]

    def bobs() -> int:
        return sum(c.args["user_id"] == "U0BOB" for c in rig.slack.calls_to("views.publish"))

    seen = bobs()
    rig.homes.refresh_approval(record["id"])  # nothing changed: Bob's Home is left alone
    await rig.published()
    assert bobs() == seen

    await rig.press("U0ALICE", "signoff_approve", record["id"])
    await rig.settle(record["id"], 2)
    assert (await rig.state(record["id"])).state == "pending"  # one vote of two
    rig.homes.refresh_approval(record["id"])
    await rig.published()
    assert bobs() == seen + 1
    assert "Approvals: 1 of 2" in rig.text("U0BOB")


async def test_a_failed_publish_is_retried_until_the_home_shows_the_request(rig: HomeRig) -> None:
    rig.slack.fail_next("views.publish", times=2)  # a 500, then another
    rig.slack.rate_limit_next("views.publish", retry_after=1)  # then Slack's 429
    record = await rig.create()
    await rig.drain()
    for user in ("U0ALICE", "U0BOB"):
        assert rig.listed(user) == [record["id"]]
    failed = [c for c in rig.slack.calls_to("views.publish") if c.error is not None]
    assert len(failed) == 3
