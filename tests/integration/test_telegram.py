"""Telegram end to end, in-process: real python-telegram-bot code against the fake Bot API
(tests/fakes/telegram/), updates shaped exactly as Telegram sends them and posted over real
HTTP with the secret token to signoff's own server, on SQLite and PostgreSQL, with a FakeClock.

Proves: a request becomes an HTML card with the short hash and its buttons (Approve, Reject,
Answer instead) whose data fits 64 bytes; a button or a reply from an entitled user decides
(and the card is edited without its buttons); Reject asks for the reason with a ForceReply;
every refusal (wrong secret, redelivered update, tampered button, non-approver in a group,
unknown user, after expiry, second decision) is told, audited and changes nothing; an update
on another server of the same database works; Telegram down or flood control delays a card
without losing it; agent text reaches Telegram escaped.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from bot.audit import verify
from bot.clock import FakeClock
from bot.config import parse_config
from bot.delegations import Delegations
from store.repository import Store
from tests.fakes import telegram as fake
from tests.fakes.telegram import FakeTelegram
from tests.support.chat_server import serve
from tests.support.telegram_rig import (
    ALICE,
    API_KEY,
    BOB,
    ERIN,
    GROUP,
    SECRET,
    STRANGER,
    TOKEN,
    TelegramRig,
    buttons_in,
    telegram_config,
    update_ids,
)

Start = Callable[..., Awaitable[TelegramRig]]


@pytest.fixture
async def start(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Start]:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TOKEN)
    monkeypatch.setenv("TELEGRAM_WEBHOOK_SECRET", SECRET)
    monkeypatch.setenv("TELEGRAM_TEST_API_KEY", API_KEY)
    cleanup: list[Callable[[], Awaitable[None]]] = []
    async with FakeTelegram(TOKEN) as tg:

        async def one(store: Store, notify: list[str] | None = None) -> TelegramRig:
            config = parse_config(telegram_config(tg, notify or [f"telegram:{GROUP}"]))
            return await serve(TelegramRig, config, store, clock, API_KEY, cleanup, tg=tg)

        yield one
        for close in reversed(cleanup):
            await close()


@pytest.fixture
async def rig(start: Start, store: Store) -> TelegramRig:
    return await start(store)


# -- the card ------------------------------------------------------------------------------------


async def test_a_request_becomes_an_html_card_with_the_short_hash_and_two_buttons(
    rig: TelegramRig,
) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    [sent] = rig.tg.calls_to("sendMessage", ok=True)
    assert sent.args["parse_mode"] == "HTML"
    assert sent.args["text"].splitlines()[-1] == f"<code>sha256:{record['hash'][:12]}</code>"
    assert card["text"].splitlines()[-1] == f"sha256:{record['hash'][:12]}"
    assert "Refund €120.00 to Zoë" in card["text"]
    buttons = buttons_in(card)
    assert [b["text"] for b in buttons] == [
        "Approve",
        "Reject",
        "Answer instead",
        "Allow the same…",
    ]
    for button in buttons:
        assert len(button["callback_data"].encode()) <= 64
        assert record["hash"][:12] in button["callback_data"]
    async with rig.store.read() as tx:
        [message] = await tx.card_messages_for(record["id"])
    assert (message.channel, message.address, message.message_id, message.shown_hash) == (
        "telegram",
        str(GROUP),
        str(card["message_id"]),
        record["hash"],
    )


async def test_dm_targets_post_to_each_approvers_private_chat(start: Start, store: Store) -> None:
    rig = await start(store, notify=["telegram:dm"])
    record = await rig.create()
    await rig.drain()
    chats = sorted(call.args["chat_id"] for call in rig.tg.calls_to("sendMessage", ok=True))
    # finance is alice, bob and sam; sam has no Telegram id, so no card is queued for him.
    assert chats == [111, 222]
    async with rig.store.read() as tx:
        jobs = await tx.outbox_jobs(approval_id=record["id"])
    assert sorted(j.payload["target"] for j in jobs) == ["telegram:@alice", "telegram:@bob"]
    assert {j.state for j in jobs} == {"done"}
    card = await rig.card_for(record["id"], chat=111)
    assert card["chat"]["type"] == "private"
    assert await rig.click(ALICE, card) == 200
    assert (await rig.state(record["id"])).decided_by == "alice"


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


# -- replicas, outages, escaping -----------------------------------------------------------------


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


async def test_telegram_down_or_flood_control_delays_the_card_without_losing_it(
    rig: TelegramRig,
) -> None:
    rig.tg.fail_next("sendMessage", status=502, times=1)
    record = await rig.create()
    assert await rig.runner.run_once() == 1
    async with rig.store.read() as tx:
        [job] = await tx.outbox_jobs(approval_id=record["id"])
    assert job.state == "queued" and job.attempts == 1
    rig.tg.rate_limit_next("sendMessage", retry_after=40)
    rig.clock.advance(minutes=1)
    await rig.runner.run_once()
    async with rig.store.read() as tx:
        [job] = await tx.outbox_jobs(approval_id=record["id"])
    assert job.state == "queued"
    assert (job.run_after - rig.clock.now()).total_seconds() >= 40  # retry_after honoured
    rig.clock.advance(minutes=1)
    card = await rig.card_for(record["id"])
    assert buttons_in(card)


async def test_an_edit_that_changes_nothing_is_not_an_error(rig: TelegramRig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    await rig.click(ALICE, card)
    await rig.drain()
    async with rig.store.read() as tx:
        [message] = await tx.card_messages_for(record["id"])
        await_job = await tx.outbox_jobs(approval_id=record["id"])
    assert all(job.state == "done" for job in await_job if job.kind == "update_card")
    # The same update delivered again (a retry after a lost answer): Telegram says "not
    # modified", and the job still succeeds.
    async with rig.store.write() as tx:
        await tx.enqueue(
            "update_card",
            {"card_message_id": message.id, "state": "approved"},
            now=rig.clock.now(),
            approval_id=record["id"],
        )
    await rig.drain()
    assert rig.tg.calls_to("editMessageText", ok=False)
    async with rig.store.read() as tx:
        jobs = [
            j for j in await tx.outbox_jobs(approval_id=record["id"]) if j.kind == "update_card"
        ]
    assert [j.state for j in jobs] == ["done", "done"]


async def test_model_chosen_text_reaches_telegram_escaped(rig: TelegramRig) -> None:
    nasty = '<b>URGENT</b> <a href="https://evil.example/pay">click</a> &amp; 1 < 2'
    record = await rig.create(
        reason=nasty,
        tool={"name": "stripe.refunds.create", "arguments": {"memo": nasty}},
        presentation={"title": f"Refund {nasty}", "fields": [{"label": nasty, "value": nasty}]},
    )
    card = await rig.card_for(record["id"])
    # Telegram parsed the HTML and shows the agent's text as the characters it sent...
    assert card["text"].count(nasty) >= 5
    # ...with no link and no bold made from it: only signoff's own formatting.
    kinds = {entity["type"] for entity in card.get("entities", [])}
    assert "text_link" not in kinds
    # (Telegram splits a bold span where a detected URL starts: compare what is covered.)
    bold = {
        i
        for e in card.get("entities", [])
        if e["type"] == "bold"
        for i in range(e["offset"], e["offset"] + e["length"])
    }
    title = card["text"].index(f"Refund {nasty}")
    assert bold == set(range(title, title + len(f"Refund {nasty}")))
    # A reason typed by a human is escaped on the edited card too.
    await rig.reply(ALICE, card, f"no {nasty}")
    await rig.drain()
    shown = rig.tg.message(GROUP, card["message_id"])
    assert shown is not None and f"Note: {nasty}" in shown["text"]
    assert "text_link" not in {entity["type"] for entity in shown.get("entities", [])}


# -- hand-off and delegation from the chat ---------------------------------------------------------


async def test_reply_delegate_hands_the_request_over(rig: TelegramRig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    assert await rig.reply(ALICE, card, "delegate carol she owns this vendor") == 200
    moved = await rig.state(record["id"])
    assert (moved.state, moved.assignee) == ("pending", "carol")
    event = (await rig.events(record["id"]))[-1]
    assert (event.type, event.actor, event.data["note"]) == (
        "delegated",
        "telegram:alice",
        "she owns this vendor",
    )
    assert rig.tg.calls_to("sendMessage", ok=True)[-1].args["text"] == "Handed to Carol Diaz."
    await rig.drain()
    shown = rig.tg.message(GROUP, card["message_id"])
    assert shown is not None
    assert "Assigned to Carol Diaz (carol) (handed over by Alice Ng)" in shown["text"]
    assert buttons_in(shown)  # still pending: still decidable


async def test_reply_delegate_from_a_non_approver_is_refused(rig: TelegramRig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    assert await rig.reply(ERIN, card, "delegate erin") == 200
    assert "You are not an approver" in rig.tg.calls_to("sendMessage", ok=True)[-1].args["text"]
    moved = await rig.state(record["id"])
    assert moved.assignee == "group:finance"
    assert (await rig.events(record["id"]))[-1].type == "refused"


async def _command(rig: TelegramRig, who: dict[str, Any], text: str) -> str:
    chat = fake.private_chat(who)
    update = fake.text_message(
        next(update_ids), chat=chat, from_user=who, text=text, message_id=next(update_ids)
    )
    assert await rig.send(update) == 200
    answer = rig.tg.calls_to("sendMessage", ok=True)[-1]
    assert answer.args["chat_id"] == who["id"]
    return str(answer.args["text"])


async def test_delegate_commands_create_list_and_revoke(rig: TelegramRig) -> None:
    said = await _command(rig, ALICE, "/delegate bob until 2026-12-24 payments.*")
    assert "Bob Stone decides for Alice Ng (payments.*) until 2026-12-24 00:00 UTC" in said
    async with rig.store.read() as tx:
        [delegation] = await tx.list_delegations()
    assert (delegation.principal, delegation.delegate, delegation.scope) == (
        "alice",
        "bob",
        "payments.*",
    )
    assert delegation.created_by == "telegram:alice"
    # Both hear that it started, in their private chats.
    await rig.drain()
    told = {
        c.args["chat_id"]: c.args["text"]
        for c in rig.tg.calls_to("sendMessage", ok=True)
        if str(c.args["text"]).startswith("Delegation started")
    }
    assert sorted(told) == [111, 222]
    assert "Bob Stone decides for Alice Ng (payments.*)" in told[111]
    listed = await _command(rig, BOB, "/delegations")
    assert delegation.id in listed
    # A loop back to alice is refused with the reason.
    looped = await _command(rig, BOB, "/delegate alice")
    assert "circle" in looped
    # Only alice may revoke her delegation.
    assert "no delegation" in await _command(rig, BOB, f"/revoke {delegation.id}")
    assert "Revoked" in await _command(rig, ALICE, f"/revoke {delegation.id}")
    async with rig.store.read() as tx:
        [revoked] = await tx.list_delegations()
    assert revoked.revoked_by == "telegram:alice"
    await rig.drain()
    ended = [
        c.args["chat_id"]
        for c in rig.tg.calls_to("sendMessage", ok=True)
        if str(c.args["text"]).startswith("Delegation revoked")
    ]
    assert sorted(ended) == [111, 222]


async def test_delegate_command_explains_mistakes(rig: TelegramRig) -> None:
    assert "delegate NAME" in await _command(rig, ALICE, "/delegate bob until christmas")
    assert "unknown principal 'zed'" in await _command(rig, ALICE, "/delegate zed")
    assert "not linked" in await _command(rig, STRANGER, "/delegate bob")
    async with rig.store.read() as tx:
        assert await tx.list_delegations() == []


async def test_a_delegate_decides_from_the_card_in_their_chat_through_another_server(
    start: Start, store: Store, db_url: str
) -> None:
    """Alice is away until day 5. A request for her on day 1 sends its card to bob too; on
    day 4 bob presses Approve on it, and the update lands on a second server."""
    rig = await start(store, notify=["telegram:dm"])
    began = rig.clock.now()
    await Delegations(store, rig.directory, rig.clock).create(
        "alice", "bob", created_by="cli", ends_at=began + timedelta(days=5)
    )
    rig.clock.set(began + timedelta(days=1))
    record = await rig.create(approvers=["alice"], approval_ttl="72h")
    bobs_card = await rig.card_for(record["id"], chat=222)
    assert "Bob Stone decides as delegate until" in bobs_card["text"]
    rig.clock.set(began + timedelta(days=3, hours=23))
    other_store = Store.from_url(db_url)
    try:
        other = await start(other_store, notify=["telegram:dm"])
        update = fake.callback_query(
            next(update_ids),
            from_user=BOB,
            message=bobs_card,
            data=buttons_in(bobs_card)[0]["callback_data"],
        )
        assert await other.send(update) == 200
    finally:
        await other_store.close()
    approved = await rig.state(record["id"])
    assert (approved.state, approved.decided_by) == ("approved", "bob")
    event = (await rig.events(record["id"]))[-1]
    assert (event.type, event.actor, event.data["as_delegate_of"]) == (
        "approved",
        "telegram:bob",
        "alice",
    )


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


async def test_a_huge_request_and_a_long_reason_still_make_cards_telegram_accepts(
    rig: TelegramRig,
) -> None:
    emoji = "💸" * 150  # two UTF-16 units each, as Telegram counts them
    record = await rig.create(
        presentation={
            "title": "T" * 300,
            "summary": "s" * 4000,
            "fields": [{"label": f"Line {i} {emoji}", "value": emoji} for i in range(40)],
        },
        reason="r" * 4000,
        tool={"name": "bulk.update", "arguments": {f"a{i}": emoji for i in range(40)}},
    )
    card = await rig.card_for(record["id"])  # the fake refuses anything over 4,096 units
    assert card["text"].splitlines()[-1] == f"sha256:{record['hash'][:12]}"
    assert "more fields; every one is in signoff approvals show" in card["text"]
    assert await rig.reply(ALICE, card, "no " + "because " * 600) == 200
    await rig.drain()
    assert rig.tg.calls_to("editMessageText", ok=False) == []
    shown = rig.tg.message(GROUP, card["message_id"])
    assert shown is not None and "Rejected" in shown["text"] and "Note: because" in shown["text"]


async def test_start_says_who_the_account_is_linked_to(rig: TelegramRig) -> None:
    said = await _command(rig, ALICE, "/start")
    assert said.startswith("Linked to signoff as Alice Ng (alice)")
    assert "not linked" in await _command(rig, STRANGER, "/start")
    assert "telegram = 999" in await _command(rig, STRANGER, "/help")


async def test_a_reply_to_one_of_the_bots_other_messages_gets_help(rig: TelegramRig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    await rig.reply(ALICE, card, "maybe")  # the bot answers with help: not a card
    answer = rig.tg.calls_to("sendMessage", ok=True)[-1].response["result"]  # type: ignore[index]
    assert await rig.reply(ALICE, answer, "approve") == 200
    said = rig.tg.calls_to("sendMessage", ok=True)[-1].args["text"]
    assert said.startswith("Nothing was decided. Reply to the card")
    assert (await rig.state(record["id"])).state == "pending"


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
