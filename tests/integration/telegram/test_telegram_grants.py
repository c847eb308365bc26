"""Standing grants from Telegram, in-process: real python-telegram-bot against the fake Bot
API (tests/fakes/telegram/), on SQLite and PostgreSQL, with a FakeClock.

Proves: "Allow the same…" is on a card only where its route offers a grant (not on a
`grants = false` route, a quorum route or a question); its keyboards ask how later calls must
match (exactly these arguments, amounts up to these, any arguments), then for how long, and
only the last press approves, with a grant of exactly the chosen conditions; a later create
inside them is approved by the grant and its Telegram card says so, one outside them waits;
someone not entitled, a request decided meanwhile and a made-up choice decide nothing and
give no grant; `/grants` lists the grant with a Revoke button that ends it (and only for its
giver); every callback_data fits Telegram's 64 bytes; set-webhook sets the command list.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest

from bot.audit import verify
from channels.telegram.config import TelegramConfig
from channels.telegram.setup import set_webhook
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

ALLOW = "Allow the same…"
PENDING = ["Approve", "Reject", "Answer instead", ALLOW]


def _call(amount: int, charge: str = "ch_1") -> dict[str, Any]:
    return {"name": "stripe.refunds.create", "arguments": {"charge": charge, "amount": amount}}


class Rig(TelegramRig):
    def answered(self) -> dict[str, Any]:
        """The last callback answer: what the presser was told."""
        return dict(self.tg.calls_to("answerCallbackQuery", ok=True)[-1].args)

    async def press(self, who: dict[str, Any], card: dict[str, Any], label: str) -> None:
        """Press the button labelled so on the message as it stands now."""
        shown = self.tg.message(card["chat"]["id"], card["message_id"])
        assert shown is not None
        [data] = [b["callback_data"] for b in buttons_in(shown) if b["text"] == label]
        assert await self.click(who, shown, data=data) == 200

    def labels(self, card: dict[str, Any]) -> list[str]:
        shown = self.tg.message(card["chat"]["id"], card["message_id"])
        assert shown is not None
        return [b["text"] for b in buttons_in(shown)]

    async def grants(self) -> list[Any]:
        async with self.store.read() as tx:
            return list(await tx.list_standing_grants())

    async def command(self, who: dict[str, Any], text: str) -> dict[str, Any]:
        """Send a command in the person's private chat; the bot's answer as it stands."""
        update = fake.text_message(
            next(update_ids),
            chat=fake.private_chat(who),
            from_user=who,
            text=text,
            message_id=next(update_ids),
        )
        assert await self.send(update) == 200
        sent = self.tg.calls_to("sendMessage", ok=True)[-1].response["result"]  # type: ignore[index]
        found = self.tg.message(who["id"], sent["message_id"])
        assert found is not None
        return found

    def every_callback_data(self) -> list[str]:
        """Every callback_data the bot ever sent, on new messages and on edits."""
        found = []
        for method in ("sendMessage", "editMessageText", "editMessageReplyMarkup"):
            for call in self.tg.calls_to(method, ok=True):
                markup = call.args.get("reply_markup") or {}
                for row in markup.get("inline_keyboard", []):
                    found += [b["callback_data"] for b in row if "callback_data" in b]
        return found


def _contracts_without_grants(data: dict[str, Any]) -> None:
    data["routes"][1]["notify"] = [f"telegram:{GROUP}"]  # contracts.*: alice, sam
    data["routes"][1]["grants"] = False


@pytest.fixture
async def rig(start: Start, store: Store) -> Rig:
    return await start(store, kind=Rig, configure=_contracts_without_grants)


async def _allow(rig: Rig, card: dict[str, Any], bind: str, lifetime: str) -> None:
    """Alice's three presses: Allow the same…, how the arguments bind, how long."""
    await rig.press(ALICE, card, ALLOW)
    await rig.press(ALICE, card, bind)
    await rig.press(ALICE, card, lifetime)


async def test_the_button_is_only_where_the_route_offers_a_grant(rig: Rig) -> None:
    refund = await rig.create()
    assert rig.labels(await rig.card_for(refund["id"])) == PENDING
    contract = await rig.create(capability="contracts.sign", run_id="run-contract")
    quorum = await rig.create(capability="quorum.move", run_id="run-quorum")
    question = await rig.create(
        kind="question",
        capability="payments.question",
        question={"options": ["Yes", "No"]},
        tool=None,
        run_id="run-question",
    )
    for record in (contract, quorum, question):
        assert ALLOW not in rig.labels(await rig.card_for(record["id"]))
    # A made-up "Allow the same…" on the grants = false card decides nothing.
    card = await rig.card_for(contract["id"])
    data = f"s1:g:{contract['id'].replace('-', '')}:{contract['hash'][:12]}"
    assert await rig.click(ALICE, card, data=data) == 200
    assert "gives no standing grant" in rig.answered()["text"]
    assert (await rig.state(contract["id"])).state == "pending"
    assert await rig.grants() == []


