"""Telegram as groups really are, end to end on SQLite and PostgreSQL: real python-telegram-bot
code against the fake Bot API (tests/fakes/telegram/), updates shaped as Telegram sends
them, posted over HTTP to signoff's own server (the rig of tests/support/telegram_rig.py).

Proves: a card goes into a forum topic and a reply there decides, while chatter in a topic
the bot opened gets no answer; an anonymous admin is told to turn anonymity off and decides
nothing, and the config refuses Telegram's stand-in accounts; chat not found, bot blocked and
not enough rights end the job at once as dead with Telegram's words, flood control does not;
a group upgraded to a supergroup takes its cards along (from the service messages, from a
failed edit, from a failed post) and the stale configured id is named in the log; a photo
or document captioned `approve` gets the help text and decides nothing.
"""

from __future__ import annotations

import copy
import itertools
import logging
from typing import Any

import pytest

from bot.config import parse_config
from bot.errors import ConfigError
from bot.operator import Actor, Operator
from channels.telegram.transport import permanent_reason
from store.repository import Store
from tests.fakes import telegram as fake
from tests.support.samples import TEST_CONFIG
from tests.support.telegram_rig import (
    ALICE,
    BOB,
    GROUP,
    Start,
    TelegramRig,
    buttons_in,
)

OLD_GROUP = -4012345678  # a basic group: not -100...
NEW_GROUP = -1009876543210  # the supergroup it becomes
_ids = itertools.count(900_000)

async def _jobs(rig: TelegramRig, approval_id: str, kind: str) -> list[Any]:
    async with rig.store.read() as tx:
        return [j for j in await tx.outbox_jobs(approval_id=approval_id) if j.kind == kind]


def _said(rig: TelegramRig) -> str:
    return str(rig.tg.calls_to("sendMessage", ok=True)[-1].args["text"])


# -- forum topics ----------------------------------------------------------------------------------


async def test_a_card_goes_into_its_topic_and_a_reply_there_decides(
    start: Start, store: Store
) -> None:
    rig = await start(store, [f"telegram:{GROUP}"])  # creates the chat in the fake
    root = rig.tg.create_forum_topic(GROUP, "Refunds")
    thread = root["message_thread_id"]
    rig = await start(store, [f"telegram:{GROUP}/{thread}"])
    record = await rig.create()
    card = await rig.card_for(record["id"])
    [sent] = rig.tg.calls_to("sendMessage", ok=True)
    assert sent.args["message_thread_id"] == thread
    assert (card["message_thread_id"], card["is_topic_message"]) == (thread, True)
    async with rig.store.read() as tx:
        [message] = await tx.card_messages_for(record["id"])
    assert message.address == str(GROUP)  # message ids are per chat, topics or not

    assert await rig.reply(BOB, card, "approve fine by me") == 200
    approved = await rig.state(record["id"])
    assert (approved.state, approved.decided_by) == ("approved", "bob")
    answer = rig.tg.calls_to("sendMessage", ok=True)[-1]
    assert answer.args["text"] == "Approved."
    assert answer.response["result"]["message_thread_id"] == thread  # type: ignore[index]
    await rig.drain()
    shown = rig.tg.message(GROUP, card["message_id"])
    assert shown is not None and "Approved by Bob Stone" in shown["text"]
    assert buttons_in(shown) == []


async def test_chatter_in_a_topic_the_bot_opened_gets_no_answer(start: Start, store: Store) -> None:
    rig = await start(store, [f"telegram:{GROUP}"])
    record = await rig.create()
    await rig.card_for(record["id"])  # the chat exists now
    root = rig.tg.create_forum_topic(GROUP, "Approvals")  # opened by the bot
    before = len(rig.tg.calls_to("sendMessage"))
    for text in ("morning all", "approve", "yes"):
        # In a topic, Telegram makes every plain message a reply to the topic's root.
        update = fake.text_message(
            next(_ids),
            chat=root["chat"],
            from_user=ALICE,
            text=text,
            message_id=rig.tg.next_message_id(GROUP),
            reply_to=root,
        )
        assert update["message"]["reply_to_message"]["forum_topic_created"]
        assert update["message"]["message_thread_id"] == root["message_id"]
        assert await rig.send(update) == 200
    assert len(rig.tg.calls_to("sendMessage")) == before  # no help text for chatter
    assert (await rig.state(record["id"])).state == "pending"


def test_the_config_takes_a_topic_target_in_a_supergroup_only() -> None:
    config = copy.deepcopy(TEST_CONFIG)
    config["telegram"] = {}
    config["routes"][0]["notify"] = ["telegram:-1001234567890/42"]
    [target] = parse_config(config).directory().routes[0].notify
    assert (target.chat, target.thread, str(target)) == (
        "-1001234567890",
        42,
        "telegram:-1001234567890/42",
    )
    for wrong in ("telegram:-4001234/42", "telegram:-1001234567890/", "telegram:dm/3"):
        config["routes"][0]["notify"] = [wrong]
        with pytest.raises(ConfigError, match="telegram:CHAT_ID/TOPIC_ID"):
            parse_config(config)


# -- anonymous admins ------------------------------------------------------------------------------


