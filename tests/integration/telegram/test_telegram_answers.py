"""Answers, questions and the web editor's link from Telegram, in-process: real
python-telegram-bot against the fake Bot API (tests/fakes/telegram/), on SQLite and
PostgreSQL, with a FakeClock.

Proves: a question's card has a button per option (no Approve), each naming its option by
place within 64 bytes of callback data and keeping the short-hash check; a press answers
with that option; "Answer instead" on a tool call and "Answer" on a free-text question ask
for a reply, and only the person asked answers by replying; `answer WORDS` in a reply to the
card answers too (a question's option when the words are one); a card older than the request
(its hash changed), a tampered button and someone not entitled decide nothing, and are
recorded; with [web] configured, a card whose route allows edits links to the page's editor.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from bot.audit import verify
from bot.canonical import approval_hash
from bot.operator import Actor, Operator
from store.repository import Store
from tests.support.chat_server import PUBLIC_URL
from tests.support.telegram_rig import (
    ALICE,
    BOB,
    ERIN,
    GROUP,
    STRANGER,
    Start,
    TelegramRig,
    buttons_in,
)

QUESTION = {
    "kind": "question",
    "capability": "payments.question",
    "question": {"options": ["Refund in full", "Store credit", "Ask the customer"]},
    "presentation": {"title": "How should we settle Zoë's complaint?"},
    "tool": None,
}


class Rig(TelegramRig):
    def answered(self) -> dict[str, Any]:
        """The last callback answer: what the presser was told."""
        return dict(self.tg.calls_to("answerCallbackQuery", ok=True)[-1].args)

    def last_sent(self) -> dict[str, Any]:
        return self.tg.calls_to("sendMessage", ok=True)[-1].response["result"]  # type: ignore[index,no-any-return]

    async def webhooks(self, approval_id: str) -> list[dict[str, Any]]:
        async with self.store.read() as tx:
            jobs = await tx.outbox_jobs(approval_id=approval_id)
        return [j.payload["body"] for j in jobs if j.kind == "webhook"]


def _edits(data: dict[str, Any]) -> None:
    data["routes"][0]["edits"] = ["amount"]  # payments.*
    data["routes"][2]["edits"] = "any"  # quorum.*: 2 of alice, bob, carol


@pytest.fixture
async def rig(start: Start, store: Store) -> Rig:
    return await start(store, kind=Rig, web=True, configure=_edits)


async def test_a_question_has_a_button_per_option_and_a_press_answers(rig: Rig) -> None:
    record = await rig.create(**QUESTION)
    card = await rig.card_for(record["id"])
    buttons = buttons_in(card)
    assert [b["text"] for b in buttons] == [
        "Refund in full",
        "Store credit",
        "Ask the customer",
        "Reject",
    ]
    for button in buttons:
        assert len(button["callback_data"].encode()) <= 64
        assert record["hash"][:12] in button["callback_data"]
    # A question is not edited: no link to the editor, only to the page.
    [sent] = rig.tg.calls_to("sendMessage", ok=True)
    assert "Edit in browser" not in sent.args["text"] and "Open in browser" in sent.args["text"]

    assert await rig.click(ALICE, card, button=2) == 200
    assert rig.answered()["text"] == "Answered."
    answered = await rig.state(record["id"])
    assert (answered.state, answered.decided_by) == ("answered", "alice")
    assert answered.answer == {"option": "Ask the customer"}
    [hook] = await rig.webhooks(record["id"])
    assert hook["event"] == "answered" and hook["approval"]["answer"] == answered.answer
    await rig.drain()
    shown = rig.tg.message(GROUP, card["message_id"])
    assert shown is not None and buttons_in(shown) == []
    assert "Answer: Ask the customer" in shown["text"]
    assert (await verify(rig.store, record["id"])).ok


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("hash", "does not match the card"),
        ("place", "not made by signoff"),
    ],
    ids=["tampered hash", "no such option"],
)
async def test_a_tampered_option_button_decides_nothing(
    rig: Rig, change: str, expected: str
) -> None:
    record = await rig.create(**QUESTION)
    card = await rig.card_for(record["id"])
    data = buttons_in(card)[0]["callback_data"]
    if change == "hash":
        data = re.sub(r"[0-9a-f]{12}$", "0" * 12, data)
    else:
        data = data.replace(":o0:", ":o4:")  # three options: there is no fifth
    assert await rig.click(ALICE, card, data=data) == 200
    assert expected in rig.answered()["text"]
    assert (await rig.state(record["id"])).state == "pending"


async def test_answer_instead_asks_for_a_reply_from_the_presser(rig: Rig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    assert [b["text"] for b in buttons_in(card)] == [
        "Approve",
        "Reject",
        "Answer instead",
        "Allow the same…",
    ]
    # The route lets approvers edit: the card links to the page's editor.
    [sent] = rig.tg.calls_to("sendMessage", ok=True)
    edit_url = f"{PUBLIC_URL}/web/approvals/{record['id']}/edit"
    assert f'<a href="{edit_url}">Edit in browser</a>' in sent.args["text"]

    assert await rig.click(BOB, card, button=2) == 200
    prompt_call = rig.tg.calls_to("sendMessage", ok=True)[-1]
    assert prompt_call.args["reply_markup"]["force_reply"] is True
    prompt = rig.last_sent()
    assert prompt["reply_to_message"]["message_id"] == card["message_id"]
    assert "instead of running this call" in prompt["text"]
    assert f"sha256:{record['hash'][:12]}" in prompt["text"]
    assert await rig.reply(ALICE, prompt, "no") == 200  # bob was asked, not alice
    assert "for someone else" in rig.last_sent()["text"]
    assert (await rig.state(record["id"])).state == "pending"
    assert await rig.reply(BOB, prompt, "Refund only €60: the rest was store credit.") == 200
    assert rig.last_sent()["text"] == "Answered."
    answered = await rig.state(record["id"])
    assert (answered.state, answered.decided_by) == ("answered", "bob")
    assert answered.answer == {"text": "Refund only €60: the rest was store credit."}
    [hook] = await rig.webhooks(record["id"])
    assert hook["event"] == "answered"


async def test_answer_in_a_reply_to_the_card_and_to_a_free_text_question(rig: Rig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    assert await rig.reply(ALICE, card, "answer Refund only €60") == 200
    assert (await rig.state(record["id"])).answer == {"text": "Refund only €60"}
    # A question's option, written out in any case, chooses it.
    asked = await rig.create(**QUESTION, run_id="run-2")
    asked_card = await rig.card_for(asked["id"])
    assert await rig.reply(BOB, asked_card, "answer store credit") == 200
    assert (await rig.state(asked["id"])).answer == {"option": "Store credit"}
    # A free-text question: Answer asks for the words.
    free = await rig.create(**{**QUESTION, "question": {}}, run_id="run-3")
    free_card = await rig.card_for(free["id"])
    assert [b["text"] for b in buttons_in(free_card)] == ["Answer", "Reject"]
    assert await rig.click(ALICE, free_card, button=0) == 200
    prompt = rig.last_sent()
    assert "your answer to this question" in prompt["text"]
    assert await rig.reply(ALICE, prompt, "Store credit, and apologise.") == 200
    assert (await rig.state(free["id"])).answer == {"text": "Store credit, and apologise."}


async def test_a_card_older_than_the_request_decides_nothing(rig: Rig) -> None:
    record = await rig.create(capability="quorum.move")
    card = await rig.card_for(record["id"])
    assert await rig.click(ALICE, card, button=2) == 200  # Answer instead: the prompt comes
    prompt = rig.last_sent()
    # Meanwhile Bob edits the call (his edit is his vote): the hash Alice saw is gone.
    edited = {"charge": "ch_1", "amount": 500}
    new_hash = approval_hash(
        "tool_call", record["capability"], record["presentation"], record["tool"]["name"], edited
    )
    await Operator(rig.store, rig.directory, rig.clock).approve_edited(
        record["id"], record["hash"], edited, new_hash, Actor("bob", "web")
    )
    assert await rig.reply(ALICE, prompt, "Do not move it at all.") == 200
    assert "This card is out of date" in rig.last_sent()["text"]
    assert await rig.click(ALICE, card, button=2) == 200
    assert "This card is out of date" in rig.answered()["text"]
    row = await rig.state(record["id"])
    assert (row.state, row.hash) == ("pending", new_hash)
    refused = [e for e in await rig.events(record["id"]) if e.type == "refused"]
    assert [(e.actor, e.data["action"]) for e in refused] == [
        ("telegram:alice", "answer"),
        ("telegram:alice", "answer"),
    ]
    assert (await verify(rig.store, record["id"])).ok


async def test_someone_not_entitled_is_refused_and_it_is_recorded(rig: Rig) -> None:
    record = await rig.create(**QUESTION)
    card = await rig.card_for(record["id"])
    assert await rig.click(ERIN, card, button=0) == 200  # a principal, but no approver
    told = rig.answered()
    assert "You are not an approver" in told["text"] and told["show_alert"] is True
    assert await rig.click(STRANGER, card, button=1) == 200
    assert "not linked to a signoff principal" in rig.answered()["text"]
    assert await rig.reply(ERIN, card, "answer Store credit") == 200
    assert "You are not an approver" in rig.last_sent()["text"]
    assert (await rig.state(record["id"])).state == "pending"
    refused = [e for e in await rig.events(record["id"]) if e.type == "refused"]
    assert [e.actor for e in refused] == ["telegram:erin", "telegram:999", "telegram:erin"]
