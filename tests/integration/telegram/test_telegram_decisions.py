"""Deciding from Telegram end to end, in-process: real python-telegram-bot code against the
fake Bot API (tests/fakes/telegram/), updates shaped exactly as Telegram sends them and posted
over real HTTP with the secret token to signoff's own server, on SQLite and PostgreSQL, with a
FakeClock (the rig of tests/support/telegram_rig.py).

Proves: a button or a reply from an entitled user decides (and the card is edited without its
buttons); Reject asks for the reason with a ForceReply; a vote towards a quorum is not called
an approval; every refusal (wrong secret, redelivered update, tampered button, non-approver in
a group, unknown user, after expiry, second decision, a NUL in a note) is told, audited and
changes nothing, and nested JSON is a 400, not a 500; an update on another server of the same
database works.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from bot.audit import verify
from store.repository import Store
from tests.fakes import telegram as fake
from tests.support.telegram_rig import (
    ALICE,
    BOB,
    ERIN,
    GROUP,
    SECRET,
    STRANGER,
    Start,
    TelegramRig,
    buttons_in,
    update_ids,
)

# -- deciding ------------------------------------------------------------------------------------


async def test_a_press_is_answered_in_the_webhooks_answer_not_by_a_call_of_its_own(
    rig: TelegramRig,
) -> None:
    """Telegram runs the call a webhook's 200 names, so the toast costs the server no
    request (one fewer Bot API call per decision)."""
    record = await rig.create()
    card = await rig.card_for(record["id"])
    data = buttons_in(card)[0]["callback_data"]
    update = fake.callback_query(next(update_ids), from_user=ALICE, message=card, data=data)
    headers = {**fake.webhook_headers(SECRET), "Content-Type": "application/json"}
    async with rig.http.post(f"{rig.url}/telegram/webhook", json=update, headers=headers) as r:
        assert r.status == 200
        body = await r.read()
    query_id = update["callback_query"]["id"]
    said = {"method": "answerCallbackQuery", "callback_query_id": query_id, "text": "Approved."}
    assert json.loads(body) == said
    assert rig.tg.calls_to("answerCallbackQuery") == []  # the server itself called nothing
    rig.tg.answered(200, "OK", body)
    [answer] = rig.tg.calls_to("answerCallbackQuery", ok=True)
    assert answer.args["text"] == "Approved."
    assert (await rig.state(record["id"])).state == "approved"


async def test_approve_by_button_decides_edits_the_card_and_queues_the_webhook(
    rig: TelegramRig,
) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    assert await rig.click(ALICE, card) == 200
    approved = await rig.state(record["id"])
    assert (approved.state, approved.decided_by) == ("approved", "alice")
    [answer] = rig.tg.calls_to("answerCallbackQuery", ok=True)
    assert answer.args.get("text") == "Approved."
    await rig.drain()
    [edit] = rig.tg.calls_to("editMessageText", ok=True)
    assert (edit.args["chat_id"], edit.args["message_id"]) == (GROUP, card["message_id"])
    assert "reply_markup" not in edit.args
    shown = rig.tg.message(GROUP, card["message_id"])
    assert shown is not None and buttons_in(shown) == []
    assert "Approved by Alice Ng (alice)" in shown["text"]
    assert shown["text"].splitlines()[-1] == f"sha256:{record['hash'][:12]}"
    async with rig.store.read() as tx:
        kinds = [j.kind for j in await tx.outbox_jobs(approval_id=record["id"])]
    assert "webhook" in kinds


async def test_reply_approve_with_a_note(rig: TelegramRig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    assert await rig.reply(BOB, card, "approve looks fine") == 200
    approved = await rig.state(record["id"])
    assert (approved.state, approved.decided_by, approved.decision_note) == (
        "approved",
        "bob",
        "looks fine",
    )
    said = rig.tg.calls_to("sendMessage", ok=True)[-1]
    assert said.args["text"] == "Approved."


async def test_reply_no_rejects_with_the_reason(rig: TelegramRig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    assert await rig.reply(ALICE, card, "no budget exhausted") == 200
    rejected = await rig.state(record["id"])
    assert (rejected.state, rejected.decided_by, rejected.decision_note) == (
        "rejected",
        "alice",
        "budget exhausted",
    )
    await rig.drain()
    shown = rig.tg.message(GROUP, card["message_id"])
    assert shown is not None and "Note: budget exhausted" in shown["text"]


async def test_any_other_reply_gets_help_and_decides_nothing(rig: TelegramRig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    assert await rig.reply(ALICE, card, "maybe") == 200
    said = rig.tg.calls_to("sendMessage", ok=True)[-1]
    assert "Reply to the card with approve" in said.args["text"]
    assert (await rig.state(record["id"])).state == "pending"
    assert len(await rig.events(record["id"])) == 1


async def test_messages_that_are_not_replies_to_cards_are_ignored(rig: TelegramRig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    chat = card["chat"]
    plain = fake.text_message(
        next(update_ids), chat=chat, from_user=ALICE, text="approve", message_id=50
    )
    assert await rig.send(plain) == 200
    other = fake.text_message(
        next(update_ids), chat=chat, from_user=BOB, text="lunch?", message_id=51
    )
    reply_to_other = fake.text_message(
        next(update_ids),
        chat=chat,
        from_user=ALICE,
        text="yes",
        message_id=52,
        reply_to=other["message"],
    )
    assert await rig.send(reply_to_other) == 200
    sent = len(rig.tg.calls_to("sendMessage"))
    assert sent == 1  # only the card itself
    assert (await rig.state(record["id"])).state == "pending"


async def test_reject_button_asks_for_the_reason_with_a_force_reply(rig: TelegramRig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    assert await rig.click(BOB, card, button=1) == 200
    assert (await rig.state(record["id"])).state == "pending"  # not until the reason comes
    prompt_call = rig.tg.calls_to("sendMessage", ok=True)[-1]
    assert prompt_call.args["reply_markup"]["force_reply"] is True
    prompt = prompt_call.response["result"]  # type: ignore[index]
    assert prompt["reply_to_message"]["message_id"] == card["message_id"]
    assert f"sha256:{record['hash'][:12]}" in prompt["text"]
    # Someone else answering the question bob was asked decides nothing.
    assert await rig.reply(ALICE, prompt, "because I say so") == 200
    assert "for someone else" in rig.tg.calls_to("sendMessage", ok=True)[-1].args["text"]
    assert (await rig.state(record["id"])).state == "pending"
    assert await rig.reply(BOB, prompt, "duplicate of last week's refund") == 200
    rejected = await rig.state(record["id"])
    assert (rejected.state, rejected.decided_by, rejected.decision_note) == (
        "rejected",
        "bob",
        "duplicate of last week's refund",
    )


async def test_skip_rejects_without_a_reason(rig: TelegramRig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    await rig.click(ALICE, card, button=1)
    prompt = rig.tg.calls_to("sendMessage", ok=True)[-1].response["result"]  # type: ignore[index]
    assert await rig.reply(ALICE, prompt, "skip") == 200
    rejected = await rig.state(record["id"])
    assert (rejected.state, rejected.decision_note) == ("rejected", None)


async def test_a_vote_towards_a_quorum_is_not_called_an_approval(rig: TelegramRig) -> None:
    record = await rig.create(capability="quorum.transfer")
    card = await rig.card_for(record["id"])
    assert "Approvals: 0 of 2 (none yet)" in card["text"]
    assert await rig.click(ALICE, card) == 200
    answer = rig.tg.calls_to("answerCallbackQuery", ok=True)[-1]
    assert answer.args["text"] == (
        "Your approval is recorded: 1 of 2; the request waits for the rest."
    )
    assert (await rig.state(record["id"])).state == "pending"
    await rig.drain()
    shown = rig.tg.message(GROUP, card["message_id"])
    assert shown is not None and "Approvals: 1 of 2 (Alice Ng)" in shown["text"]
    assert buttons_in(shown)  # still open for the second approval
    assert await rig.reply(BOB, shown, "yes") == 200
    assert rig.tg.calls_to("sendMessage", ok=True)[-1].args["text"] == "Approved."
    assert (await rig.state(record["id"])).state == "approved"


async def test_a_reply_to_one_of_the_bots_other_messages_gets_help(rig: TelegramRig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    await rig.reply(ALICE, card, "maybe")  # the bot answers with help: not a card
    answer = rig.tg.calls_to("sendMessage", ok=True)[-1].response["result"]  # type: ignore[index]
    assert await rig.reply(ALICE, answer, "approve") == 200
    said = rig.tg.calls_to("sendMessage", ok=True)[-1].args["text"]
    assert said.startswith("Nothing was decided. Reply to the card")
    assert (await rig.state(record["id"])).state == "pending"


# -- refusals ------------------------------------------------------------------------------------


@pytest.mark.parametrize("secret", ["not-the-secret", None], ids=["wrong secret", "no secret"])
async def test_a_wrong_or_missing_secret_is_403_and_processes_nothing(
    rig: TelegramRig, secret: str | None
) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    update = fake.callback_query(
        next(update_ids), from_user=ALICE, message=card, data=buttons_in(card)[0]["callback_data"]
    )
    assert await rig.send(update, secret=secret) == 403
    assert (await rig.state(record["id"])).state == "pending"
    assert rig.tg.calls_to("answerCallbackQuery") == []
    # Not even remembered: the genuine delivery of the same update still works.
    assert await rig.send(update) == 200
    assert (await rig.state(record["id"])).state == "approved"


async def test_a_redelivered_update_is_processed_once(rig: TelegramRig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    update = fake.callback_query(
        next(update_ids), from_user=ALICE, message=card, data=buttons_in(card)[0]["callback_data"]
    )
    assert await rig.send(update) == 200
    events = len(await rig.events(record["id"]))
    assert await rig.send(update) == 200  # acknowledged, so Telegram stops retrying
    assert len(await rig.events(record["id"])) == events  # no "already approved" refusal
    assert len(rig.tg.calls_to("answerCallbackQuery")) == 1


@pytest.mark.parametrize(
    ("who", "change", "expected", "alert"),
    [
        (ERIN, None, "You are not an approver for this request; it is assigned to", True),
        (STRANGER, None, "not linked to a signoff principal", True),
        (ALICE, "other id", "does not match the card", True),
        (ALICE, "other hash", "does not match the card", True),
        (ALICE, "expire", "This request expired at", False),
        (BOB, "decided", "Already approved by Alice Ng at", False),
    ],
    ids=[
        "not entitled in the group",
        "unknown user",
        "tampered id",
        "tampered hash",
        "after expiry",
        "second decision",
    ],
)
async def test_refused_clicks_say_why_are_audited_and_change_nothing(
    rig: TelegramRig, who: dict[str, Any], change: str | None, expected: str, alert: bool
) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    data = buttons_in(card)[0]["callback_data"]
    if change == "other id":
        other = await rig.create(run_id="run-2")
        other_card = await rig.card_for(other["id"])
        data = buttons_in(other_card)[0]["callback_data"]  # pasted onto this card's message
    elif change == "other hash":
        data = re.sub(r"[0-9a-f]{12}$", "0" * 12, data)
    elif change == "expire":
        rig.clock.advance(hours=73)
    elif change == "decided":
        await rig.click(ALICE, card)
    before = await rig.state(record["id"])
    trail = len(await rig.events(record["id"]))
    assert await rig.click(who, card, data=data) == 200
    answer = rig.tg.calls_to("answerCallbackQuery", ok=True)[-1]
    assert expected in answer.args["text"], answer.args["text"]
    assert bool(answer.args.get("show_alert")) is alert
    after = await rig.state(record["id"])
    events = await rig.events(record["id"])
    # An attempt after the deadline records the expiry first, then the refusal.
    assert len(events) == trail + (2 if change == "expire" else 1)
    assert events[-1].type == "refused"
    principal = {111: "alice", 222: "bob", 555: "erin"}.get(who["id"], str(who["id"]))
    assert events[-1].actor == f"telegram:{principal}"
    expected_state = "expired" if change == "expire" else before.state
    assert (after.state, after.decided_by) == (expected_state, before.decided_by)
    assert (await verify(rig.store)).ok


async def test_a_reply_from_a_non_approver_in_the_group_is_refused(rig: TelegramRig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    assert await rig.reply(ERIN, card, "yes") == 200
    said = rig.tg.calls_to("sendMessage", ok=True)[-1]
    assert "You are not an approver" in said.args["text"]
    assert (await rig.state(record["id"])).state == "pending"
    assert (await rig.events(record["id"]))[-1].actor == "telegram:erin"


async def test_deeply_nested_json_with_the_right_secret_is_400_not_500(rig: TelegramRig) -> None:
    body = b'{"update_id": 1, "x": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    headers = {**fake.webhook_headers(SECRET), "Content-Type": "application/json"}
    async with rig.http.post(f"{rig.url}/telegram/webhook", data=body, headers=headers) as r:
        assert r.status == 400
        assert (await r.json())["error"]["code"] == "malformed_json"


async def test_a_nul_in_a_reply_note_is_refused_in_words_on_both_databases(
    rig: TelegramRig,
) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    assert await rig.reply(ALICE, card, "approve looks\x00fine") == 200
    said = rig.tg.calls_to("sendMessage", ok=True)[-1].args["text"]
    assert "NUL character" in said
    assert (await rig.state(record["id"])).state == "pending"


# -- replicas ------------------------------------------------------------------------------------


async def test_an_update_on_another_server_of_the_same_database_works(
    start: Start, rig: TelegramRig, db_url: str
) -> None:
    other_store = Store.from_url(db_url)
    try:
        other = await start(other_store)
        record = await rig.create()
        card = await rig.card_for(record["id"])
        update = fake.callback_query(
            next(update_ids),
            from_user=ALICE,
            message=card,
            data=buttons_in(card)[0]["callback_data"],
        )
        assert await other.send(update) == 200
        assert (await rig.state(record["id"])).state == "approved"
        # Telegram retrying the same update at the first server: handled once, on the other.
        assert await rig.send(update) == 200
        assert len(rig.tg.calls_to("answerCallbackQuery")) == 1
    finally:
        await other_store.close()
