"""Bolt acts on the body exactly as channels/slack/gate.py checked it: parsed once there and
handed over, never parsed again by Bolt's own rules.

Bolt reads a form whose text merely contains the word "payload" as an interaction payload
and, finding no `payload` field, hands its listeners an empty body: a slash command naming a
scope such as `payloads.*` did nothing at all. Real slack-bolt against the fake Slack.
"""

from __future__ import annotations

from tests.support.slack_rig import CHANNEL, SlackRig


async def test_a_command_whose_text_says_payload_reaches_its_listener(rig: SlackRig) -> None:
    said = await rig.command("U0ALICE", "delegate bob until 2026-12-24 payloads.*")
    [made] = await rig.delegations()
    assert (made.principal, made.delegate, made.scope) == ("alice", "bob", "payloads.*")
    assert said.startswith("Delegated: Bob Stone decides for Alice Ng (payloads.*)")


async def test_a_click_is_decided_from_the_gates_parse(rig: SlackRig) -> None:
    record = await rig.create()
    card = await rig.card_for(record["id"])
    click = rig.slack.click_body("U0ALICE", CHANNEL, card["ts"], "signoff_approve")
    assert await rig.send(click) == 200
    await rig.settle(record["id"], 2)
    assert (await rig.state(record["id"])).state == "approved"
