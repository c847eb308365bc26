"""Standing grants from Slack, in-process: real slack-bolt against the fake Slack
(tests/fakes/slack.py, which holds modals to Slack's limits and applies a view_submission's
response as Slack does), requests filed through the real agent API, on SQLite and
PostgreSQL, with a FakeClock.

Proves: "Allow the same…" is beside Approve only where the route gives grants (not on a
`grants = false` route, where even a forged press opens nothing); its modal offers the
route's lifetimes and, per argument, equal / at most (numbers) / any value; its submission
approves the request and gives exactly the grant chosen, and the card is updated as after
any approval; a later call inside it is approved at once, its Slack card saying so, and one
outside it (a larger amount, another charge, another run) waits; the form's mistakes are
said in the modal and decide nothing; someone not entitled, unlinked, or pressing a card
decided meanwhile is refused, recorded, and nothing is granted; the App Home lists the
grants a person gave with Revoke, which ends the grant (later calls wait again), is
recorded on its approval and refused to anyone else.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from bot.audit import verify
from bot.operator import Actor, Operator
from store.records import StandingGrant
from store.repository import Store
from tests.fakes.slack_inbound import app_home_opened, block_action_body, sign
from tests.support.slack_rig import (
    CHANNEL,
    SECRET,
    SlackRig,
    Start,
    buttons_in,
    texts_in,
)

ALLOW = "signoff_allow"
REVOKE = "signoff_grant_revoke"


def _call(amount: int, charge: str = "ch_1") -> dict[str, Any]:
    return {"name": "stripe.refunds.create", "arguments": {"charge": charge, "amount": amount}}


def _state(view: dict[str, Any], chosen: dict[str, Any]) -> dict[str, Any]:
    """The `state.values` Slack submits for the modal: each input as first shown (its initial
    option), unless `chosen` gives the block's option value (a list for checkboxes, the text
    for a number or text input)."""
    values: dict[str, Any] = {}
    for block in view["blocks"]:
        if block["type"] != "input":
            continue
        element, block_id = block["element"], block["block_id"]
        kind = element["type"]
        if kind in ("static_select", "radio_buttons"):
            option = element.get("initial_option")
            if block_id in chosen:
                [option] = [o for o in element["options"] if o["value"] == chosen[block_id]]
            state: dict[str, Any] = {"type": kind, "selected_option": option}
        elif kind == "checkboxes":
            picked = chosen.get(block_id, [])
            state = {
                "type": kind,
                "selected_options": [o for o in element["options"] if o["value"] in picked],
            }
        else:  # number_input, plain_text_input
            state = {"type": kind, "value": chosen.get(block_id)}
        values[block_id] = {element["action_id"]: state}
    return values


class Rig(SlackRig):
    async def press(self, user: str, card: dict[str, Any], action_id: str = ALLOW) -> None:
        body = self.slack.click_body(user, CHANNEL, card["ts"], action_id)
        assert await self.send(body) == 200

    async def opened(self, count: int = 1) -> dict[str, Any]:
        call = await self.slack.wait_for("views.open", count=count)
        view = self.slack.view(call.response["view"]["id"])  # type: ignore[index]
        assert view is not None
        return view

    async def submit(
        self, view: dict[str, Any], user: str, chosen: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Submit the modal as `user`, with these choices; what Slack did with the answer."""
        body = self.slack.submit_body(view["id"], user, _state(view, chosen or {}))
        return self.slack.respond(view["id"], await self.answer(body))

    async def said(self, count: int = 1) -> str:
        return str((await self.slack.wait_for("chat.postEphemeral", count=count)).args["text"])

    async def grants(self) -> list[StandingGrant]:
        async with self.store.read() as tx:
            return await tx.list_standing_grants()

    async def allow(
        self, record: dict[str, Any], chosen: dict[str, Any] | None = None
    ) -> StandingGrant:
        """Alice gives a grant from the request's Slack card; the grant."""
        card = await self.card_for(record["id"])
        await self.press("U0ALICE", card)
        modal = await self.opened(len(self.slack.calls_to("views.open")))
        answered = await self.submit(modal, "U0ALICE", chosen)
        assert answered["response_action"] == "update", answered
        [grant] = [g for g in await self.grants() if g.approval_id == record["id"]]
        return grant

    async def posted(self, approval_id: str) -> list[dict[str, Any]]:
        """The blocks of the request's card as Slack holds it (found by the message the store
        remembers: a decided card has no buttons carrying its id)."""
        await self.drain(homes=False)
        async with self.store.read() as tx:
            [message] = await tx.card_messages_for(approval_id)
        shown = self.slack.message(message.address, message.message_id)
        assert shown is not None
        return list(shown["blocks"])

    async def open_home(self, user_id: str) -> dict[str, Any]:
        body = app_home_opened(user_id, view=self.slack.home(user_id))
        headers = {"Content-Type": "application/json"} | sign(SECRET, body)
        async with self.http.post(f"{self.url}/slack/events", data=body, headers=headers) as r:
            assert r.status == 200
        home = self.slack.home(user_id)
        assert home is not None
        return home