async def test_the_choices_approve_with_a_grant_that_approves_later_calls(rig: Rig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    await rig.press(ALICE, card, ALLOW)
    assert rig.labels(card) == [
        "Exactly these arguments",
        "Amounts up to these",
        "Any arguments",
        "Cancel",
    ]
    assert "amount at most as here" in rig.answered()["text"]
    assert (await rig.state(record["id"])).state == "pending"
    await rig.press(ALICE, card, "Amounts up to these")
    assert rig.labels(card) == [
        "Approve, 1 h",
        "Approve, 1 h in this run",
        "Approve, 8 h",
        "Approve, 8 h in this run",
        "Cancel",
    ]
    assert (await rig.state(record["id"])).state == "pending"
    await rig.press(ALICE, card, "Approve, 8 h")
    said = rig.answered()["text"]
    assert said.startswith("Approved.") and "/grants" in said
    approved = await rig.state(record["id"])
    assert (approved.state, approved.decided_by) == ("approved", "alice")
    [grant] = await rig.grants()
    assert (grant.granted_by, grant.approval_id, grant.run_id) == ("alice", record["id"], None)
    assert grant.expires_at == rig.clock.now() + timedelta(hours=8)
    assert grant.conditions == {
        "all": [
            {"arg": "charge", "op": "==", "value": "ch_1"},
            {"arg": "amount", "op": "<=", "value": 12000},
        ]
    }
    await rig.drain()
    decided = rig.tg.message(GROUP, card["message_id"])
    assert decided is not None and buttons_in(decided) == []
    assert "Approved by Alice Ng" in decided["text"]

    # A smaller refund of the same charge in another run: approved at once, by the grant.
    covered = await rig.create(run_id="run-2", tool=_call(5000))
    assert covered["state"] == "approved" and covered["approved_by_grant"]
    covered_card = await rig.card_for(covered["id"])
    assert buttons_in(covered_card) == []
    assert "by a standing grant of Alice Ng" in covered_card["text"]
    # More than the grant allows, or another charge: a person decides.
    for run, call in (("run-3", _call(20000)), ("run-4", _call(5000, "ch_2"))):
        outside = await rig.create(run_id=run, tool=call)
        assert outside["state"] == "pending"
        assert rig.labels(await rig.card_for(outside["id"])) == PENDING
    assert all(len(data.encode()) <= 64 for data in rig.every_callback_data())
    assert (await verify(rig.store)).ok


async def test_exactly_these_arguments_in_this_run_only(rig: Rig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    await _allow(rig, card, "Exactly these arguments", "Approve, 1 h in this run")
    [grant] = await rig.grants()
    assert grant.run_id == "run-1"
    assert grant.expires_at == rig.clock.now() + timedelta(hours=1)
    assert [p["op"] for p in grant.conditions["all"]] == ["==", "=="]
    # The same call under another title (another request) in this run: approved.
    same = await rig.create(presentation={"title": "Refund again"})
    assert same["state"] == "approved" and same["approved_by_grant"]
    # Another run, or a smaller amount: not exactly this.
    assert (await rig.create(run_id="run-2"))["state"] == "pending"
    assert (await rig.create(tool=_call(100)))["state"] == "pending"


async def test_any_arguments(rig: Rig) -> None:
    record = await rig.create()
    await _allow(rig, await rig.card_for(record["id"]), "Any arguments", "Approve, 8 h")
    [grant] = await rig.grants()
    assert grant.conditions is None
    assert (await rig.create(run_id="run-2", tool=_call(99_000, "ch_9")))["state"] == "approved"
    rig.clock.advance(hours=8, seconds=1)
    assert (await rig.create(run_id="run-3"))["state"] == "pending"


@pytest.mark.parametrize("who", [ERIN, STRANGER], ids=["not an approver", "not linked"])
async def test_someone_not_entitled_decides_nothing_and_gives_no_grant(
    rig: Rig, who: dict[str, Any]
) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    await rig.press(who, card, ALLOW)
    answer = rig.answered()
    assert answer["show_alert"] is True
    assert ("not an approver" if who is ERIN else "not linked") in answer["text"]
    assert rig.labels(card) == PENDING  # no choices for them
    # Alice's choices on the group card: pressing the last one is no use to them either.
    await rig.press(ALICE, card, ALLOW)
    await rig.press(ALICE, card, "Any arguments")
    await rig.press(who, card, "Approve, 8 h")
    assert rig.answered()["show_alert"] is True
    assert (await rig.state(record["id"])).state == "pending"
    assert await rig.grants() == []
    events = await rig.events(record["id"])
    assert events[-1].type == "refused" and events[-1].data["action"] == "allow"
    principal = "erin" if who is ERIN else str(STRANGER["id"])
    assert events[-1].actor == f"telegram:{principal}"
    # Alice can still finish what she chose.
    await rig.press(ALICE, card, "Approve, 8 h")
    assert (await rig.state(record["id"])).state == "approved"
    assert len(await rig.grants()) == 1


async def test_a_request_decided_meanwhile_or_a_made_up_choice_gives_nothing(rig: Rig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    await rig.press(ALICE, card, ALLOW)
    await rig.press(ALICE, card, "Exactly these arguments")
    shown = rig.tg.message(GROUP, card["message_id"])
    assert shown is not None
    eight = next(b["callback_data"] for b in buttons_in(shown) if b["text"] == "Approve, 8 h")
    # A lifetime no button offered (three days, longer than the route allows): nothing.
    made_up = re.sub(r":ge\d+:", f":ge{3 * 86400}:", eight)
    assert await rig.click(ALICE, shown, data=made_up) == 200
    assert "not offered" in rig.answered()["text"]
    assert rig.labels(card) == PENDING  # the card's own buttons are back
    assert (await rig.state(record["id"])).state == "pending"
    # Cancel puts them back too.
    await rig.press(ALICE, card, ALLOW)
    await rig.press(ALICE, card, "Cancel")
    assert rig.labels(card) == PENDING
    # Bob approves while Alice is choosing: her last press is refused, no grant.
    await rig.press(ALICE, card, ALLOW)
    await rig.press(ALICE, card, "Any arguments")
    assert rig.labels(card)[2] == "Approve, 8 h"
    assert await rig.click(BOB, card, button=0) == 200  # the card as first sent: Approve
    await rig.press(ALICE, card, "Approve, 8 h")  # hers, on the card as it still stands
    assert "Already approved by Bob Stone" in rig.answered()["text"]
    assert (await rig.state(record["id"])).decided_by == "bob"
    assert await rig.grants() == []


async def test_grants_lists_and_revoke_ends_it(rig: Rig) -> None:
    record = await rig.create()
    await _allow(rig, await rig.card_for(record["id"]), "Amounts up to these", "Approve, 8 h")
    listed = await rig.command(ALICE, "/grants")
    assert "Standing grants Alice Ng may revoke (1):" in listed["text"]
    assert "1. acme/payments.refund stripe.refunds.create where charge == 'ch_1'" in listed["text"]
    assert "amount <= 12000, given by alice" in listed["text"]
    assert [b["text"] for b in buttons_in(listed)] == ["Revoke 1"]
    # Bob gave none and is no operator: his list is empty, and Alice's Revoke is not his.
    assert (
        "No live standing grants that Bob Stone may revoke"
        in (await rig.command(BOB, "/grants"))["text"]
    )
    assert await rig.click(BOB, listed) == 200
    assert "only alice, who gave it, or an operator" in rig.answered()["text"]
    assert "not linked" in (await rig.command(STRANGER, "/grants"))["text"]
    [grant] = await rig.grants()
    assert grant.revoked_at is None

    assert await rig.click(ALICE, listed) == 200
    assert rig.answered()["text"].startswith("Revoked: acme/payments.refund")
    [grant] = await rig.grants()
    assert (grant.revoked_at, grant.revoked_by) == (rig.clock.now(), "alice")
    edited = rig.tg.message(ALICE["id"], listed["message_id"])
    assert edited is not None and buttons_in(edited) == []
    assert "No live standing grants" in edited["text"]
    trail = await rig.events(record["id"])
    assert (trail[-1].type, trail[-1].actor) == ("grant_revoked", "telegram:alice")
    # A second press on the old list: already revoked, said.
    assert await rig.click(ALICE, listed) == 200
    assert "revoked already" in rig.answered()["text"]
    # What the grant covered waits for a person now.
    assert (await rig.create(run_id="run-2", tool=_call(5000)))["state"] == "pending"
    assert all(len(data.encode()) <= 64 for data in rig.every_callback_data())


async def test_help_and_the_command_list_name_grants(rig: Rig) -> None:
    assert "/grants" in (await rig.command(ALICE, "/help"))["text"]
    await set_webhook(
        TelegramConfig(api_base_url=rig.tg.base_url), "https://signoff.example.com/telegram/webhook"
    )
    commands = [c["command"] for c in rig.tg.commands()]
    assert "grants" in commands and "help" in commands
