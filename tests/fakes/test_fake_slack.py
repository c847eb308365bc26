"""The fake Slack against the real slack-sdk and bolt-python: wire formats, errors, signing."""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import parse_qs

import aiohttp
import pytest
from slack_bolt.async_app import AsyncAck, AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from tests.fakes.slack import FakeSlack
from tests.fakes.slack_inbound import (
    block_action_body,
    sign,
    slash_command_body,
    users_select,
    view_submission_body,
)

SECRET = "signing-secret"
BLOCKS: list[dict[str, Any]] = [
    {"type": "section", "block_id": "summary", "text": {"type": "mrkdwn", "text": "*Deploy?*"}},
    {
        "type": "actions",
        "block_id": "decide",
        "elements": [
            {
                "type": "button",
                "action_id": "approve",
                "style": "primary",
                "text": {"type": "plain_text", "text": "Approve"},
                "value": "req-1",
            }
        ],
    },
]


def client(slack: FakeSlack, **kwargs: Any) -> AsyncWebClient:
    return AsyncWebClient(token="xoxb-test", base_url=slack.base_url, **kwargs)


async def test_auth_test_and_post_message_are_answered_and_recorded() -> None:
    async with FakeSlack() as slack:
        assert slack.base_url.endswith("/api/")
        web = client(slack)
        auth = await web.auth_test()
        assert (auth["user_id"], auth["team_id"], auth["bot_id"]) == ("UBOT", "T1", "B1")

        first = await web.chat_postMessage(channel="C1", text="hi", blocks=BLOCKS)
        second = await web.chat_postMessage(channel="U0ALICE", text="dm")
        assert first["ok"] and first["channel"] == "C1"
        assert first["message"]["blocks"] == BLOCKS
        assert second["channel"] == "DU0ALICE"
        assert float(first["ts"]) < float(second["ts"])
        assert first["ts"] == "1700000000.000100"

        methods = [c.method for c in slack.calls]
        assert methods == ["auth.test", "chat.postMessage", "chat.postMessage"]
        posted = slack.calls_to("chat.postMessage")[0]
        assert posted.args["blocks"] == BLOCKS and posted.args["channel"] == "C1"
        assert (await slack.wait_for("chat.postMessage", count=2)).args["text"] == "dm"

        updated = await web.chat_update(channel="C1", ts=first["ts"], text="done", blocks=[])
        assert updated["ts"] == first["ts"]
        assert slack.message("C1", first["ts"])["text"] == "done"  # type: ignore[index]
        with pytest.raises(SlackApiError) as missing:
            await web.chat_update(channel="C1", ts="1.000000", text="x")
        assert missing.value.response["error"] == "message_not_found"
        with pytest.raises(SlackApiError) as by_user:
            await web.chat_update(channel="U0ALICE", ts=second["ts"], text="x")
        assert by_user.value.response["error"] == "channel_not_found"


async def test_other_methods_and_form_bodies() -> None:
    async with FakeSlack() as slack:
        web = client(slack)
        opened = await web.conversations_open(users="U0BOB")  # sent as query parameters
        assert opened["channel"]["id"] == "DU0BOB"
        eph = await web.chat_postEphemeral(channel="C1", user="U0BOB", text="only you")
        assert eph["message_ts"]
        view = await web.views_open(
            trigger_id="T-1",
            view='{"type": "modal", "callback_id": "reason", "private_metadata": "req-1",'
            ' "title": {"type": "plain_text", "text": "Why"}, "blocks": []}',
        )
        assert view["view"]["id"].startswith("V")
        assert slack.calls_to("views.open")[0].args["view"]["callback_id"] == "reason"

        # A form-encoded body, JSON text in fields, as older clients and curl send it.
        async with aiohttp.ClientSession() as http:
            resp = await http.post(
                slack.base_url + "chat.postMessage",
                data={"channel": "C9", "blocks": '[{"type": "divider"}]'},
                headers={"Authorization": "Bearer xoxb-test"},
            )
            assert (await resp.json())["ok"] is True
            resp = await http.post(slack.base_url + "auth.test", data={"x": "1"})
            assert await resp.json() == {"ok": False, "error": "invalid_auth"}
        assert slack.calls_to("chat.postMessage")[-1].args["blocks"] == [{"type": "divider"}]

        with pytest.raises(SlackApiError) as unknown:
            await web.api_call("nope.nope")
        assert unknown.value.response["error"] == "unknown_method"
        with pytest.raises(SlackApiError) as bad_token:
            await AsyncWebClient(token="xoxb-wrong", base_url=slack.base_url).auth_test()
        assert bad_token.value.response["error"] == "invalid_auth"