async def test_an_anonymous_admin_is_told_to_turn_anonymity_off_and_decides_nothing(
    start: Start, store: Store
) -> None:
    rig = await start(store, [f"telegram:{GROUP}"])
    record = await rig.create()
    card = await rig.card_for(record["id"])
    group = card["chat"]
    reply = fake.text_message(
        next(_ids),
        chat=group,
        from_user=fake.ANONYMOUS_ADMIN,
        sender_chat=group,
        text="approve",
        message_id=next(_ids),
        reply_to=card,
    )
    assert await rig.send(reply) == 200
    said = _said(rig)
    assert 'turn off "Remain anonymous"' in said
    assert "1087968824" not in said and "principals" not in said
    # A press carrying the stand-in account is refused the same way, as an alert.
    assert await rig.click(fake.ANONYMOUS_ADMIN, card) == 200
    answer = rig.tg.calls_to("answerCallbackQuery", ok=True)[-1]
    assert "Remain anonymous" in answer.args["text"] and answer.args["show_alert"] is True
    # /start from the anonymous admin does not suggest linking 1087968824 either.
    command = fake.text_message(
        next(_ids),
        chat=group,
        from_user=fake.ANONYMOUS_ADMIN,
        sender_chat=group,
        text="/start",
        message_id=next(_ids),
    )
    assert await rig.send(command) == 200
    assert "1087968824" not in _said(rig) and "Remain anonymous" in _said(rig)

    assert (await rig.state(record["id"])).state == "pending"
    refusals = [e for e in await rig.events(record["id"]) if e.type == "refused"]
    assert [e.actor for e in refusals] == ["telegram:anonymous", "telegram:anonymous"]


@pytest.mark.parametrize("account", [1087968824, 777000])
def test_the_config_refuses_telegrams_stand_in_accounts(account: int) -> None:
    config = copy.deepcopy(TEST_CONFIG)
    config["principals"]["alice"]["telegram"] = account
    with pytest.raises(ConfigError, match="turn off anonymity") as refused:
        parse_config(config)
    assert f"principals.alice.telegram: {account} is Telegram's" in str(refused.value)
    assert f"telegram = {account}" not in str(refused.value)


# -- permanent errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fate", "reason", "words"),
    [
        ("lose_chat", "chat_not_found", "Chat not found"),
        ("block", "bot_blocked", "Forbidden: bot was blocked by the user"),
        ("restrict", "not_enough_rights", "Not enough rights to send text messages to the chat"),
    ],
)
async def test_a_refusal_that_never_changes_ends_the_job_at_once(
    start: Start, store: Store, fate: str, reason: str, words: str
) -> None:
    rig = await start(store, ["telegram:dm"])
    getattr(rig.tg, fate)(111)  # alice's private chat
    record = await rig.create()
    await rig.drain()
    jobs = {j.payload["target"]: j for j in await _jobs(rig, record["id"], "post_card")}
    alice, bob = jobs["telegram:@alice"], jobs["telegram:@bob"]
    assert (alice.state, alice.attempts) == ("dead", 1)
    assert alice.last_error == f"Undeliverable: Telegram refused the call for good: {words}"
    assert bob.state == "done"
    assert permanent_reason(words) == reason


async def test_flood_control_is_not_a_permanent_refusal(start: Start, store: Store) -> None:
    rig = await start(store, [f"telegram:{GROUP}"])
    rig.tg.rate_limit_next("sendMessage", retry_after=5, times=1)
    record = await rig.create()
    await rig.drain()
    [job] = await _jobs(rig, record["id"], "post_card")
    assert job.state == "queued" and job.attempts <= 1  # never dead: it only waits
    assert (job.run_after - rig.clock.now()).total_seconds() >= 5  # Telegram's wait
    rig.clock.advance(seconds=30)
    assert buttons_in(await rig.card_for(record["id"]))


# -- a group upgraded to a supergroup --------------------------------------------------------------


