"""Delegation from Slack end to end, in-process, as test_slack_cards.py drives Slack: real
slack-bolt and slack-sdk code against the fake Slack Web API (tests/fakes/slack.py), requests
signed as Slack signs them, on SQLite and PostgreSQL, with a FakeClock.

Proves: "Delegate…" on a card opens a modal (after the same refusal checks as Reject) whose
user picker hands the request to that person's principal, and the card says so; picking
someone who is not linked keeps the modal open with an error. The `/signoff` slash command
creates, lists and revokes standing delegations for the caller, answering in its own response,
with clear refusals (a circle, someone else's delegation, an unlinked user). Delegation notices
reach each person's direct messages.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from bot.audit import verify
from bot.outbox import jobs
from tests.fakes.slack_inbound import sign, slash_command_body, users_select
from tests.support.slack_rig import (
    CHANNEL,
    SlackRig,
    buttons_in,
    texts_in,
)


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
