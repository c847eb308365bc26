"""Slack cards and clicks end to end, in-process: real slack-bolt and slack-sdk code against
the fake Slack Web API (tests/fakes/slack.py), clicks signed exactly as Slack signs them and
sent over real HTTP to signoff's own server, on SQLite and PostgreSQL, with a FakeClock.

Proves: a request becomes a card in the route's channel (short hash, buttons carrying id and
full hash, agent text never markup); an entitled click approves and the card loses its
buttons; reject goes through the modal with a reason; every refused click (second click,
non-approver, unknown Slack user, forged hash, after expiry) gets its own ephemeral text and
an audit event and changes nothing; a click on another server of the same database works;
Slack down or rate limiting delays a card without losing it.

Delegation from Slack is in test_slack_delegation.py; what is checked of a request before Bolt
sees it (signatures, malformed payloads, replays, workspaces) in test_slack_request_checks.py.
"""

from __future__ import annotations

import time

import pytest

from bot.audit import verify
from store.repository import Store
from tests.support.slack_rig import (
    API_KEY,
    CHANNEL,
    SlackRig,
    Start,
    buttons_in,
    texts_in,
)


async def test_a_request_becomes_a_card_with_the_hash_and_its_buttons(rig: SlackRig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    assert card["channel"] == CHANNEL
    assert f"`sha256:{record['hash'][:12]}`" in texts_in(card["blocks"], "mrkdwn")
    buttons = buttons_in(card["blocks"])
    assert [(b["action_id"], b.get("style")) for b in buttons] == [
        ("signoff_approve", "primary"),
        ("signoff_allow", None),
        ("signoff_reject", "danger"),
        ("signoff_answer", None),
        ("signoff_delegate", None),
    ]
    assert {b["value"] for b in buttons} == {f"{record['id']}:{record['hash']}"}
    async with rig.store.read() as tx:
        [message] = await tx.card_messages_for(record["id"])
    assert (message.address, message.message_id, message.shown_hash) == (
        CHANNEL,
        card["ts"],
        record["hash"],
    )


async def test_an_entitled_click_approves_and_the_card_loses_its_buttons(rig: SlackRig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    started = time.monotonic()
    status = await rig.send(rig.slack.click_body("U0ALICE", CHANNEL, card["ts"], "signoff_approve"))
    assert status == 200
    assert time.monotonic() - started < 3  # Slack's ack window
    await rig.settle(record["id"], 2)
    approved = await rig.state(record["id"])
    assert (approved.state, approved.decided_by) == ("approved", "alice")
    await rig.drain()
    [update] = rig.slack.calls_to("chat.update", ok=True)
    assert buttons_in(update.args["blocks"]) == []
    assert any(
        "Approved" in t and "Alice Ng" in t for t in texts_in(update.args["blocks"], "mrkdwn")
    )
    async with rig.store.read() as tx:
        kinds = [j.kind for j in await tx.outbox_jobs(approval_id=record["id"])]
    assert "webhook" in kinds  # the decision webhook is queued with the transition


async def test_reject_asks_for_a_reason_in_a_modal(rig: SlackRig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    await rig.send(rig.slack.click_body("U0BOB", CHANNEL, card["ts"], "signoff_reject"))
    opened = await rig.slack.wait_for("views.open")
    view_id = opened.response["view"]["id"]  # type: ignore[index]
    body = rig.slack.submit_body(view_id, "U0BOB", {"reason": {"reason": "duplicate refund"}})
    assert await rig.send(body) == 200
    await rig.settle(record["id"], 2)
    rejected = await rig.state(record["id"])
    assert (rejected.state, rejected.decided_by, rejected.decision_note) == (
        "rejected",
        "bob",
        "duplicate refund",
    )
    await rig.drain()
    [update] = rig.slack.calls_to("chat.update", ok=True)
    assert "Note: duplicate refund" in texts_in(update.args["blocks"], "plain_text")


_PRINCIPAL = {"U0ERIN": "erin", "U0ALICE": "alice", "U0BOB": "bob"}


@pytest.mark.parametrize(
    ("user", "change", "expected"),
    [
        (
            "U0ERIN",
            None,
            "You are not an approver for this request; it is assigned to group finance",
        ),
        ("U0NOBODY", None, "not linked to a signoff principal"),
        ("U0ALICE", "forge", "This card is out of date"),
        ("U0ALICE", "expire", "This request expired at"),
        ("U0BOB", "decided", "Already approved by Alice Ng at"),
    ],
    ids=["not an approver", "unknown slack user", "forged hash", "after expiry", "second click"],
)
async def test_refused_clicks_say_why_are_audited_and_change_nothing(
    rig: SlackRig, user: str, change: str | None, expected: str
) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    value = None
    if change == "forge":
        value = f"{record['id']}:{'0' * 64}"
    elif change == "expire":
        rig.clock.advance(hours=73)
    elif change == "decided":
        await rig.send(rig.slack.click_body("U0ALICE", CHANNEL, card["ts"], "signoff_approve"))
        await rig.settle(record["id"], 2)
    before = await rig.state(record["id"])
    trail = len(await rig.events(record["id"]))
    body = rig.slack.click_body(user, CHANNEL, card["ts"], "signoff_approve", value=value)
    assert await rig.send(body) == 200
    said = await rig.slack.wait_for("chat.postEphemeral")
    assert said.args["user"] == user and said.args["channel"] == CHANNEL
    assert expected in said.args["text"], said.args["text"]
    # An attempt after the deadline records the expiry first, then the refusal.
    await rig.settle(record["id"], trail + (2 if change == "expire" else 1))
    after = await rig.state(record["id"])
    events = await rig.events(record["id"])
    assert events[-1].type == "refused"
    assert events[-1].actor == f"slack:{_PRINCIPAL.get(user, user)}"
    expected_state = "expired" if change == "expire" else before.state
    assert (after.state, after.decided_by) == (expected_state, before.decided_by)
    assert (await verify(rig.store)).ok


async def test_a_click_on_another_server_of_the_same_database_works(
    start: Start, rig: SlackRig, db_url: str
) -> None:
    other_store = Store.from_url(db_url)
    try:
        other = await start(other_store)
        record = await rig.create()
        card = await rig.card_for(record["id"])
        body = rig.slack.click_body("U0ALICE", CHANNEL, card["ts"], "signoff_approve")
        assert await other.send(body) == 200
        await rig.settle(record["id"], 2)
        assert (await rig.state(record["id"])).state == "approved"
    finally:
        await other_store.close()


async def test_model_chosen_text_never_reaches_slack_as_markup(rig: SlackRig) -> None:
    nasty = "<!channel> <@U0ALICE> <https://evil.example|click here> *bold* & more"
    record = await rig.create(
        reason=nasty,
        tool={"name": "stripe.refunds.create", "arguments": {"memo": nasty}},
        presentation={"title": f"Refund {nasty}", "fields": [{"label": nasty, "value": nasty}]},
    )
    card = await rig.card_for(record["id"])
    for text in [*texts_in(card["blocks"], "mrkdwn"), card["text"]]:
        assert "<!channel>" not in text and "<@U0ALICE>" not in text and "<https://" not in text
    plain = " ".join(texts_in(card["blocks"], "plain_text"))
    assert nasty in plain  # shown literally, as plain text Slack does not parse
    assert "&lt;!channel&gt;" in card["text"]


async def test_slack_down_or_rate_limiting_delays_the_card_without_losing_it(rig: SlackRig) -> None:
    rig.slack.fail_next("chat.postMessage", times=2, status=500)
    record = await rig.create()
    assert await rig.runner.run_once() == 1
    async with rig.store.read() as tx:
        [job] = await tx.outbox_jobs(approval_id=record["id"])
    assert job.state == "queued" and job.attempts == 1
    assert (await rig.state(record["id"])).state == "pending"  # the approval was never at risk
    rig.clock.advance(minutes=1)
    await rig.runner.run_once()
    rig.slack.rate_limit_next("chat.postMessage", retry_after=30)
    rig.clock.advance(minutes=1)
    await rig.runner.run_once()
    async with rig.store.read() as tx:
        [job] = await tx.outbox_jobs(approval_id=record["id"])
    assert (job.run_after - rig.clock.now()).total_seconds() >= 30  # Retry-After honoured
    rig.clock.advance(minutes=1)
    card = await rig.card_for(record["id"])
    assert card["channel"] == CHANNEL


async def test_a_huge_request_still_makes_a_card_slack_accepts(rig: SlackRig) -> None:
    fields = [{"label": f"Line {i}", "value": "x" * 1000} for i in range(200)]
    record = await rig.create(
        presentation={"title": "T" * 300, "summary": "s" * 4000, "fields": fields},
        reason="r" * 4000,
    )
    card = await rig.card_for(record["id"])
    blocks = card["blocks"]
    assert len(blocks) <= 50
    assert len(blocks[0]["text"]["text"]) <= 150
    for text in texts_in(blocks, "plain_text"):
        assert len(text) <= 2000
    assert all(len(b.get("fields", [])) <= 10 for b in blocks)
    more = f"… and 170 more fields; every one is in `signoff approvals show {record['id']}`"
    assert more in texts_in(blocks, "plain_text")


# -- what a human sees when things go wrong or happen later ----------------------------------


async def test_a_failure_after_the_ack_is_told_not_left_silent(rig: SlackRig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    rig.slack.fail_next("views.open", status=500)
    assert (
        await rig.send(rig.slack.click_body("U0BOB", CHANNEL, card["ts"], "signoff_reject")) == 200
    )
    said = await rig.slack.wait_for("chat.postEphemeral")
    assert "nothing was decided" in said.args["text"]
    assert (await rig.state(record["id"])).state == "pending"


async def test_reject_by_a_non_approver_is_refused_before_the_dialog(rig: SlackRig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    await rig.send(rig.slack.click_body("U0ERIN", CHANNEL, card["ts"], "signoff_reject"))
    said = await rig.slack.wait_for("chat.postEphemeral")
    assert "You are not an approver" in said.args["text"]
    assert rig.slack.calls_to("views.open") == []
    assert (await rig.events(record["id"]))[-1].type == "refused"


async def test_a_later_transition_keeps_who_approved_and_says_what_followed(rig: SlackRig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    await rig.send(rig.slack.click_body("U0ALICE", CHANNEL, card["ts"], "signoff_approve"))
    await rig.settle(record["id"], 2)
    rig.clock.advance(hours=5)
    async with rig.http.post(
        f"{rig.url}/v1/approvals/{record['id']}/supersede",
        json={"reason": "balance changed"},
        headers={"Authorization": f"Bearer {API_KEY}"},
    ) as response:
        assert response.status == 200
    await rig.drain()
    text = " ".join(
        texts_in(rig.slack.calls_to("chat.update", ok=True)[-1].args["blocks"], "mrkdwn")
    )
    assert "*Approved* by Alice Ng (alice) at 2026-01-05 09:00 UTC" in text
    assert "*Superseded* before it ran" in text
    assert "Note: balance changed" in " ".join(
        texts_in(rig.slack.calls_to("chat.update", ok=True)[-1].args["blocks"], "plain_text")
    )


async def test_arguments_that_do_not_fit_are_counted_not_dropped(rig: SlackRig) -> None:
    arguments = {f"arg{i:02}": "v" * 150 for i in range(30)}
    record = await rig.create(tool={"name": "bulk.update", "arguments": arguments})
    card = await rig.card_for(record["id"])
    [shown] = [t for t in texts_in(card["blocks"], "plain_text") if t.startswith("Arguments")]
    listed = shown.count(" = ")
    assert 0 < listed < 30
    assert f"… and {30 - listed} more arguments" in shown
    assert f"signoff approvals show {record['id']}" in shown


async def test_clicks_work_when_auth_test_fails_and_without_a_trailing_slash(
    start: Start, store: Store
) -> None:
    rig = await start(store, trailing_slash=False)
    record = await rig.create()
    card = await rig.card_for(record["id"])  # posted through the slash-less URL
    rig.slack.fail_next("auth.test", status=500, times=5)
    body = rig.slack.click_body("U0ALICE", CHANNEL, card["ts"], "signoff_approve")
    assert await rig.send(body) == 200
    await rig.settle(record["id"], 2)
    assert (await rig.state(record["id"])).state == "approved"
