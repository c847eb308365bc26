"""Slack end to end, in-process: real slack-bolt and slack-sdk code against the fake Slack
Web API (tests/fakes/slack.py), clicks signed exactly as Slack signs them and sent over real
HTTP to signoff's own server, on SQLite and PostgreSQL, with a FakeClock.

Proves: a request becomes a card in the route's channel (short hash, buttons carrying id and
full hash, agent text never markup); an entitled click approves and the card loses its
buttons; reject goes through the modal with a reason; every refused click (second click,
non-approver, unknown Slack user, forged hash, after expiry) gets its own ephemeral text and
an audit event and changes nothing; bad signatures and stale timestamps are 401 and change
nothing; a click on another server of the same database works; Slack down or rate limiting
delays a card without losing it.

Delegation from Slack: "Delegate…" on a card opens a modal (after the same refusal checks as
Reject) whose user picker hands the request to that person's principal, and the card says so;
picking someone who is not linked keeps the modal open with an error. The `/signoff` slash
command creates, lists and revokes standing delegations for the caller, answering in its own
response, with clear refusals (a circle, someone else's delegation, an unlinked user).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

import pytest
import sqlalchemy

from bot.audit import verify
from bot.clock import FakeClock
from bot.config import parse_config
from bot.outbox import jobs
from store.repository import Store
from tests.fakes.slack import FakeSlack
from tests.fakes.slack_inbound import sign, slash_command_body, users_select
from tests.support.chat_server import serve
from tests.support.slack_rig import (
    API_KEY,
    CHANNEL,
    SECRET,
    SlackRig,
    buttons_in,
    slack_config,
    texts_in,
)

Start = Callable[..., Awaitable[SlackRig]]


@pytest.fixture
async def start(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Start]:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-test")
    monkeypatch.setenv("SLACK_SIGNING_SECRET", SECRET)
    monkeypatch.setenv("SLACK_TEST_API_KEY", API_KEY)
    cleanup: list[Callable[[], Awaitable[None]]] = []
    async with FakeSlack() as slack:

        async def one(
            store: Store, *, trailing_slash: bool = True, team_id: str | None = None
        ) -> SlackRig:
            data = slack_config(slack)
            if not trailing_slash:  # as an operator might write it
                data["slack"]["api_base_url"] = slack.base_url.rstrip("/")
            if team_id is not None:
                data["slack"]["team_id"] = team_id
            config = parse_config(data)
            return await serve(SlackRig, config, store, clock, API_KEY, cleanup, slack=slack)

        yield one
        for close in reversed(cleanup):
            await close()


@pytest.fixture
async def rig(start: Start, store: Store) -> SlackRig:
    return await start(store)


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


@pytest.mark.parametrize("problem", ["bad signature", "six minutes old", "no headers"])
async def test_badly_signed_requests_are_401_and_change_nothing(
    rig: SlackRig, problem: str
) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    body = rig.slack.click_body("U0ALICE", CHANNEL, card["ts"], "signoff_approve")
    if problem == "bad signature":
        headers = sign("not-the-secret", body)
    elif problem == "six minutes old":
        headers = sign(SECRET, body, int(time.time()) - 360)
    else:
        headers = {}
    assert await rig.send(body, headers) == 401
    await asyncio.sleep(0.2)  # a wrongly accepted click would have decided by now
    assert (await rig.state(record["id"])).state == "pending"
    assert len(await rig.events(record["id"])) == 1
    assert rig.slack.calls_to("chat.postEphemeral") == []


async def test_slacks_ssl_check_is_answered_200_and_nothing_else_rides_on_it(
    rig: SlackRig,
) -> None:
    record = await rig.create()
    ssl_check = b"ssl_check=1&token=verification-token"
    seen = await _deliveries_recorded(rig)
    # Slack's periodic check, as it sends it: signed or not, answered 200, nothing recorded.
    assert await rig.send(ssl_check, {}) == 200
    assert await rig.send(ssl_check) == 200
    assert await _deliveries_recorded(rig) == seen
    # A click cannot pass as one: with a payload or a command beside it, the signature counts.
    card = await rig.card_for(record["id"])
    click = rig.slack.click_body("U0ALICE", CHANNEL, card["ts"], "signoff_approve")
    assert await rig.send(click + b"&ssl_check=1", {}) == 401
    command = slash_command_body("U0ALICE", "delegations", channel_id=CHANNEL)
    assert await rig.send(command + b"&ssl_check=1", {}) == 401
    await asyncio.sleep(0.2)
    assert (await rig.state(record["id"])).state == "pending"


async def _deliveries_recorded(rig: SlackRig) -> int:
    async with rig.store.engine.connect() as conn:
        counted = await conn.execute(sqlalchemy.text("SELECT count(*) FROM inbound_deliveries"))
        return int(counted.scalar_one())


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


# -- delegation: "Delegate…" on a card, and the /signoff command ---------------------------------


async def _open_delegate_modal(rig: SlackRig, user: str, ts: str) -> str:
    """`user` clicks Delegate… on the card at `ts`; the id of the modal it opened."""
    assert await rig.send(rig.slack.click_body(user, CHANNEL, ts, "signoff_delegate")) == 200
    opened = await rig.slack.wait_for("views.open")
    assert opened.args["view"]["callback_id"] == "signoff_delegate_modal"
    return str(opened.response["view"]["id"])  # type: ignore[index]


def _hand_to(rig: SlackRig, view_id: str, user: str, to: str, note: str | None = None) -> bytes:
    values: dict[str, Any] = {"delegate_to": {"delegate_to": users_select(to)}}
    if note is not None:
        values["note"] = {"note": note}
    return rig.slack.submit_body(view_id, user, values)


async def test_delegate_hands_the_request_over_and_the_card_says_to_whom(rig: SlackRig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    view_id = await _open_delegate_modal(rig, "U0ALICE", card["ts"])
    [picker] = [
        b
        for b in rig.slack.view(view_id)["blocks"]  # type: ignore[index]
        if b["block_id"] == "delegate_to"
    ]
    assert picker["element"]["type"] == "users_select"
    assert picker["label"]["text"] == "Hand this request to"

    body = _hand_to(rig, view_id, "U0ALICE", "U0CAROL", "  she owns refunds this week ")
    assert await rig.answer(body) == ""  # a plain ack: the modal closes
    await rig.settle(record["id"], 2)
    handed = await rig.state(record["id"])
    assert (handed.state, handed.assignee) == ("pending", "carol")
    event = (await rig.events(record["id"]))[-1]
    assert (event.type, event.actor) == ("delegated", "slack:alice")
    assert event.data == {
        "state": "pending",
        "from": "group:finance",
        "to": "carol",
        "note": "she owns refunds this week",
    }
    said = await rig.slack.wait_for("chat.postEphemeral")
    assert (said.args["user"], said.args["text"]) == ("U0ALICE", "Handed to Carol Diaz.")

    await rig.drain()
    [update] = rig.slack.calls_to("chat.update", ok=True)
    assert update.args["ts"] == card["ts"]
    assert "Assigned to Carol Diaz (carol) (handed over by Alice Ng)" in texts_in(
        update.args["blocks"], "plain_text"
    )
    assert len(buttons_in(update.args["blocks"])) == 5  # still pending: still decidable
    # Carol gets the card in her direct messages too.
    assert [c.args["channel"] for c in rig.slack.calls_to("chat.postMessage", ok=True)] == [
        CHANNEL,
        "DU0CAROL",
    ]
    assert (await verify(rig.store)).ok


async def test_delegate_by_a_non_approver_is_refused_before_the_modal(rig: SlackRig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    await rig.send(rig.slack.click_body("U0ERIN", CHANNEL, card["ts"], "signoff_delegate"))
    said = await rig.slack.wait_for("chat.postEphemeral")
    assert said.args["user"] == "U0ERIN"
    assert "You are not an approver for this request" in said.args["text"]
    await rig.settle(record["id"], 2)
    assert rig.slack.calls_to("views.open") == []
    refused = (await rig.events(record["id"]))[-1]
    assert (refused.type, refused.actor, refused.data["action"]) == (
        "refused",
        "slack:erin",
        "delegate",
    )
    assert (await rig.state(record["id"])).assignee == "group:finance"


async def test_picking_someone_not_linked_keeps_the_modal_open_and_changes_nothing(
    rig: SlackRig,
) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    view_id = await _open_delegate_modal(rig, "U0ALICE", card["ts"])
    answer = json.loads(await rig.answer(_hand_to(rig, view_id, "U0ALICE", "U0NOBODY")))
    assert answer["response_action"] == "errors"
    assert "not linked to a signoff principal" in answer["errors"]["delegate_to"]
    assert 'slack = "U0NOBODY"' in answer["errors"]["delegate_to"]
    await asyncio.sleep(0.2)  # a wrongly accepted hand-off would have been written by now
    assert (await rig.state(record["id"])).assignee == "group:finance"
    assert len(await rig.events(record["id"])) == 1
    assert rig.slack.calls_to("chat.postEphemeral") == []


async def test_a_hand_off_after_someone_decided_is_refused_and_audited(rig: SlackRig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    view_id = await _open_delegate_modal(rig, "U0ALICE", card["ts"])
    await rig.send(rig.slack.click_body("U0BOB", CHANNEL, card["ts"], "signoff_approve"))
    await rig.settle(record["id"], 2)
    await rig.send(_hand_to(rig, view_id, "U0ALICE", "U0CAROL"))
    said = await rig.slack.wait_for("chat.postEphemeral")
    assert said.args["text"].startswith("Already approved by Bob Stone at")
    await rig.settle(record["id"], 3)
    refused = (await rig.events(record["id"]))[-1]
    assert (refused.type, refused.actor, refused.data["action"]) == (
        "refused",
        "slack:alice",
        "delegate",
    )
    after = await rig.state(record["id"])
    assert (after.state, after.assignee) == ("approved", "group:finance")


@pytest.mark.parametrize("bob", ["<@U0BOB|bob>", "<@U0BOB>", "@bob", "bob"])
async def test_slash_delegate_creates_a_delegation(rig: SlackRig, bob: str) -> None:
    said = await rig.command("U0ALICE", f"delegate {bob} until 2026-12-24 payments.*")
    [made] = await rig.delegations()
    assert (made.principal, made.delegate, made.scope, made.created_by) == (
        "alice",
        "bob",
        "payments.*",
        "slack:alice",
    )
    assert made.ends_at == datetime(2026, 12, 24, tzinfo=UTC)
    assert made.starts_at == rig.clock.now()
    assert said == (
        "Delegated: Bob Stone decides for Alice Ng (payments.*) until 2026-12-24 00:00 UTC. "
        f"To end it early: `/signoff revoke {made.id}`"
    )


async def test_slash_delegate_refuses_a_circle_and_says_why(rig: SlackRig) -> None:
    await rig.command("U0BOB", "delegate alice")
    said = await rig.command("U0ALICE", "delegate <@U0BOB|bob> until 2026-12-24")
    assert "would make a circle (alice -&gt; bob -&gt; alice)" in said  # escaped for mrkdwn
    assert [(d.principal, d.delegate) for d in await rig.delegations()] == [("bob", "alice")]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("delegate <@U0NOBODY|nobody>", "That Slack user (U0NOBODY) is not linked"),
        ("delegate zed", "unknown principal 'zed'"),
        ("delegate alice", "alice cannot delegate to themselves"),
        ("delegate bob until someday", "invalid time 'someday'"),
        ("delegate bob until 2025-01-01", "before it starts or is already over"),
        ("delegate", "whom to?"),
    ],
)
async def test_slash_delegate_mistakes_are_answered_not_raised(
    rig: SlackRig, text: str, expected: str
) -> None:
    said = await rig.command("U0ALICE", text)
    assert expected in said, said
    assert "Traceback" not in said
    assert await rig.delegations() == []


async def test_slash_delegations_lists_and_revoke_revokes(rig: SlackRig) -> None:
    assert await rig.command("U0ALICE", "delegations") == (
        "No active or scheduled delegations for you."
    )
    await rig.command("U0ALICE", "delegate bob until 2026-12-24 payments.*")
    [made] = await rig.delegations()
    line = f"`{made.id}`: Bob Stone decides for Alice Ng (payments.*) until 2026-12-24 00:00 UTC"
    assert await rig.command("U0ALICE", "delegations") == line
    assert await rig.command("U0BOB", "delegations") == line  # the delegate sees it too
    assert "No active" in await rig.command("U0ERIN", "delegations")

    # Only the one who delegated may revoke.
    refused = await rig.command("U0BOB", f"revoke {made.id}")
    assert refused.startswith(f"You have no delegation {made.id} to revoke")
    assert await rig.delegations() == [made]

    assert await rig.command("U0ALICE", f"revoke {made.id}") == (
        "Revoked: Bob Stone decides for Alice Ng (payments.*) until 2026-12-24 00:00 UTC."
    )
    assert await rig.delegations() == []
    async with rig.store.read() as tx:
        revoked = await tx.get_delegation(made.id)
    assert revoked is not None and revoked.revoked_by == "slack:alice"
    again = await rig.command("U0ALICE", f"revoke {made.id}")
    assert again.startswith(f"You have no delegation {made.id} to revoke")


async def test_slash_command_from_an_unlinked_user_or_without_a_verb(rig: SlackRig) -> None:
    said = await rig.command("U0NOBODY", "delegate bob")
    assert "Your Slack account (U0NOBODY) is not linked to a signoff principal" in said
    assert await rig.delegations() == []
    for text in ("", "help", "please delegate"):
        usage = await rig.command("U0ALICE", text)
        assert usage.startswith("/signoff delegate NAME [from WHEN] [until WHEN] [SCOPE]")
        assert "/signoff revoke ID" in usage


async def test_a_badly_signed_command_is_401_and_does_nothing(rig: SlackRig) -> None:
    body = slash_command_body("U0ALICE", "delegate bob", channel_id=CHANNEL)
    assert await rig.send(body, sign("not-the-secret", body)) == 401
    assert await rig.delegations() == []


async def test_a_notice_reaches_the_principal_in_their_direct_messages(rig: SlackRig) -> None:
    """Delegation start and end notices: plain text, escaped, to each person's DM."""
    async with rig.store.write() as tx:
        await jobs.enqueue_notice(
            tx, rig.directory, "alice", "Delegation started: <!channel> & co", rig.clock.now(), "t"
        )
    await rig.drain()
    [opened] = rig.slack.calls_to("conversations.open", ok=True)
    assert opened.args["users"] == "U0ALICE"
    [posted] = rig.slack.calls_to("chat.postMessage", ok=True)
    assert posted.args["channel"] == opened.response["channel"]["id"]  # type: ignore[index]
    assert posted.args["text"] == "Delegation started: &lt;!channel&gt; &amp; co"


