"""A fake Slack for tests: the Web API over real HTTP, and Slack-signed inbound requests.

`FakeSlack` is an aiohttp server on 127.0.0.1 that answers ``POST /api/{method}`` the way
https://slack.com/api/ does, for the few methods signoff uses:

- ``auth.test``, ``chat.postMessage``, ``chat.update``, ``chat.postEphemeral``,
  ``conversations.open``, ``views.open`` and ``views.publish`` (a user's Home tab, kept per
  user: `FakeSlack.home`); any other method answers ``unknown_method``.
- Like Slack, it reads arguments from the query string, a form-encoded body or a JSON body.
  slack-sdk mixes these: ``chat.*`` and ``views.open`` go as JSON, while ``auth.test`` and
  ``conversations.open`` go as query parameters of a POST with an empty form body.
- Like Slack, API errors are HTTP 200 with ``{"ok": false, "error": "..."}``; the token must
  come as ``Authorization: Bearer <token>`` (else ``invalid_auth``).
- Failures can be injected: `FakeSlack.fail_next` (HTTP 5xx with an HTML body, no JSON) and
  `FakeSlack.rate_limit_next` (HTTP 429, ``Retry-After`` and ``{"ok": false, "error":
  "ratelimited"}``). Note that slack-sdk's clients retry neither by default: their default
  retry handlers cover only connection errors, so both raise ``SlackApiError`` at once.

Every request is recorded as a `Call`, with JSON-string arguments (``blocks``, ``view``, ...)
decoded. Use it inside a test's event loop (``async with FakeSlack() as slack:``) or, for
tests that drive a subprocess, in a thread of its own (``with FakeSlack.in_thread() as
slack:``); ``slack.base_url`` is the value for ``AsyncWebClient(base_url=...)``.

The module functions build what Slack sends to the app: `sign` gives the signature headers
(verified by ``slack_sdk.signature.SignatureVerifier`` and bolt's request verification),
`block_action_body` and `view_submission_body` give the form-encoded ``payload=<json>``
bodies of a button click and of a modal submission (`users_select` builds the state of a user
picker for the latter), `slash_command_body` the form-encoded fields of a slash command, and
`event_body` the JSON body of an Events API callback (`app_home_opened` for `app_home_opened`);
`FakeSlack.home_click_body` is a press of a button on a user's published Home.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import hmac
import http
import itertools
import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from tests.fakes import slack_views
from tests.fakes.recording import Call, RecordingFake

__all__ = [
    "Call",
    "FakeSlack",
    "app_home_opened",
    "block_action_body",
    "event_body",
    "sign",
    "slash_command_body",
    "users_select",
    "view_submission_body",
]

JSON_FIELDS = frozenset({"attachments", "blocks", "metadata", "user_auth_blocks", "view"})
"""Arguments that Slack takes as JSON text in a form body (or as JSON values in a JSON body)."""

_HANDLED = (
    "auth.test",
    "chat.postMessage",
    "chat.update",
    "chat.postEphemeral",
    "conversations.open",
    "views.open",
    "views.publish",
)

VERIFICATION_TOKEN = "fake-verification-token"
"""The legacy verification token carried in interaction payloads (bolt ignores it by default)."""

APP_ID = "A1"


@dataclass
class _Injected:
    status: int
    retry_after: int | None
    remaining: int


class _SlackError(Exception):
    def __init__(self, error: str, **extra: Any) -> None:
        super().__init__(error)
        self.error = error
        self.extra = extra


class FakeSlack(RecordingFake):
    """A Slack Web API on 127.0.0.1 (an ephemeral port) that records what it is asked."""

    thread_name = "fake-slack"

    def __init__(
        self,
        token: str = "xoxb-test",
        *,
        bot_user_id: str = "UBOT",
        team_id: str = "T1",
        bot_id: str = "B1",
        team_domain: str = "fake",
    ) -> None:
        super().__init__()
        self.token = token
        self.bot_user_id = bot_user_id
        self.team_id = team_id
        self.bot_id = bot_id
        self.team_domain = team_domain
        self._injected: dict[str, list[_Injected]] = {}
        # A method that answers only once its event is set (a Slack that is slow for as long
        # as a test needs), by method name.
        self.held: dict[str, asyncio.Event] = {}
        self._messages: dict[tuple[str, str], dict[str, Any]] = {}
        self._views: dict[str, dict[str, Any]] = {}
        self._homes: dict[str, dict[str, Any]] = {}
        self._opened_dms: set[str] = set()
        self._ts_seq = itertools.count(100, 100)
        self._view_seq = itertools.count(1)

    # ----------------------------------------------------------------------------------------
    # lifecycle

    def _routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/api/{method}", self._handle)

    @property
    def base_url(self) -> str:
        """For ``AsyncWebClient(base_url=...)``; ends with a slash as slack-sdk expects."""
        return f"http://127.0.0.1:{self.port}/api/"

    # ----------------------------------------------------------------------------------------
    # what was asked

    def message(self, channel: str, ts: str) -> dict[str, Any] | None:
        """The message as it stands now (after any chat.update), or None."""
        with self._lock:
            found = self._messages.get((channel, ts))
            return copy.deepcopy(found) if found is not None else None

    def view(self, view_id: str) -> dict[str, Any] | None:
        """A view opened with views.open, as answered, or None."""
        with self._lock:
            found = self._views.get(view_id)
            return copy.deepcopy(found) if found is not None else None

    def home(self, user_id: str) -> dict[str, Any] | None:
        """The Home view last published for `user_id` with views.publish, or None."""
        with self._lock:
            found = self._homes.get(user_id)
            return copy.deepcopy(found) if found is not None else None

    # ----------------------------------------------------------------------------------------
    # failure injection

    def fail_next(self, method: str, times: int = 1, status: int = 500) -> None:
        """Answer the next `times` calls of `method` ("*" for any) with HTTP `status`, no JSON."""
        self._inject(method, _Injected(status=status, retry_after=None, remaining=times))

    def rate_limit_next(self, method: str, retry_after: int = 1, times: int = 1) -> None:
        """Answer the next `times` calls of `method` ("*" for any) with HTTP 429 as Slack does."""
        self._inject(method, _Injected(status=429, retry_after=retry_after, remaining=times))

    def _inject(self, method: str, injected: _Injected) -> None:
        if injected.remaining < 1:
            raise ValueError("times must be at least 1")
        with self._lock:
            self._injected.setdefault(method, []).append(injected)

    def _take_injected(self, method: str) -> _Injected | None:
        with self._lock:
            for key in (method, "*"):
                queue = self._injected.get(key)
                if queue:
                    head = queue[0]
                    head.remaining -= 1
                    if head.remaining == 0:
                        queue.pop(0)
                    return head
        return None

    # ----------------------------------------------------------------------------------------
    # inbound requests built from the fake's own state

    def click_body(
        self,
        user_id: str,
        channel_id: str,
        message_ts: str,
        action_id: str,
        *,
        value: str | None = None,
        trigger_id: str | None = None,
    ) -> bytes:
        """The block_actions body of `user_id` clicking button `action_id` of a posted message.

        Takes the message, the button's block_id and (unless given) its value from what was
        posted or last updated, as Slack does. Raises LookupError if there is no such button.
        """
        message = self.message(channel_id, message_ts)
        if message is None:
            raise LookupError(f"no message {message_ts} in {channel_id}")
        button = _find_element(message.get("blocks") or [], action_id)
        if button is None:
            raise LookupError(f"message {message_ts} in {channel_id} has no {action_id!r}")
        return block_action_body(
            user_id,
            action_id,
            value if value is not None else button[1].get("value", ""),
            channel_id,
            message_ts,
            trigger_id=trigger_id,
            team_id=self.team_id,
            message=message,
            team_domain=self.team_domain,
        )

    def home_click_body(
        self, user_id: str, action_id: str, block_id: str, *, value: str | None = None
    ) -> bytes:
        """The block_actions body of `user_id` pressing button `action_id` in block `block_id`
        of their published Home, as Slack sends it (no channel, no message: the view).
        Raises LookupError if there is no such button."""
        home = self.home(user_id)
        if home is None:
            raise LookupError(f"no Home published for {user_id}")
        blocks = [b for b in home["blocks"] if b.get("block_id") == block_id]
        button = _find_element(blocks, action_id)
        if button is None:
            raise LookupError(f"the Home of {user_id} has no {action_id!r} in {block_id!r}")
        element = button[1]
        action: dict[str, Any] = {
            "action_id": action_id,
            "block_id": block_id,
            "text": element.get("text"),
            "value": value if value is not None else element.get("value", ""),
            "type": "button",
            "action_ts": f"{time.time():.6f}",
        }
        if element.get("style"):
            action["style"] = element["style"]
        payload = {
            "type": "block_actions",
            "user": _user(user_id, self.team_id),
            "api_app_id": APP_ID,
            "token": VERIFICATION_TOKEN,
            "container": {"type": "view", "view_id": home["id"]},
            "trigger_id": _trigger_id(),
            "team": {"id": self.team_id, "domain": self.team_domain},
            "enterprise": None,
            "is_enterprise_install": False,
            "view": home,
            "actions": [action],
        }
        return _form(payload)

    def submit_body(self, view_id: str, user_id: str, values: Mapping[str, Any]) -> bytes:
        """The view_submission body of `user_id` submitting a view opened with views.open."""
        opened = self.view(view_id)
        if opened is None:
            raise LookupError(f"no view {view_id}")
        return view_submission_body(
            user_id,
            opened.get("callback_id", ""),
            opened.get("private_metadata", ""),
            values,
            view_id=view_id,
            team_id=self.team_id,
            view=opened,
            team_domain=self.team_domain,
        )

    def submit_filled(
        self, view_id: str, user_id: str, filled: Mapping[str, Any] | None = None
    ) -> bytes:
        """The view_submission of `user_id` submitting the view as Slack holds it: every input
        with its initial value, unless `filled` gives a block's new one
        (tests/fakes/slack_views.submitted_state)."""
        opened = self.view(view_id)
        if opened is None:
            raise LookupError(f"no view {view_id}")
        return self.submit_body(
            view_id, user_id, slack_views.submitted_state(opened, dict(filled or {}))
        )

    def respond(self, view_id: str, answer: str) -> dict[str, Any]:
        """What Slack does with the app's HTTP answer to a view_submission of `view_id`: an
        empty answer (or `clear`) closes the modal, `errors` keep it open with them (naming
        only its input blocks), `update` replaces it in place (same id, new hash). Returns
        the answer as parsed; raises AssertionError where Slack would show its own error."""
        parsed: dict[str, Any] = json.loads(answer) if answer.strip() else {}
        with self._lock:
            current = self._views.get(view_id)
            if current is None:
                raise AssertionError(f"no open view {view_id}")
            refused = slack_views.response_problems(current, parsed)
            if refused:
                raise AssertionError(f"Slack would refuse the response: {refused}")
            action = parsed.get("response_action")
            if action in (None, "clear"):
                del self._views[view_id]
            elif action == "update":
                view = parsed["view"]
                current.update(
                    {
                        "blocks": view.get("blocks", []),
                        "private_metadata": view.get("private_metadata", ""),
                        "callback_id": view.get("callback_id", ""),
                        "title": view.get("title"),
                        "submit": view.get("submit"),
                        "close": view.get("close"),
                        "state": {"values": {}},
                        "hash": hashlib.sha1(f"{view_id}:{self._next_ts()}".encode()).hexdigest()[
                            :20
                        ],
                    }
                )
        return parsed

    # ----------------------------------------------------------------------------------------
    # the HTTP side

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        args: dict[str, Any] = dict(request.query)
        body_error: str | None = None
        if request.content_type == "application/json":
            try:
                body = await request.json()
            except ValueError:
                body_error = "invalid_json"
            else:
                if isinstance(body, dict):
                    args.update(body)
                else:
                    body_error = "json_not_object"
        elif request.can_read_body:
            form = await request.post()
            args.update({k: v for k, v in form.items() if isinstance(v, str)})
        for name in JSON_FIELDS & args.keys():
            if isinstance(args[name], str):
                try:
                    args[name] = json.loads(args[name])
                except ValueError:
                    body_error = body_error or (
                        "invalid_blocks_format" if name == "blocks" else "invalid_arguments"
                    )

        if (held := self.held.get(method)) is not None:
            await held.wait()
        injected = self._take_injected(method)
        if injected is not None:
            return self._injected_response(method, args, injected)

        try:
            if body_error is not None:
                raise _SlackError(body_error)
            if method not in _HANDLED:
                raise _SlackError("unknown_method", req_method=method)
            if request.headers.get("Authorization", "") != f"Bearer {self.token}":
                raise _SlackError("invalid_auth")
            answer = {"ok": True, **self._dispatch(method, args)}
        except _SlackError as e:
            answer = {"ok": False, "error": e.error, **e.extra}
            self._record(Call(method, args, 200, e.error, answer))
        else:
            self._record(Call(method, args, 200, None, answer))
        return web.json_response(answer, headers={"X-Slack-Req-Id": _req_id()})

    def _injected_response(
        self, method: str, args: dict[str, Any], injected: _Injected
    ) -> web.Response:
        if injected.retry_after is not None:
            answer = {"ok": False, "error": "ratelimited"}
            self._record(Call(method, args, 429, "ratelimited", answer))
            return web.json_response(
                answer, status=429, headers={"Retry-After": str(injected.retry_after)}
            )
        try:
            reason = http.HTTPStatus(injected.status).phrase
        except ValueError:
            reason = "Error"
        self._record(Call(method, args, injected.status, f"http_{injected.status}", None))
        return web.Response(
            status=injected.status,
            text=f"<html><body><h1>{injected.status} {reason}</h1></body></html>",
            content_type="text/html",
        )

    def _dispatch(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            if method == "auth.test":
                return self._auth_test()
            if method == "chat.postMessage":
                return self._post_message(args)
            if method == "chat.update":
                return self._update(args)
            if method == "chat.postEphemeral":
                return self._post_ephemeral(args)
            if method == "conversations.open":
                return self._conversations_open(args)
            if method == "views.publish":
                return self._views_publish(args)
            return self._views_open(args)

    def _auth_test(self) -> dict[str, Any]:
        return {
            "url": f"https://{self.team_domain}.slack.com/",
            "team": "Fake Team",
            "user": "signoff",
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": self.bot_id,
            "is_enterprise_install": False,
        }

    def _next_ts(self) -> str:
        n = next(self._ts_seq)
        seconds, micros = divmod(n, 1_000_000)
        return f"{1_700_000_000 + seconds}.{micros:06d}"

    def _message_content(self, args: dict[str, Any]) -> dict[str, Any]:
        if not any(args.get(k) for k in ("text", "blocks", "attachments")):
            raise _SlackError("no_text")
        if "blocks" in args and not isinstance(args["blocks"], list):
            raise _SlackError("invalid_blocks_format")
        content: dict[str, Any] = {"text": str(args.get("text") or "")}
        for name in ("blocks", "attachments", "metadata"):
            if args.get(name) is not None:
                content[name] = args[name]
        return content

    def _post_message(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = _dm_for(str(args.get("channel") or ""))
        if not channel:
            raise _SlackError("channel_not_found")
        content = self._message_content(args)
        ts = self._next_ts()
        message = {
            "user": self.bot_user_id,
            "type": "message",
            "ts": ts,
            "bot_id": self.bot_id,
            "app_id": APP_ID,
            "team": self.team_id,
            **content,
        }
        if args.get("thread_ts"):
            message["thread_ts"] = str(args["thread_ts"])
        self._messages[(channel, ts)] = message
        return {"channel": channel, "ts": ts, "message": copy.deepcopy(message)}

    def _update(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = str(args.get("channel") or "")
        if not channel or channel[0] in "UW":
            raise _SlackError("channel_not_found")
        ts = str(args.get("ts") or "")
        message = self._messages.get((channel, ts))
        if message is None:
            raise _SlackError("message_not_found")
        content = self._message_content(args)
        message.update(content)
        message["edited"] = {"user": self.bot_user_id, "ts": self._next_ts()}
        return {
            "channel": channel,
            "ts": ts,
            "text": message["text"],
            "message": copy.deepcopy(message),
        }

    def _post_ephemeral(self, args: dict[str, Any]) -> dict[str, Any]:
        if not args.get("channel"):
            raise _SlackError("channel_not_found")
        if not args.get("user"):
            raise _SlackError("user_not_in_channel")
        self._message_content(args)
        return {"message_ts": self._next_ts()}

    def _conversations_open(self, args: dict[str, Any]) -> dict[str, Any]:
        if args.get("channel"):
            return {"no_op": True, "already_open": True, "channel": {"id": str(args["channel"])}}
        users = [u for u in str(args.get("users") or "").split(",") if u]
        if not users:
            raise _SlackError("users_list_not_supplied")
        if len(users) > 8:
            raise _SlackError("too_many_users")
        if len(users) == 1:
            channel_id = "D" + users[0]
        else:
            digest = hashlib.sha1(",".join(sorted(users)).encode()).hexdigest()
            channel_id = "G" + digest[:10].upper()
        answer: dict[str, Any] = {"channel": {"id": channel_id}}
        if channel_id in self._opened_dms:
            answer = {"no_op": True, "already_open": True, **answer}
        self._opened_dms.add(channel_id)
        return answer

    def _views_open(self, args: dict[str, Any]) -> dict[str, Any]:
        if not args.get("trigger_id"):
            raise _SlackError("invalid_arguments")
        view = args.get("view")
        if not isinstance(view, dict) or view.get("type") not in ("modal", "home"):
            raise _SlackError("invalid_arguments")
        refused = slack_views.problems(view)
        if refused:
            raise _SlackError("invalid_arguments", response_metadata={"messages": refused})
        view_id = f"V{next(self._view_seq):08d}"
        opened = {
            "id": view_id,
            "team_id": self.team_id,
            "type": view["type"],
            "blocks": view.get("blocks", []),
            "private_metadata": view.get("private_metadata", ""),
            "callback_id": view.get("callback_id", ""),
            "state": {"values": {}},
            "hash": hashlib.sha1(view_id.encode()).hexdigest()[:20],
            "title": view.get("title"),
            "clear_on_close": bool(view.get("clear_on_close", False)),
            "notify_on_close": bool(view.get("notify_on_close", False)),
            "close": view.get("close"),
            "submit": view.get("submit"),
            "previous_view_id": None,
            "root_view_id": view_id,
            "app_id": APP_ID,
            "external_id": view.get("external_id", ""),
            "app_installed_team_id": self.team_id,
            "bot_id": self.bot_id,
        }
        self._views[view_id] = opened
        return {"view": copy.deepcopy(opened)}

    def _views_publish(self, args: dict[str, Any]) -> dict[str, Any]:
        """A user's Home tab: one view per user, replaced by each publish (keeping its id),
        refused as Slack refuses it (a missing user or view, a view that is not a Home, more
        than 100 blocks, a stale `hash`)."""
        user = str(args.get("user_id") or "")
        view = args.get("view")
        if not user or not isinstance(view, dict) or view.get("type") != "home":
            raise _SlackError("invalid_arguments")
        if user[0] not in "UW":
            raise _SlackError("user_not_found")
        blocks = view.get("blocks", [])
        if not isinstance(blocks, list) or len(blocks) > 100:
            raise _SlackError(
                "invalid_arguments",
                response_metadata={
                    "messages": [
                        "[ERROR] no more than 100 items allowed [json-pointer:/view/blocks]"
                    ]
                },
            )
        current = self._homes.get(user)
        if args.get("hash") and current is not None and args["hash"] != current["hash"]:
            raise _SlackError("hash_conflict")
        view_id = current["id"] if current is not None else f"V{next(self._view_seq):08d}"
        published = {
            "id": view_id,
            "team_id": self.team_id,
            "type": "home",
            "blocks": blocks,
            "private_metadata": view.get("private_metadata", ""),
            "callback_id": view.get("callback_id", ""),
            "state": {"values": {}},
            "hash": hashlib.sha1(f"{view_id}:{self._next_ts()}".encode()).hexdigest()[:20],
            "title": {"type": "plain_text", "text": "View Title", "emoji": True},
            "clear_on_close": False,
            "notify_on_close": False,
            "close": None,
            "submit": None,
            "previous_view_id": None,
            "root_view_id": view_id,
            "app_id": APP_ID,
            "external_id": view.get("external_id", ""),
            "app_installed_team_id": self.team_id,
            "bot_id": self.bot_id,
        }
        self._homes[user] = published
        return {"view": copy.deepcopy(published)}


def _dm_for(channel: str) -> str:
    """chat.postMessage to a user ID posts in the app's DM with that user, as Slack does."""
    if channel[:1] in ("U", "W"):
        return "D" + channel
    return channel


_req_counter = itertools.count(1)


def _req_id() -> str:
    return f"fake-{next(_req_counter)}"


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


# --------------------------------------------------------------------------------------------
# inbound: what Slack sends to the app


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