async def test_rate_limit_raises_without_retry_handler_and_is_retried_with_one() -> None:
    async with FakeSlack() as slack:
        slack.rate_limit_next("chat.postMessage", retry_after=7)
        # slack-sdk's default retry handlers cover connection errors only.
        with pytest.raises(SlackApiError) as limited:
            await client(slack).chat_postMessage(channel="C1", text="hi")
        assert limited.value.response.status_code == 429
        assert limited.value.response.headers["Retry-After"] == "7"
        assert limited.value.response["error"] == "ratelimited"
        assert slack.calls_to("chat.postMessage")[0].status == 429

        # With the rate-limit handler the client sleeps Retry-After + random() s and retries.
        slack.rate_limit_next("chat.postMessage", retry_after=0)
        retrying = client(slack, retry_handlers=[AsyncRateLimitErrorRetryHandler()])
        assert (await retrying.chat_postMessage(channel="C1", text="hi"))["ok"]
        assert [c.status for c in slack.calls_to("chat.postMessage")] == [429, 429, 200]


async def test_injected_server_errors() -> None:
    async with FakeSlack() as slack:
        slack.fail_next("chat.postMessage", times=2, status=500)
        web = client(slack)
        for _ in range(2):
            with pytest.raises(SlackApiError) as failed:
                await web.chat_postMessage(channel="C1", text="hi")
            assert failed.value.response.status_code == 500
        assert (await web.chat_postMessage(channel="C1", text="hi"))["ok"]
        assert [c.ok for c in slack.calls_to("chat.postMessage")] == [False, False, True]
        assert len(slack.calls_to("chat.postMessage", ok=True)) == 1


def test_in_thread_with_sync_client() -> None:
    with FakeSlack.in_thread() as slack:
        web = WebClient(token="xoxb-test", base_url=slack.base_url)
        assert web.chat_postMessage(channel="C1", text="hi")["ok"]
        call = slack.wait_for_sync(lambda c: c.method == "chat.postMessage", timeout=2)
        assert call.args["text"] == "hi"
        with pytest.raises(TimeoutError):
            slack.wait_for_sync("chat.update", timeout=0.05)


def test_sign_is_accepted_by_slack_sdk_verifier() -> None:
    body = block_action_body("U0ALICE", "approve", "req-1", "C1", "1700000000.000100")
    now = int(time.time())
    headers = sign(SECRET, body, now)
    verifier = SignatureVerifier(SECRET)
    assert verifier.is_valid(
        body, headers["X-Slack-Request-Timestamp"], headers["X-Slack-Signature"]
    )
    assert verifier.is_valid_request(body, headers)
    assert not SignatureVerifier("other").is_valid_request(body, headers)