# -- what is checked before Bolt sees a request --------------------------------------------


@pytest.mark.parametrize(
    "body",
    [b"payload=%7Bnot-json", b"payload=%5B%5D", b"payload=" + b"%5B" * 5000, b"\xff\xfe"],
    ids=["not json", "a list", "5000 brackets", "not utf-8"],
)
async def test_unsigned_garbage_is_401_without_a_traceback(
    rig: SlackRig, body: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    for headers in ({}, {"X-Slack-Request-Timestamp": "abc", "X-Slack-Signature": "v0=1"}):
        assert await rig.send(body, headers) == 401
    stale = sign(SECRET, body, timestamp=int(time.time()) - 600)
    assert await rig.send(body, stale) == 401
    assert not [r for r in caplog.records if r.exc_info or r.levelname == "ERROR"]


@pytest.mark.parametrize(
    "payload",
    [
        "{not json",
        "[]",
        '{"type": "block_actions", "actions": [{"value": "x"}]}',
        '{"type": "block_actions", "user": {"id": "U0ALICE"}, "actions": []}',
        '{"type": "block_actions", "user": {"id": "U0ALICE"}, "channel": "C0", "actions": [{}]}',
    ],
    ids=["not json", "a list", "no user", "no actions", "channel as a string"],
)
async def test_signed_but_malformed_payloads_are_400(
    rig: SlackRig, payload: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert await rig.send(f"payload={quote(payload)}".encode()) == 400
    assert not [r for r in caplog.records if r.exc_info or r.levelname == "ERROR"]


async def test_a_replayed_click_is_answered_and_does_nothing_again(rig: SlackRig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    click = rig.slack.click_body("U0ERIN", CHANNEL, card["ts"], "signoff_approve")  # refused
    headers = {"Content-Type": "application/x-www-form-urlencoded", **sign(SECRET, click)}
    assert await rig.send(click, headers) == 200
    await rig.settle(record["id"], 2)
    told = len(rig.slack.calls_to("chat.postEphemeral"))
    for _ in range(5):
        assert await rig.send(click, headers) == 200
    await asyncio.sleep(0.1)
    assert [e.type for e in await rig.events(record["id"])] == ["requested", "refused"]
    assert len(rig.slack.calls_to("chat.postEphemeral")) == told


async def test_a_click_from_another_workspace_is_refused(start: Start, store: Store) -> None:
    rig = await start(store, team_id="T0OTHER")
    record = await rig.create()
    card = await rig.card_for(record["id"])
    click = rig.slack.click_body("U0ALICE", CHANNEL, card["ts"], "signoff_approve")  # team T1
    assert await rig.send(click) == 403
    assert (await rig.state(record["id"])).state == "pending"


def _without_workspace(click: bytes, **extra: Any) -> bytes:
    """A click body as `click`, but naming no workspace at all (no team, no user.team_id, no
    team_id), and with `extra` set in its payload."""
    payload = json.loads(parse_qs(click.decode())["payload"][0])
    payload.pop("team", None)
    payload.pop("team_id", None)
    payload["user"].pop("team_id", None)
    payload.update(extra)
    return urlencode({"payload": json.dumps(payload)}).encode()


async def test_with_team_id_set_a_request_naming_no_workspace_is_refused(
    start: Start, store: Store
) -> None:
    rig = await start(store, team_id="T0OURS")
    record = await rig.create()
    card = await rig.card_for(record["id"])
    click = rig.slack.click_body("U0ALICE", CHANNEL, card["ts"], "signoff_approve")
    assert await rig.send(_without_workspace(click)) == 403
    assert await rig.send(_without_workspace(click, team_id="T0OTHER")) == 403
    command = slash_command_body("U0ALICE", "delegations", channel_id=CHANNEL)
    fields = {k: v[0] for k, v in parse_qs(command.decode()).items() if k != "team_id"}
    assert await rig.send(urlencode(fields).encode()) == 403
    await asyncio.sleep(0.1)
    assert (await rig.state(record["id"])).state == "pending"
    assert [e.type for e in await rig.events(record["id"])] == ["requested"]
    assert rig.slack.calls_to("chat.postEphemeral") == []
    # Slack's own checks name no workspace and decide nothing: still answered.
    challenge = json.dumps({"type": "url_verification", "challenge": "c-1", "token": "x"})
    status, text = await rig._post(challenge.encode(), None, json_body=True)
    assert (status, json.loads(text)) == (200, {"challenge": "c-1"})
    # The same click naming the workspace decides.
    assert await rig.send(_without_workspace(click, team={"id": "T0OURS"})) == 200
    await rig.settle(record["id"], 2)
    assert (await rig.state(record["id"])).state == "approved"


async def test_an_enterprise_grid_team_id_is_matched_by_the_org(start: Start, store: Store) -> None:
    rig = await start(store, team_id="E0ORG")
    record = await rig.create()
    card = await rig.card_for(record["id"])
    click = rig.slack.click_body("U0ALICE", CHANNEL, card["ts"], "signoff_approve")
    assert await rig.send(click) == 403  # names workspace T1, no org
    other = _without_workspace(click, enterprise={"id": "E0ELSE"}, team={"id": "T1"})
    assert await rig.send(other) == 403
    await asyncio.sleep(0.1)
    assert (await rig.state(record["id"])).state == "pending"
    ours = _without_workspace(click, enterprise={"id": "E0ORG"}, team={"id": "T1"})
    assert await rig.send(ours) == 200
    await rig.settle(record["id"], 2)
    assert (await rig.state(record["id"])).state == "approved"