def _grants(data: dict[str, Any]) -> None:
    data["routes"].insert(
        0,
        {
            "tenant": "acme",
            "capability": "payments.payout",
            "approvers": ["alice", "bob"],
            "grants": False,
            "notify": [f"slack:{CHANNEL}"],
        },
    )
    data["principals"]["dave"] |= {"slack": "U0DAVE", "operator": True}


@pytest.fixture
async def rig(start: Start, store: Store) -> Rig:
    return await start(store, kind=Rig, configure=_grants)


def _options(view: dict[str, Any], block_id: str) -> list[str]:
    [block] = [b for b in view["blocks"] if b.get("block_id") == block_id]
    return [o["text"]["text"] for o in block["element"]["options"]]


async def test_allow_the_same_is_offered_only_where_the_route_gives_grants(rig: Rig) -> None:
    refund = await rig.create()
    card = await rig.card_for(refund["id"])
    buttons = buttons_in(card["blocks"])
    assert [b["text"]["text"] for b in buttons][:2] == ["Approve", "Allow the same…"]
    assert {b["value"] for b in buttons} == {f"{refund['id']}:{refund['hash']}"}

    payout = await rig.create(capability="payments.payout", run_id="run-2")
    card = await rig.card_for(payout["id"])
    assert ALLOW not in [b["action_id"] for b in buttons_in(card["blocks"])]
    # A forged press opens nothing, and says why.
    forged = block_action_body(
        "U0ALICE", ALLOW, f"{payout['id']}:{payout['hash']}", CHANNEL, card["ts"]
    )
    assert await rig.send(forged) == 200
    assert "allows no standing grants: grants = false" in await rig.said()
    assert rig.slack.calls_to("views.open") == []
    assert (await rig.state(payout["id"])).state == "pending"
    [refused] = [e for e in await rig.events(payout["id"]) if e.type == "refused"]
    assert refused.actor == "slack:alice"


