"""What Slack sends to the app, for tests that drive signoff as Slack does.

`sign` gives the signature headers (verified by ``slack_sdk.signature.SignatureVerifier`` and
bolt's request verification), `block_action_body` and `view_submission_body` give the
form-encoded ``payload=<json>`` bodies of a button click and of a modal submission
(`users_select` builds the state of a user picker for the latter), `slash_command_body` the
form-encoded fields of a slash command, and `event_body` the JSON body of an Events API callback
(`app_home_opened` for `app_home_opened`). The fake Slack (tests/fakes/slack.py) builds the same
from what it holds: `FakeSlack.click_body`, `FakeSlack.home_click_body`, ...
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import itertools
import json
import time
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

VERIFICATION_TOKEN = "fake-verification-token"
"""The legacy verification token carried in interaction payloads (bolt ignores it by default)."""

APP_ID = "A1"


def _find_element(blocks: list[Any], action_id: str) -> tuple[str, dict[str, Any]] | None:
    """The (block_id, element) of the interactive element `action_id` in `blocks`."""
    for block in blocks:
        if not isinstance(block, dict):
            continue
        candidates = list(block.get("elements") or [])
        if isinstance(block.get("accessory"), dict):
            candidates.append(block["accessory"])
        for element in candidates:
            if isinstance(element, dict) and element.get("action_id") == action_id:
                return str(block.get("block_id", "")), element
    return None


def sign(signing_secret: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    """Slack's signature headers for `body` (timestamp defaults to now).

    ``X-Slack-Signature`` is ``v0=`` + hex HMAC-SHA256 of ``v0:{timestamp}:{body}`` keyed with
    the signing secret. Send the body with ``Content-Type: application/x-www-form-urlencoded``.
    """
    ts = str(int(time.time()) if timestamp is None else timestamp)
    base = b"v0:" + ts.encode() + b":" + body
    digest = hmac.new(signing_secret.encode(), base, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}"}


def _form(payload: dict[str, Any]) -> bytes:
    return urlencode({"payload": json.dumps(payload, separators=(",", ":"))}).encode()


def _user(user_id: str, team_id: str) -> dict[str, Any]:
    username = user_id.lower()
    return {"id": user_id, "username": username, "name": username, "team_id": team_id}


_TRIGGERS = itertools.count(1)


def _trigger_id() -> str:
    """A fresh trigger id, as Slack gives every interaction its own (so no two requests a
    user makes are byte-for-byte the same)."""
    return f"{next(_TRIGGERS)}.{uuid.uuid4().int % 10**12}.{uuid.uuid4().hex[:32]}"


def block_action_body(
    user_id: str,
    action_id: str,
    value: str,
    channel_id: str,
    message_ts: str,
    trigger_id: str | None = None,
    team_id: str = "T1",
    *,
    message: Mapping[str, Any] | None = None,
    block_id: str | None = None,
    team_domain: str = "fake",
) -> bytes:
    """The form body (``payload=<json>``) Slack posts when a user clicks a message button.

    `message` is the message as Slack shows it (default: a bare bot message); when it holds
    the button, its block_id, text and style are taken from it.
    """
    shown: dict[str, Any] = (
        copy.deepcopy(dict(message))
        if message is not None
        else {
            "user": "UBOT",
            "type": "message",
            "ts": message_ts,
            "bot_id": "B1",
            "app_id": APP_ID,
            "text": "",
            "team": team_id,
            "blocks": [],
        }
    )
    action: dict[str, Any] = {
        "action_id": action_id,
        "block_id": block_id or "actions",
        "text": {"type": "plain_text", "text": action_id, "emoji": True},
        "value": value,
        "type": "button",
        "action_ts": f"{time.time():.6f}",
    }
    found = _find_element(shown.get("blocks") or [], action_id)
    if found is not None:
        found_block_id, element = found
        action["block_id"] = block_id or found_block_id
        if isinstance(element.get("text"), dict):
            action["text"] = element["text"]
        if element.get("style"):
            action["style"] = element["style"]
    payload = {
        "type": "block_actions",
        "user": _user(user_id, team_id),
        "api_app_id": APP_ID,
        "token": VERIFICATION_TOKEN,
        "container": {
            "type": "message",
            "message_ts": message_ts,
            "channel_id": channel_id,
            "is_ephemeral": False,
        },
        "trigger_id": trigger_id or _trigger_id(),
        "team": {"id": team_id, "domain": team_domain},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {
            "id": channel_id,
            "name": "directmessage" if channel_id.startswith("D") else channel_id.lower(),
        },
        "message": shown,
        "state": {"values": {}},
        "response_url": f"https://hooks.slack.com/actions/{team_id}/1/fake-response-url",
        "actions": [action],
    }
    return _form(payload)


def view_submission_body(
    user_id: str,
    callback_id: str,
    private_metadata: str,
    values: Mapping[str, Any],
    *,
    view_id: str = "V00000001",
    team_id: str = "T1",
    trigger_id: str | None = None,
    view: Mapping[str, Any] | None = None,
    team_domain: str = "fake",
) -> bytes:
    """The form body (``payload=<json>``) Slack posts when a user submits a modal.

    `values` maps block_id to {action_id: value}; a str value becomes a plain_text_input's
    state (``{"type": "plain_text_input", "value": ...}``), a dict is taken as the state
    (e.g. `users_select("U0CAROL")`). `view` is the view as opened (default: a bare modal).
    """
    state = {
        block_id: {
            action_id: (
                dict(v) if isinstance(v, Mapping) else {"type": "plain_text_input", "value": v}
            )
            for action_id, v in actions.items()
        }
        for block_id, actions in values.items()
    }
    submitted: dict[str, Any] = {
        "id": view_id,
        "team_id": team_id,
        "type": "modal",
        "blocks": [],
        "hash": "fake-hash",
        "title": {"type": "plain_text", "text": "signoff", "emoji": True},
        "clear_on_close": False,
        "notify_on_close": False,
        "close": None,
        "submit": {"type": "plain_text", "text": "Submit", "emoji": True},
        "previous_view_id": None,
        "root_view_id": view_id,
        "app_id": APP_ID,
        "external_id": "",
        "app_installed_team_id": team_id,
        "bot_id": "B1",
    }
    if view is not None:
        submitted.update(copy.deepcopy(dict(view)))
    submitted.update(
        {
            "id": view_id,
            "callback_id": callback_id,
            "private_metadata": private_metadata,
            "state": {"values": state},
        }
    )
    payload = {
        "type": "view_submission",
        "team": {"id": team_id, "domain": team_domain},
        "user": _user(user_id, team_id),
        "api_app_id": APP_ID,
        "token": VERIFICATION_TOKEN,
        "trigger_id": trigger_id or _trigger_id(),
        "view": submitted,
        "response_urls": [],
        "is_enterprise_install": False,
        "enterprise": None,
    }
    return _form(payload)


def users_select(user_id: str | None) -> dict[str, Any]:
    """A users_select element's state in a view submission (None: nobody chosen in an
    optional input, which Slack sends as null)."""
    return {"type": "users_select", "selected_user": user_id}


def slash_command_body(
    user_id: str,
    text: str,
    *,
    command: str = "/signoff",
    channel_id: str = "C1",
    team_id: str = "T1",
    team_domain: str = "fake",
    trigger_id: str | None = None,
) -> bytes:
    """The form body Slack posts when `user_id` runs `command` with `text` in a channel.

    Unlike interactions, a slash command is plain form fields, not a JSON ``payload``. With
    the command's escaping on, Slack writes user mentions in `text` as ``<@U0BOB|bob>`` and
    the user's own ``&``, ``<``, ``>`` as ``&amp;``, ``&lt;``, ``&gt;``: pass `text` as
    Slack would send it.
    """
    fields = {
        "token": VERIFICATION_TOKEN,
        "team_id": team_id,
        "team_domain": team_domain,
        "channel_id": channel_id,
        "channel_name": "directmessage" if channel_id.startswith("D") else channel_id.lower(),
        "user_id": user_id,
        "user_name": user_id.lower(),
        "command": command,
        "text": text,
        "api_app_id": APP_ID,
        "is_enterprise_install": "false",
        "response_url": f"https://hooks.slack.com/commands/{team_id}/1/fake-response-url",
        "trigger_id": trigger_id or _trigger_id(),
    }
    return urlencode(fields).encode()


def event_body(event: Mapping[str, Any], *, team_id: str = "T1") -> bytes:
    """The JSON body Slack's Events API posts for `event` (send it with ``Content-Type:
    application/json``, signed with `sign`)."""
    now = int(time.time())
    payload = {
        "token": VERIFICATION_TOKEN,
        "team_id": team_id,
        "api_app_id": APP_ID,
        "event": dict(event),
        "type": "event_callback",
        "event_id": f"Ev{uuid.uuid4().hex[:10].upper()}",
        "event_time": now,
        "authorizations": [
            {
                "enterprise_id": None,
                "team_id": team_id,
                "user_id": "UBOT",
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ],
        "is_ext_shared_channel": False,
        "event_context": f"4-{uuid.uuid4().hex[:16]}",
    }
    return json.dumps(payload, separators=(",", ":")).encode()


def app_home_opened(
    user_id: str,
    *,
    tab: str = "home",
    team_id: str = "T1",
    view: Mapping[str, Any] | None = None,
) -> bytes:
    """The `app_home_opened` event of `user_id` opening the app's Home (or Messages) tab;
    `view`, the Home published for them before (`FakeSlack.home`), which Slack includes."""
    event: dict[str, Any] = {
        "type": "app_home_opened",
        "user": user_id,
        "channel": "D" + user_id,
        "tab": tab,
        "event_ts": f"{time.time():.6f}",
    }
    if view is not None:
        event["view"] = copy.deepcopy(dict(view))
    return event_body(event, team_id=team_id)
