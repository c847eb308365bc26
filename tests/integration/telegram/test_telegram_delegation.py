"""Handing over and delegating from Telegram end to end, in-process: real python-telegram-bot
code against the fake Bot API (tests/fakes/telegram/), updates shaped exactly as Telegram
sends them and posted over real HTTP with the secret token to signoff's own server, on SQLite
and PostgreSQL, with a FakeClock (the rig of tests/support/telegram_rig.py).

Proves: `delegate NAME NOTE` in a reply to a card hands the request over, and only from an
approver; /delegate, /delegations and /revoke in a private chat create, list and end a
delegation and explain mistakes; a delegate decides from the card in their own chat through
another server; /start says who the account is linked to.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from bot.delegations import Delegations
from store.repository import Store
from tests.fakes import telegram as fake
from tests.support.telegram_rig import (
    ALICE,
    BOB,
    ERIN,
    GROUP,
    STRANGER,
    Start,
    TelegramRig,
    buttons_in,
    update_ids,
)

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


# -- /start and /help ----------------------------------------------------------------------------


async def test_start_says_who_the_account_is_linked_to(rig: TelegramRig) -> None:
    said = await _command(rig, ALICE, "/start")
    assert said.startswith("Linked to signoff as Alice Ng (alice)")
    assert "not linked" in await _command(rig, STRANGER, "/start")
    assert "telegram = 999" in await _command(rig, STRANGER, "/help")
