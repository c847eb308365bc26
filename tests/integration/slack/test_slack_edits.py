"""Approve as edited, answers and questions from Slack, in-process: real slack-bolt against the
fake Slack (tests/fakes/slack.py, which holds modals to Slack's limits and applies a
view_submission's response as Slack does), on SQLite and PostgreSQL, with a FakeClock.

Proves: Edit… opens an editor with an input per argument the route lets change (the locked
ones shown, not editable); its submission becomes a confirmation in the same modal naming
every change and the edited hash, whose submit approves the revision (record, webhook,
audit); an edit the route or the schema refuses, or a field of the wrong type, is an error
under that field and changes nothing; Answer… ends a call without running it; a question's
card has a button per option (no Approve) and a free-text question an Answer…; the App
Home lists a question with its options; a card older than the request (its hash changed)
decides nothing; someone not entitled is refused and it is recorded.
"""

from __future__ import annotations

from typing import Any

import pytest

from bot.audit import verify
from bot.canonical import approval_hash
from bot.operator import Actor, Operator
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

SCHEMA = {
    "type": "object",
    "properties": {"amount": {"type": "integer", "minimum": 1, "maximum": 20000}},
}
QUESTION = {
    "kind": "question",
    "capability": "payments.question",
    "question": {"options": ["Refund in full", "Store credit", "Ask the customer"]},
    "presentation": {"title": "How should we settle Zoë's complaint?"},
    "tool": None,
}