async def test_the_modal_approves_and_gives_the_grant_chosen(rig: Rig) -> None:
    first = await rig.create()
    card = await rig.card_for(first["id"])
    await rig.press("U0ALICE", card)
    modal = await rig.opened()
    assert modal["callback_id"] == "signoff_allow_modal"
    assert _options(modal, "lifetime") == ["1 h", "8 h"]  # up to the route's 8h
    labels = {b["block_id"]: b["label"]["text"] for b in modal["blocks"] if b["type"] == "input"}
    assert (labels["bind_0"], labels["bind_1"]) == ("charge", "amount")
    assert _options(modal, "bind_0") == ['equal to "ch_1"', "any value"]
    assert _options(modal, "bind_1") == ["equal to 12000", "at most 12000", "any value"]
    assert _options(modal, "this_run") == ["Only in this run (run-1)"]
    assert (await rig.state(first["id"])).state == "pending"  # nothing decided by opening it

    now = rig.clock.now()
    answered = await rig.submit(
        modal, "U0ALICE", {"lifetime": "8h", "bind_1": "at_most", "max_uses": "2"}
    )
    assert answered["response_action"] == "update"
    done = rig.slack.view(modal["id"])
    assert done is not None
    shown = "\n".join(texts_in(done["blocks"], "plain_text"))
    assert "Approved." in shown and "Allowed the same: acme/payments.refund" in shown

    approved = await rig.state(first["id"])
    assert (approved.state, approved.decided_by) == ("approved", "alice")
    [grant] = await rig.grants()
    assert (grant.granted_by, grant.approval_id, grant.run_id) == ("alice", first["id"], None)
    assert grant.conditions == {
        "all": [
            {"arg": "charge", "op": "==", "value": "ch_1"},
            {"arg": "amount", "op": "<=", "value": 12000},
        ]
    }
    assert (grant.max_uses, grant.expires_at) == (2, now + timedelta(hours=8))
    [event] = [e for e in await rig.events(first["id"]) if e.type == "approved"]
    assert event.actor == "slack:alice" and event.data["standing_grant"] == grant.id
    await rig.drain(homes=False)
    [update] = rig.slack.calls_to("chat.update", ok=True)
    assert buttons_in(update.args["blocks"]) == []

    # A later call inside it is approved at once, and its card says by what.
    later = await rig.create(run_id="run-2", tool=_call(9000))
    assert (later["state"], later["approved_by_grant"]) == ("approved", grant.id)
    posted = await rig.posted(later["id"])
    assert buttons_in(posted) == []
    assert any("by a standing grant of Alice Ng" in t for t in texts_in(posted, "mrkdwn"))
    # Outside it: a larger amount, another charge.
    for outside in (_call(12001), _call(100, charge="ch_2")):
        other = await rig.create(run_id=f"run-{outside['arguments']['amount']}", tool=outside)
        assert (other["state"], other["approved_by_grant"]) == ("pending", None)
    assert (await verify(rig.store)).ok


async def test_a_grant_for_this_run_only_covers_that_run(rig: Rig) -> None:
    first = await rig.create()
    grant = await rig.allow(first, {"this_run": ["1"], "lifetime": "1h", "bind_1": "any"})
    assert (grant.run_id, grant.expires_at) == ("run-1", rig.clock.now() + timedelta(hours=1))
    assert grant.conditions == {"all": [{"arg": "charge", "op": "==", "value": "ch_1"}]}
    same_run = await rig.create(tool=_call(50000))
    assert same_run["approved_by_grant"] == grant.id
    other_run = await rig.create(run_id="run-2", tool=_call(50))
    assert other_run["state"] == "pending"