async def test_the_migration_updates_move_the_cards_and_presses_there_decide(
    start: Start, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    rig = await start(store, [f"telegram:{OLD_GROUP}"])
    record = await rig.create()
    old_card = await rig.card_for(record["id"], chat=OLD_GROUP)
    assert old_card["chat"]["type"] == "group"
    told, started = rig.tg.migrate(OLD_GROUP, NEW_GROUP, by=ALICE)
    with caplog.at_level(logging.WARNING, logger="signoff.telegram"):
        assert await rig.send(told) == 200
        assert await rig.send(started) == 200  # the second says nothing new
    [warning] = [r for r in caplog.records if "upgraded to a supergroup" in r.getMessage()]
    assert f"telegram:{OLD_GROUP}" in warning.getMessage()
    assert f"telegram:{NEW_GROUP}" in warning.getMessage()
    async with rig.store.read() as tx:
        [message] = await tx.card_messages_for(record["id"])
    assert message.address == str(NEW_GROUP)

    card = rig.tg.message(NEW_GROUP, old_card["message_id"])
    assert card is not None and card["chat"]["type"] == "supergroup"
    assert await rig.click(ALICE, card) == 200
    assert rig.tg.calls_to("answerCallbackQuery", ok=True)[-1].args["text"] == "Approved."
    await rig.drain()
    assert rig.tg.calls_to("editMessageText", ok=False) == []
    shown = rig.tg.message(NEW_GROUP, card["message_id"])
    assert shown is not None and "Approved by Alice Ng" in shown["text"]


async def test_an_edit_refused_by_the_migration_follows_it(
    start: Start, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    rig = await start(store, [f"telegram:{OLD_GROUP}"])
    record = await rig.create()
    old_card = await rig.card_for(record["id"], chat=OLD_GROUP)
    rig.tg.migrate(OLD_GROUP, NEW_GROUP)  # its service messages never reach signoff
    await Operator(rig.store, rig.directory, rig.clock).approve_shown(
        record["id"], record["hash"], Actor("alice", "cli")
    )
    with caplog.at_level(logging.WARNING, logger="signoff.telegram"):
        await rig.drain()
    [refused] = rig.tg.calls_to("editMessageText", ok=False)
    assert refused.response["parameters"] == {"migrate_to_chat_id": NEW_GROUP}  # type: ignore[index]
    assert refused.args["chat_id"] == OLD_GROUP
    [edited] = rig.tg.calls_to("editMessageText", ok=True)
    assert edited.args["chat_id"] == NEW_GROUP
    assert {j.state for j in await _jobs(rig, record["id"], "update_card")} == {"done"}
    shown = rig.tg.message(NEW_GROUP, old_card["message_id"])
    assert shown is not None and "Approved by Alice Ng" in shown["text"]
    async with rig.store.read() as tx:
        [message] = await tx.card_messages_for(record["id"])
    assert message.address == str(NEW_GROUP)
    assert any(f"telegram:{OLD_GROUP}" in r.getMessage() for r in caplog.records)


async def test_a_card_for_the_old_group_id_is_posted_in_the_supergroup(
    start: Start, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    rig = await start(store, [f"telegram:{OLD_GROUP}"])
    rig.tg.add_chat(fake.group_chat(OLD_GROUP, "Finance", "group"))
    rig.tg.migrate(OLD_GROUP, NEW_GROUP)
    with caplog.at_level(logging.WARNING, logger="signoff.telegram"):
        record = await rig.create()
        card = await rig.card_for(record["id"], chat=NEW_GROUP)
    assert buttons_in(card)
    [post] = await _jobs(rig, record["id"], "post_card")
    assert (post.state, post.attempts) == ("done", 1)
    [warning] = [r for r in caplog.records if "upgraded to a supergroup" in r.getMessage()]
    assert f"change them to telegram:{NEW_GROUP}" in warning.getMessage()


# -- media replies ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["photo", "document"])
async def test_a_captioned_photo_or_document_reply_gets_the_help_text(
    start: Start, store: Store, kind: str
) -> None:
    rig = await start(store, [f"telegram:{GROUP}"])
    record = await rig.create()
    card = await rig.card_for(record["id"])
    update = fake.media_message(
        next(_ids),
        chat=card["chat"],
        from_user=ALICE,
        caption="approve",
        message_id=next(_ids),
        kind=kind,
        reply_to=card,
    )
    assert await rig.send(update) == 200
    said = _said(rig)
    assert said.startswith("Nothing was decided: a decision is read from a text reply")
    assert "Reply to the card with approve" in said
    assert (await rig.state(record["id"])).state == "pending"
    assert len(await rig.events(record["id"])) == 1


# -- a private chat nobody opened yet -------------------------------------------------------------


async def test_a_dm_card_refused_before_start_is_sent_once_they_press_start(
    start: Start, store: Store
) -> None:
    rig = await start(store, ["telegram:dm"])
    rig.tg.block(111, "Forbidden: bot can't initiate conversation with a user")
    record = await rig.create()
    await rig.drain()
    jobs = {j.payload["target"]: j for j in await _jobs(rig, record["id"], "post_card")}
    assert jobs["telegram:@alice"].state == "dead"  # at once: retrying cannot help
    assert "can't initiate conversation" in (jobs["telegram:@alice"].last_error or "")
    other = await rig.create(run_id="run-decided")
    await rig.drain()
    await Operator(rig.store, rig.directory, rig.clock).approve_shown(
        other["id"], other["hash"], Actor("bob", "cli")
    )

    rig.tg.unblock(111)  # alice opens the chat and presses Start
    start_update = fake.text_message(
        next(_ids),
        chat=fake.private_chat(ALICE),
        from_user=ALICE,
        text="/start",
        message_id=next(_ids),
    )
    assert await rig.send(start_update) == 200
    assert _said(rig).startswith("Linked to signoff as Alice Ng")
    card = await rig.card_for(record["id"], chat=111)
    assert buttons_in(card)
    assert await rig.click(ALICE, card) == 200
    assert (await rig.state(record["id"])).decided_by == "alice"
    # The request decided meanwhile stays dead: there is nothing left to ask.
    [late] = [
        j
        for j in await _jobs(rig, other["id"], "post_card")
        if j.payload["target"] == "telegram:@alice"
    ]
    assert late.state == "dead"