class Rig(SlackRig):
    async def press(self, user: str, card: dict[str, Any], action_id: str) -> None:
        body = self.slack.click_body(user, CHANNEL, card["ts"], action_id)
        assert await self.send(body) == 200

    async def opened(self, count: int = 1) -> dict[str, Any]:
        """The modal the last press opened, as Slack holds it."""
        call = await self.slack.wait_for("views.open", count=count)
        view = self.slack.view(call.response["view"]["id"])  # type: ignore[index]
        assert view is not None
        return view

    async def submit(
        self, view: dict[str, Any], user: str, filled: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Submit the modal as Slack holds it; what Slack did with the answer."""
        answer = await self.answer(self.slack.submit_filled(view["id"], user, filled))
        return self.slack.respond(view["id"], answer)

    async def said(self, count: int = 1) -> str:
        return str((await self.slack.wait_for("chat.postEphemeral", count=count)).args["text"])

    async def webhooks(self, approval_id: str) -> list[dict[str, Any]]:
        async with self.store.read() as tx:
            jobs = await tx.outbox_jobs(approval_id=approval_id)
        return [j.payload["body"] for j in jobs if j.kind == "webhook"]


def _edits(data: dict[str, Any]) -> None:
    data["routes"][0]["edits"] = ["amount", "memo"]  # payments.*: not the charge
    data["routes"][2]["edits"] = "any"  # quorum.*: 2 of alice, bob, carol
    data["routes"][2]["notify"] = [f"slack:{CHANNEL}"]


@pytest.fixture
async def rig(start: Start, store: Store) -> Rig:
    return await start(store, kind=Rig, configure=_edits)


def _revised(record: dict[str, Any], arguments: dict[str, Any]) -> str:
    return approval_hash(
        "tool_call", record["capability"], record["presentation"], record["tool"]["name"], arguments
    )


def _inputs(view: dict[str, Any]) -> dict[str, str]:
    return {b["block_id"]: b["label"]["text"] for b in view["blocks"] if b["type"] == "input"}


async def test_an_edit_is_confirmed_in_the_modal_then_approved_as_edited(rig: Rig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    labels = [b["text"]["text"] for b in buttons_in(card["blocks"])]
    assert labels == ["Approve", "Allow the same…", "Edit…", "Reject", "Answer…", "Delegate…"]
    await rig.press("U0ALICE", card, "signoff_edit")
    editor = await rig.opened()
    # amount (arg_0) may change, charge (arg_1) is shown only; a memo may be added.
    assert _inputs(editor) == {
        "arg_0": "amount",
        "remove": "Remove these arguments",
        "new_key": "Add an argument: its key",
        "new_value": "Its value",
    }
    assert any("charge = ch_1" in t for t in texts_in(editor["blocks"], "plain_text"))

    answered = await rig.submit(
        editor, "U0ALICE", {"arg_0": "9000", "new_key": "memo", "new_value": "partial refund"}
    )
    assert answered["response_action"] == "update"
    edited = {"charge": "ch_1", "amount": 9000, "memo": "partial refund"}
    new_hash = _revised(record, edited)
    confirm = rig.slack.view(editor["id"])
    assert confirm is not None and confirm["callback_id"] == "signoff_edit_confirm_modal"
    shown = texts_in(confirm["blocks"], "plain_text") + texts_in(confirm["blocks"], "mrkdwn")
    assert "amount: 12000 → 9000" in shown and "memo: added: partial refund" in shown
    assert f"Edited hash: `sha256:{new_hash[:12]}`" in shown
    assert (await rig.state(record["id"])).state == "pending"  # nothing decided yet

    await rig.submit(confirm, "U0ALICE", {"note": "half now"})
    approved = await rig.state(record["id"])
    assert (approved.state, approved.decided_by, approved.hash) == ("approved", "alice", new_hash)
    assert approved.tool_args == edited and approved.original_hash == record["hash"]
    [hook] = await rig.webhooks(record["id"])
    assert hook["event"] == "approved" and hook["approval"]["edited"] is True
    assert hook["approval"]["tool"]["arguments"] == edited
    assert hook["approval"]["original_hash"] == record["hash"]
    [edit] = [e for e in await rig.events(record["id"]) if e.type == "edited"]
    assert edit.actor == "slack:alice" and edit.data["keys"] == ["amount", "memo"]
    assert (await verify(rig.store, record["id"])).ok
    await rig.drain(homes=False)
    [update] = rig.slack.calls_to("chat.update", ok=True)
    assert buttons_in(update.args["blocks"]) == []
    assert any("Edited by the approver" in t for t in texts_in(update.args["blocks"], "plain_text"))


@pytest.mark.parametrize(
    ("filled", "block", "words"),
    [
        ({"new_key": "currency", "new_value": "EUR"}, "new_key", "currency may not be changed"),
        ({"arg_0": "50000"}, "arg_0", "50000 is greater than the maximum of 20000"),
        ({"arg_0": "lots"}, "arg_0", "Expected a number"),
        ({"arg_0": '"9000"'}, "arg_0", "Expected a number"),  # JSON, but text
        ({"new_key": "charge", "new_value": "ch_2"}, "new_key", "already an argument"),
        ({}, "arg_0", "changes nothing"),
    ],
    ids=["key the route locks", "schema", "not JSON", "type kept", "existing key", "no change"],
)
async def test_a_refused_edit_is_an_error_under_its_field_and_changes_nothing(
    rig: Rig, filled: dict[str, str], block: str, words: str
) -> None:
    record = await rig.create(input_schema=SCHEMA)
    card = await rig.card_for(record["id"])
    await rig.press("U0BOB", card, "signoff_edit")
    editor = await rig.opened()
    answered = await rig.submit(editor, "U0BOB", filled)
    assert answered["response_action"] == "errors"
    assert list(answered["errors"]) == [block] and words in answered["errors"][block]
    assert rig.slack.view(editor["id"])["callback_id"] == "signoff_edit_modal"  # type: ignore[index]
    assert (await rig.state(record["id"])).state == "pending"
    assert [e.type for e in await rig.events(record["id"])] == ["requested"]


async def test_answer_instead_ends_the_call_without_running_it(rig: Rig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    await rig.press("U0BOB", card, "signoff_answer")
    modal = await rig.opened()
    assert modal["callback_id"] == "signoff_answer_modal"
    # An empty answer keeps the modal open, saying so.
    empty = await rig.submit(modal, "U0BOB", {"answer": "   "})
    assert "empty" in empty["errors"]["answer"]
    await rig.submit(modal, "U0BOB", {"answer": "Refund only €60: the rest was store credit."})
    answered = await rig.state(record["id"])
    assert (answered.state, answered.decided_by) == ("answered", "bob")
    assert answered.answer == {"text": "Refund only €60: the rest was store credit."}
    [hook] = await rig.webhooks(record["id"])
    assert hook["event"] == "answered" and hook["approval"]["answer"] == answered.answer
    await rig.drain(homes=False)
    [update] = rig.slack.calls_to("chat.update", ok=True)
    text = texts_in(update.args["blocks"], "mrkdwn") + texts_in(update.args["blocks"], "plain_text")
    assert any("Answered instead of running" in t for t in text)


async def test_a_question_has_a_button_per_option_and_on_the_home(rig: Rig) -> None:
    record = await rig.create(**QUESTION)
    card = await rig.card_for(record["id"])
    buttons = buttons_in(card["blocks"])
    assert [b["text"]["text"] for b in buttons] == [
        "Refund in full",
        "Store credit",
        "Ask the customer",
        "Reject",
        "Delegate…",
    ]
    assert {b["value"] for b in buttons} == {f"{record['id']}:{record['hash']}"}
    # The App Home lists it with the same buttons, but Delegate….
    body = app_home_opened("U0ALICE")
    headers = {"Content-Type": "application/json"} | sign(SECRET, body)
    async with rig.http.post(f"{rig.url}/slack/events", data=body, headers=headers) as answer:
        assert answer.status == 200
    home = rig.slack.home("U0ALICE")
    assert home is not None
    [actions] = [b for b in home["blocks"] if b["type"] == "actions"]
    assert [e["text"]["text"] for e in actions["elements"]] == [
        "Refund in full",
        "Store credit",
        "Ask the customer",
        "Reject",
    ]
    assert any("Question · payments.question" in t for t in texts_in(home["blocks"], "plain_text"))
    press = rig.slack.home_click_body("U0ALICE", "signoff_option_1", actions["block_id"])
    assert await rig.send(press) == 200
    answered = await rig.state(record["id"])
    assert (answered.state, answered.answer) == ("answered", {"option": "Store credit"})
    assert (await verify(rig.store, record["id"])).ok


async def test_a_free_text_question_is_answered_in_a_modal(rig: Rig) -> None:
    record = await rig.create(**{**QUESTION, "question": {}})
    card = await rig.card_for(record["id"])
    assert [b["action_id"] for b in buttons_in(card["blocks"])] == [
        "signoff_answer",
        "signoff_reject",
        "signoff_delegate",
    ]
    await rig.press("U0ALICE", card, "signoff_answer")
    modal = await rig.opened()
    await rig.submit(modal, "U0ALICE", {"answer": "Store credit, and apologise."})
    answered = await rig.state(record["id"])
    assert answered.answer == {"text": "Store credit, and apologise."}


async def test_a_card_older_than_the_request_decides_nothing(rig: Rig) -> None:
    record = await rig.create(capability="quorum.move")
    card = await rig.card_for(record["id"])
    await rig.press("U0ALICE", card, "signoff_edit")
    editor = await rig.opened()
    await rig.submit(editor, "U0ALICE", {"arg_0": "100"})  # amount; the confirmation is shown
    # Meanwhile Bob edits it too (his edit is his vote): the hash Alice saw is gone.
    edited = {"charge": "ch_1", "amount": 500}
    await Operator(rig.store, rig.directory, rig.clock).approve_edited(
        record["id"], record["hash"], edited, _revised(record, edited), Actor("bob", "web")
    )
    confirm = rig.slack.view(editor["id"])
    assert confirm is not None
    await rig.submit(confirm, "U0ALICE")
    assert "This card is out of date" in await rig.said()
    # The old card's Answer… and the old question buttons refuse the same way.
    await rig.press("U0CAROL", card, "signoff_answer")
    assert "This card is out of date" in await rig.said(2)
    row = await rig.state(record["id"])
    assert (row.state, row.hash, row.tool_args) == ("pending", _revised(record, edited), edited)
    assert [v.principal for v in row.votes] == ["bob"]
    refused = [e for e in await rig.events(record["id"]) if e.type == "refused"]
    assert [e.actor for e in refused] == ["slack:alice", "slack:carol"]
    assert (await verify(rig.store, record["id"])).ok


async def test_someone_not_entitled_is_refused_and_it_is_recorded(rig: Rig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    await rig.press("U0ERIN", card, "signoff_edit")  # a principal, but no approver
    assert "You are not an approver for this request" in await rig.said()
    await rig.press("U0NOBODY", card, "signoff_answer")
    assert "not linked to a signoff principal" in await rig.said(2)
    assert rig.slack.calls_to("views.open") == []
    # A route without `edits` opens no editor, even for a forged press.
    contract = await rig.create(capability="contracts.cancel", run_id="run-2")
    forged = block_action_body(
        "U0ALICE", "signoff_edit", f"{contract['id']}:{contract['hash']}", CHANNEL, "1.000100"
    )
    assert await rig.send(forged) == 200
    assert "allows no edits" in await rig.said(3)
    assert rig.slack.calls_to("views.open") == []
    refused = [e for e in await rig.events(record["id"]) if e.type == "refused"]
    assert [e.actor for e in refused] == ["slack:erin", "slack:U0NOBODY"]
    assert (await rig.state(record["id"])).state == "pending"