async def test_bolt_verifies_and_routes_signed_interactions() -> None:
    async with FakeSlack() as slack:
        web = client(slack)
        # As signoff runs Bolt: the listener finishes before the answer, so what it did can
        # be asserted once dispatch returns (otherwise it races the assertions below).
        app = AsyncApp(
            client=web, signing_secret=SECRET, process_before_response=True, name="fake-test"
        )
        seen: dict[str, Any] = {}

        @app.action("approve")
        async def approve(ack: AsyncAck, body: dict[str, Any], action: dict[str, Any]) -> None:
            await ack()
            seen["action"] = action
            seen["body"] = body
            await web.chat_update(
                channel=body["container"]["channel_id"],
                ts=body["container"]["message_ts"],
                text="approved",
            )

        @app.view("reason")
        async def reason(ack: AsyncAck, view: dict[str, Any]) -> None:
            await ack()
            seen["view"] = view

        posted = await web.chat_postMessage(channel="C1", text="Deploy?", blocks=BLOCKS)
        body = slack.click_body("U0ALICE", "C1", posted["ts"], "approve")
        response = await app.async_dispatch(
            AsyncBoltRequest(body=body.decode(), headers=sign(SECRET, body))
        )
        assert response.status == 200
        assert seen["action"]["value"] == "req-1" and seen["action"]["block_id"] == "decide"
        assert seen["body"]["user"]["id"] == "U0ALICE"
        assert slack.message("C1", posted["ts"])["text"] == "approved"  # type: ignore[index]
        assert slack.calls_to("auth.test")  # bolt's single-team authorization asked the fake

        stale = sign(SECRET, body, int(time.time()) - 600)
        response = await app.async_dispatch(AsyncBoltRequest(body=body.decode(), headers=stale))
        assert response.status == 401

        body = view_submission_body("U0ALICE", "reason", "req-1", {"why": {"text": "ok"}})
        payload = parse_qs(body.decode())["payload"][0]
        assert '"plain_text_input"' in payload
        response = await app.async_dispatch(
            AsyncBoltRequest(body=body.decode(), headers=sign(SECRET, body))
        )
        assert response.status == 200
        assert seen["view"]["private_metadata"] == "req-1"
        assert seen["view"]["state"]["values"]["why"]["text"]["value"] == "ok"


async def test_bolt_routes_slash_commands_and_user_pickers() -> None:
    async with FakeSlack() as slack:
        app = AsyncApp(client=client(slack), signing_secret=SECRET)
        seen: dict[str, Any] = {}

        @app.command("/signoff")
        async def command(ack: AsyncAck, command: dict[str, Any]) -> None:
            seen["command"] = command
            await ack(text="only you see this")

        @app.view("pick")
        async def pick(ack: AsyncAck, view: dict[str, Any]) -> None:
            seen["view"] = view
            await ack(response_action="errors", errors={"who": "not them"})

        typed = slash_command_body("U0ALICE", "delegate <@U0BOB|bob> until 2026-12-24 a&amp;b")
        fields = parse_qs(typed.decode())
        assert fields["command"] == ["/signoff"] and fields["user_id"] == ["U0ALICE"]
        response = await app.async_dispatch(
            AsyncBoltRequest(body=typed.decode(), headers=sign(SECRET, typed))
        )
        assert response.status == 200
        assert response.body == "only you see this"  # a bare text ack is the body as plain text
        assert seen["command"]["text"] == "delegate <@U0BOB|bob> until 2026-12-24 a&amp;b"
        assert seen["command"]["channel_id"] == "C1" and seen["command"]["trigger_id"]

        body = view_submission_body("U0ALICE", "pick", "", {"who": {"who": users_select("U0BOB")}})
        response = await app.async_dispatch(
            AsyncBoltRequest(body=body.decode(), headers=sign(SECRET, body))
        )
        assert seen["view"]["state"]["values"]["who"]["who"] == {
            "type": "users_select",
            "selected_user": "U0BOB",
        }
        assert response.status == 200
        assert json.loads(response.body) == {
            "response_action": "errors",
            "errors": {"who": "not them"},
        }

        seen.clear()
        stale = sign(SECRET, typed, int(time.time()) - 600)
        response = await app.async_dispatch(AsyncBoltRequest(body=typed.decode(), headers=stale))
        assert response.status == 401
        assert seen == {}
