"""Approve asks for a confirmation on a route with `confirm = true`, and a Telegram card that
was sent but never recorded (a crash between the two) still works.

On Slack the Approve button carries Block Kit's `confirm` object (Slack asks in a dialog before
the click is sent); on Telegram, which has no dialog, Approve turns the card's buttons into
"Confirm approve / Cancel" and only "Confirm approve" decides. Real slack-bolt and
python-telegram-bot code against the fake APIs, on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from sqlalchemy import delete, update

from store.repository import Store
from store.schema import card_messages, outbox
from tests.support.slack_rig import CHANNEL, SlackRig
from tests.support.slack_rig import buttons_in as slack_buttons
from tests.support.telegram_rig import (
    ALICE,
    ERIN,
    GROUP,
    TelegramRig,
)
from tests.support.telegram_rig import buttons_in as telegram_buttons

CONTRACT = {"capability": "contracts.sign", "run_id": "run-contract"}


# -- Slack: the confirm object -------------------------------------------------------------------


def _contracts_to_the_channel(data: dict[str, Any]) -> None:
    data["routes"][1]["notify"] = [f"slack:{CHANNEL}"]  # contracts.*: not confirmed


@pytest.fixture
async def slack_rig(start_slack: Callable[..., Awaitable[SlackRig]], store: Store) -> SlackRig:
    # payments.*: high risk, confirmed
    return await start_slack(store, confirm=True, configure=_contracts_to_the_channel)


# A pending tool call's Telegram buttons (the confirm route allows no edits; it gives grants).
PENDING = ["Approve", "Reject", "Answer instead", "Allow the same…"]


async def test_slack_approve_carries_a_confirm_dialog_only_on_a_confirm_route(
    slack_rig: SlackRig,
) -> None:
    risky = await slack_rig.create()
    plain = await slack_rig.create(**CONTRACT)
    card = await slack_rig.card_for(risky["id"])
    [approve, allow, reject, answer, delegate] = slack_buttons(card["blocks"])
    assert approve["action_id"] == "signoff_approve"
    confirm = approve["confirm"]
    assert confirm["title"] == {
        "type": "plain_text",
        "text": "Approve this request?",
        "emoji": False,
    }
    assert "Refund €120.00 to Zoë" in confirm["text"]["text"]
    assert f"sha256:{risky['hash'][:12]}" in confirm["text"]["text"]
    assert (confirm["confirm"]["text"], confirm["deny"]["text"]) == ("Approve", "Cancel")
    assert not any("confirm" in button for button in (allow, reject, answer, delegate))
    buttons = slack_buttons((await slack_rig.card_for(plain["id"]))["blocks"])
    assert buttons[0]["action_id"] == "signoff_approve"
    assert all("confirm" not in b for b in buttons)


# -- Telegram: a second keyboard -----------------------------------------------------------------


@pytest.fixture
async def tg_rig(
    start_telegram: Callable[..., Awaitable[TelegramRig]], store: Store
) -> TelegramRig:
    return await start_telegram(store, confirm=True)


def _labels(message: dict[str, Any] | None) -> list[str]:
    assert message is not None
    return [b["text"] for b in telegram_buttons(message)]


async def _confirming(rig: TelegramRig) -> tuple[dict[str, Any], dict[str, Any]]:
    """A request on the confirm route whose Approve Alice has pressed: (record, card now)."""
    record = await rig.create()
    card = await rig.card_for(record["id"])
    assert _labels(card) == PENDING
    assert await rig.click(ALICE, card) == 200
    shown = rig.tg.message(GROUP, card["message_id"])
    assert shown is not None
    return record, shown


async def test_telegram_approve_asks_to_confirm_and_decides_nothing(
    tg_rig: TelegramRig,
) -> None:
    record, shown = await _confirming(tg_rig)
    assert _labels(shown) == ["Confirm approve", "Cancel"]
    for button in telegram_buttons(shown):
        assert len(button["callback_data"].encode()) <= 64
        assert record["hash"][:12] in button["callback_data"]
    answer = tg_rig.tg.calls_to("answerCallbackQuery", ok=True)[-1]
    assert "Confirm approve" in answer.args["text"]
    assert f"sha256:{record['hash'][:12]}" in answer.args["text"]
    assert (await tg_rig.state(record["id"])).state == "pending"
    assert [e.type for e in await tg_rig.events(record["id"])] == ["requested"]


async def test_telegram_confirm_approve_decides(tg_rig: TelegramRig) -> None:
    record, shown = await _confirming(tg_rig)
    assert await tg_rig.click(ALICE, shown, button=0) == 200
    approved = await tg_rig.state(record["id"])
    assert (approved.state, approved.decided_by) == ("approved", "alice")
    assert tg_rig.tg.calls_to("answerCallbackQuery", ok=True)[-1].args["text"] == "Approved."
    await tg_rig.drain()
    final = tg_rig.tg.message(GROUP, shown["message_id"])
    assert _labels(final) == []
    assert final is not None and "Approved by Alice Ng (alice)" in final["text"]


async def test_telegram_cancel_puts_the_buttons_back_and_decides_nothing(
    tg_rig: TelegramRig,
) -> None:
    record, shown = await _confirming(tg_rig)
    assert await tg_rig.click(ALICE, shown, button=1) == 200
    back = tg_rig.tg.message(GROUP, shown["message_id"])
    assert _labels(back) == PENDING
    assert "nothing was decided" in tg_rig.tg.calls_to("answerCallbackQuery")[-1].args["text"]
    assert (await tg_rig.state(record["id"])).state == "pending"
    assert [e.type for e in await tg_rig.events(record["id"])] == ["requested"]
    # Approve again asks again; it is the same card.
    assert await tg_rig.click(ALICE, back) == 200
    assert _labels(tg_rig.tg.message(GROUP, shown["message_id"])) == ["Confirm approve", "Cancel"]


async def test_telegram_approve_from_someone_who_may_not_decide_is_refused_at_once(
    tg_rig: TelegramRig,
) -> None:
    record = await tg_rig.create()
    card = await tg_rig.card_for(record["id"])
    assert await tg_rig.click(ERIN, card) == 200
    assert _labels(tg_rig.tg.message(GROUP, card["message_id"])) == PENDING
    assert tg_rig.tg.calls_to("answerCallbackQuery", ok=True)[-1].args.get("show_alert")
    assert (await tg_rig.state(record["id"])).state == "pending"


async def test_telegram_without_confirm_approve_decides_at_once(
    start_telegram: Callable[..., Awaitable[TelegramRig]], store: Store
) -> None:
    rig = await start_telegram(store, confirm=False)
    record = await rig.create()
    assert await rig.click(ALICE, await rig.card_for(record["id"])) == 200
    assert (await rig.state(record["id"])).state == "approved"


# -- Telegram: a card sent but never recorded ----------------------------------------------------


async def _crash_after_sending(rig: TelegramRig, approval_id: str) -> dict[str, Any]:
    """Post the card, then forget it as a crash between sendMessage and the card_messages
    insert would have: the job is due again and posts a second copy. The first copy."""
    first = await rig.card_for(approval_id)
    async with rig.store.write() as tx:
        await tx.conn.execute(
            delete(card_messages).where(card_messages.c.approval_id == approval_id)
        )
        await tx.conn.execute(
            update(outbox)
            .where(outbox.c.approval_id == approval_id, outbox.c.kind == "post_card")
            .values(state="queued", run_after=rig.clock.now(), done_at=None, attempts=0)
        )
    second = await rig.card_for(approval_id)
    assert second["message_id"] != first["message_id"]
    async with rig.store.read() as tx:
        assert [m.message_id for m in await tx.card_messages_for(approval_id)] == [
            str(second["message_id"])
        ]
    return first


async def _both_show_the_outcome(rig: TelegramRig, approval_id: str, ids: list[int]) -> None:
    await rig.drain()
    async with rig.store.read() as tx:
        recorded = sorted(int(m.message_id) for m in await tx.card_messages_for(approval_id))
    assert recorded == sorted(ids)
    for message_id in ids:
        shown = rig.tg.message(GROUP, message_id)
        assert _labels(shown) == []
        assert shown is not None and "Approved by Alice Ng (alice)" in shown["text"]


@pytest.mark.parametrize("confirm", [False, True])
async def test_a_press_on_the_unrecorded_copy_decides_and_both_copies_follow(
    start_telegram: Callable[..., Awaitable[TelegramRig]], store: Store, confirm: bool
) -> None:
    rig = await start_telegram(store, confirm=confirm)
    record = await rig.create()
    first = await _crash_after_sending(rig, record["id"])
    assert await rig.click(ALICE, first) == 200
    if confirm:
        shown = rig.tg.message(GROUP, first["message_id"])
        assert _labels(shown) == ["Confirm approve", "Cancel"]
        assert await rig.click(ALICE, shown, button=0) == 200  # type: ignore[arg-type]
    approved = await rig.state(record["id"])
    assert (approved.state, approved.decided_by) == ("approved", "alice")
    second = (await rig.card_for(record["id"]))["message_id"]
    await _both_show_the_outcome(rig, record["id"], [first["message_id"], second])


async def test_a_press_on_the_unrecorded_copy_after_the_decision_updates_it(
    start_telegram: Callable[..., Awaitable[TelegramRig]], store: Store
) -> None:
    rig = await start_telegram(store, confirm=False)
    record = await rig.create()
    first = await _crash_after_sending(rig, record["id"])
    second = await rig.card_for(record["id"])
    assert await rig.click(ALICE, second) == 200  # decided on the recorded copy
    await rig.drain()
    assert _labels(rig.tg.message(GROUP, first["message_id"])) == PENDING
    assert await rig.click(ALICE, first) == 200
    answer = rig.tg.calls_to("answerCallbackQuery", ok=True)[-1].args["text"]
    assert "does not match" not in answer
    assert "approved" in answer.casefold()
    await _both_show_the_outcome(rig, record["id"], [first["message_id"], second["message_id"]])


async def test_an_unrecorded_message_with_another_hash_is_still_refused(
    start_telegram: Callable[..., Awaitable[TelegramRig]], store: Store
) -> None:
    rig = await start_telegram(store, confirm=False)
    record = await rig.create()
    first = await _crash_after_sending(rig, record["id"])
    data = telegram_buttons(first)[0]["callback_data"][:-12] + "0" * 12
    assert await rig.click(ALICE, first, data=data) == 200
    answer = rig.tg.calls_to("answerCallbackQuery", ok=True)[-1].args["text"]
    assert "does not match" in answer
    assert (await rig.state(record["id"])).state == "pending"
    async with rig.store.read() as tx:
        assert len(await tx.card_messages_for(record["id"])) == 1
