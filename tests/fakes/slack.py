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

This module holds the server: its routing, what it was asked, injected failures, and the
inbound requests built from what it holds (`FakeSlack.click_body`, `FakeSlack.home_click_body`,
`FakeSlack.submit_body`, `FakeSlack.submit_filled`). The methods it answers are in
tests/fakes/slack_methods.py; what Slack sends to the app (`sign`, `block_action_body`,
`slash_command_body`, ...) is built by tests/fakes/slack_inbound.py.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import http
import itertools
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.fakes import slack_views
from tests.fakes.recording import Call, RecordingFake
from tests.fakes.slack_inbound import (
    APP_ID,
    VERIFICATION_TOKEN,
    _find_element,
    _form,
    _trigger_id,
    _user,
    block_action_body,
    view_submission_body,
)
from tests.fakes.slack_methods import WebApiMethods, _SlackError

__all__ = ["Call", "FakeSlack"]

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


@dataclass
class _Injected:
    status: int
    retry_after: int | None
    remaining: int


class FakeSlack(WebApiMethods, RecordingFake):
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


_req_counter = itertools.count(1)


def _req_id() -> str:
    return f"fake-{next(_req_counter)}"