async def test_the_forms_mistakes_are_said_in_the_modal_and_decide_nothing(rig: Rig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    await rig.press("U0BOB", card)
    modal = await rig.opened()
    answered = await rig.submit(modal, "U0BOB", {"max_uses": "0"})
    assert answered["response_action"] == "errors"
    assert "from 1 to 1000" in answered["errors"]["max_uses"]
    # A lifetime past the route's bound (a forged option) is the route's refusal, recorded.
    [block] = [b for b in modal["blocks"] if b.get("block_id") == "lifetime"]
    block["element"]["options"].append(
        {"text": {"type": "plain_text", "text": "9 h"}, "value": "9h"}
    )
    answered = await rig.submit(modal, "U0BOB", {"lifetime": "9h"})
    assert (
        "a grant here lasts at most 8 h (max_grant_lifetime), not 9 h"
        in (answered["errors"]["lifetime"])
    )
    assert rig.slack.view(modal["id"]) is not None  # still open
    assert (await rig.state(record["id"])).state == "pending"
    assert await rig.grants() == []
    assert [e.type for e in await rig.events(record["id"])] == ["requested", "refused"]


async def test_someone_not_entitled_is_refused_and_nothing_is_granted(rig: Rig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    await rig.press("U0ERIN", card)  # a principal, but no approver
    assert "You are not an approver for this request" in await rig.said()
    await rig.press("U0NOBODY", card)
    assert "not linked to a signoff principal" in await rig.said(2)
    assert rig.slack.calls_to("views.open") == []
    # Erin submitting the modal Alice opened is refused too: the modal closes, she is told.
    await rig.press("U0ALICE", card)
    modal = await rig.opened()
    answered = await rig.submit(modal, "U0ERIN")
    assert answered == {}
    assert "You are not an approver for this request" in await rig.said(3)
    assert (await rig.state(record["id"])).state == "pending"
    assert await rig.grants() == []
    refused = [e for e in await rig.events(record["id"]) if e.type == "refused"]
    assert [e.actor for e in refused] == ["slack:erin", "slack:U0NOBODY", "slack:erin"]
    assert {e.data.get("action") for e in refused} == {"allow"}


async def test_a_request_decided_meanwhile_gives_no_grant(rig: Rig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    await rig.press("U0ALICE", card)
    modal = await rig.opened()
    operator = Operator(rig.store, rig.directory, rig.clock)
    await operator.decide("approve", record["id"], record["hash"], Actor("bob", "web"))
    assert await rig.submit(modal, "U0ALICE") == {}
    assert "Already approved by Bob Stone" in await rig.said()
    assert await rig.grants() == []
    later = await rig.create(run_id="run-2", tool=_call(100))
    assert later["state"] == "pending"


async def test_the_home_lists_the_grant_and_revoke_ends_it(rig: Rig) -> None:
    pending = await rig.create(run_id="run-0", tool=_call(1))
    home = await rig.open_home("U0ALICE")
    [actions] = [b for b in home["blocks"] if b["type"] == "actions"]
    assert ALLOW in [e["action_id"] for e in actions["elements"]]  # on the Home's card too
    assert "None live." in "\n".join(texts_in(home["blocks"], "plain_text"))

    first = await rig.create()
    grant = await rig.allow(first, {"bind_1": "at_most"})
    home = await rig.open_home("U0ALICE")
    [row] = [b for b in home["blocks"] if b.get("block_id") == f"signoff_grant_{grant.id}"]
    assert row["text"]["text"].startswith(  # mrkdwn, so escaped ("<=" shows as typed)
        "acme/payments.refund stripe.refunds.create where charge == 'ch_1' and "
        "amount &lt;= 12000, given by alice, until "
    )
    assert grant.id in row["text"]["text"]
    assert (row["accessory"]["action_id"], row["accessory"]["value"]) == (REVOKE, grant.id)
    # Bob gave nothing and is no operator: not on his Home, and his forged Revoke is refused.
    bobs = await rig.open_home("U0BOB")
    assert grant.id not in str(bobs["blocks"])
    forged = block_action_body("U0BOB", REVOKE, grant.id, CHANNEL, "1.000100")
    assert await rig.send(forged) == 200
    assert "only alice, who gave it, or an operator may revoke" in await rig.said()
    # Dave, an operator, sees every grant.
    assert grant.id in str((await rig.open_home("U0DAVE"))["blocks"])

    await rig.drain()
    press = rig.slack.home_click_body("U0ALICE", REVOKE, f"signoff_grant_{grant.id}")
    assert await rig.send(press) == 200
    await rig.drain()  # the Home, republished after the press
    [revoked] = await rig.grants()
    assert (revoked.revoked_by, revoked.revoked_at) == ("alice", rig.clock.now())
    home = rig.slack.home("U0ALICE")
    assert home is not None
    assert grant.id not in str(home["blocks"][2:])
    assert "Revoked: acme/payments.refund" in home["blocks"][1]["text"]["text"]
    [ended] = [e for e in await rig.events(first["id"]) if e.type == "grant_revoked"]
    assert ended.actor == "slack:alice"
    later = await rig.create(run_id="run-2", tool=_call(100))
    assert (later["state"], later["approved_by_grant"]) == ("pending", None)
    assert (await rig.state(pending["id"])).state == "pending"
