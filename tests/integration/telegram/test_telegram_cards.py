"""Telegram's cards end to end, in-process: real python-telegram-bot code against the fake
Bot API (tests/fakes/telegram/), updates shaped exactly as Telegram sends them and posted over
real HTTP with the secret token to signoff's own server, on SQLite and PostgreSQL, with a
FakeClock (the rig of tests/support/telegram_rig.py).

Proves: a request becomes an HTML card with the short hash and its buttons (Approve, Reject,
Answer instead) whose data fits 64 bytes, and `telegram:dm` posts one to each approver's
private chat; Telegram down or flood control delays a card without losing it; an edit that
changes nothing is not an error; agent text reaches Telegram escaped; a huge request and a
long reason still make cards Telegram accepts.
"""

from __future__ import annotations

from store.repository import Store
from tests.support.telegram_rig import (
    ALICE,
    GROUP,
    Start,
    TelegramRig,
    buttons_in,
)

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


# -- outages, escaping, size ---------------------------------------------------------------------


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
