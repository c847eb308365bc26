"""`FakeTelegram`: the fake Bot API's HTTP side (routing, tokens, injected failures, the
dispatch of methods) and its smallest methods; its chats, messages and updates come from
the mixins in chats.py, messages.py and updates.py."""

from __future__ import annotations

import copy
import http
import itertools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

from aiohttp import web

from tests.fakes.recording import Call, RecordingFake
from tests.fakes.telegram.arguments import (
    _METHODS,
    _ApiError,
    _bad_request,
    _commands_key,
    _normalize,
    _text_arg,
)
from tests.fakes.telegram.chats import Chats
from tests.fakes.telegram.messages import Messages
from tests.fakes.telegram.updates import Updates

MAX_CALLBACK_ANSWER_LENGTH = 200

_QUERY_ID_INVALID = "query is too old and response timeout expired or query ID is invalid"

_NGINX_PAGE = (
    "<html>\r\n<head><title>{code} {reason}</title></head>\r\n<body>\r\n"
    "<center><h1>{code} {reason}</h1></center>\r\n<hr><center>nginx/1.18.0</center>\r\n"
    "</body>\r\n</html>\r\n"
)


@dataclass
class _Injected:
    status: int
    retry_after: int | None
    remaining: int


class FakeTelegram(Chats, Messages, Updates, RecordingFake):
    """A Telegram Bot API on 127.0.0.1 (an ephemeral port) that records what it is asked."""

    thread_name = "fake-telegram"

    def __init__(
        self,
        token: str = "123456:TEST-token",
        *,
        bot_id: int | None = None,
        username: str = "signoff_test_bot",
        first_name: str = "Signoff",
        long_poll_cap: float = 1.0,
    ) -> None:
        super().__init__()
        self.token = token
        prefix = token.split(":", 1)[0]
        self.bot_id = bot_id if bot_id is not None else (int(prefix) if prefix.isdigit() else 1)
        self.username = username
        self.first_name = first_name
        self.long_poll_cap = long_poll_cap
        self._injected: dict[str | None, list[_Injected]] = {}
        self._chats: dict[int, dict[str, Any]] = {}
        self._blocked: dict[int, str] = {}
        self._lost: set[int] = set()
        self._restricted: set[int] = set()
        self._migrated: dict[int, int] = {}
        self._topics: dict[int, set[int]] = {}
        self._messages: dict[tuple[int, int], dict[str, Any]] = {}
        self._next_message_id: dict[int, int] = {}
        self._updates: list[dict[str, Any]] = []
        self._update_seq = itertools.count(700_000_001)
        self._allowed_updates: list[str] = []
        self._webhook: dict[str, Any] | None = None
        self._last_webhook_error: tuple[int, str] | None = None
        self._poll_ticket = 0
        self._poll_aborts: dict[int, str] = {}
        self._answered_queries: dict[str, dict[str, Any]] = {}
        self._commands: dict[str, list[dict[str, Any]]] = {}
        self._closing = False

    # ----------------------------------------------------------------------------------------
    # lifecycle

    def _routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/bot{token}/{method}", self._handle)

    def _canonical(self, method: str) -> str:
        return _METHODS.get(method.lower(), method)

    async def start(self) -> Self:
        self._closing = False
        return await super().start()

    async def close(self) -> None:
        # Pending long polls see this and answer at once, so cleanup need not wait for them.
        self._closing = True
        await super().close()

    @property
    def base_url(self) -> str:
        """For PTB's ``base_url``: PTB appends the token, then ``/method``."""
        return f"http://127.0.0.1:{self.port}/bot"

    @property
    def api_url(self) -> str:
        """The URL prefix of this bot's methods, ``base_url + token``."""
        return f"{self.base_url}{self.token}"

    @property
    def bot_user(self) -> dict[str, Any]:
        """The bot as Telegram shows it in ``from`` of its messages."""
        return {
            "id": self.bot_id,
            "is_bot": True,
            "first_name": self.first_name,
            "username": self.username,
        }

    # ----------------------------------------------------------------------------------------
    # what was asked

    def callback_answer(self, query_id: str) -> dict[str, Any] | None:
        """The arguments of the answerCallbackQuery that answered `query_id`, or None."""
        with self._lock:
            found = self._answered_queries.get(str(query_id))
            return copy.deepcopy(found) if found is not None else None

    def commands(
        self, scope: Mapping[str, Any] | None = None, language_code: str = ""
    ) -> list[dict[str, Any]]:
        """The commands set with setMyCommands for a scope (default scope when None)."""
        with self._lock:
            return copy.deepcopy(self._commands.get(_commands_key(scope, language_code), []))

    # ----------------------------------------------------------------------------------------
    # failure injection

    def fail_next(self, method: str | None = None, *, status: int = 502, times: int = 1) -> None:
        """Answer the next `times` calls of `method` (None: any) with HTTP `status` and nginx's
        HTML error page, no JSON, as Telegram's front end does when the Bot API is down."""
        if status < 500:
            raise ValueError("fail_next injects server errors (5xx)")
        self._inject(method, _Injected(status=status, retry_after=None, remaining=times))

    def rate_limit_next(
        self, method: str | None = None, *, retry_after: int = 3, times: int = 1
    ) -> None:
        """Answer the next `times` calls of `method` (None: any) with Telegram's flood-control
        429: ``Too Many Requests: retry after N``, ``parameters.retry_after`` and
        ``Retry-After``. Telegram's retry_after is at least 1 (PTB ignores a 0)."""
        if retry_after < 1:
            raise ValueError("retry_after must be at least 1, as Telegram sends it")
        self._inject(method, _Injected(status=429, retry_after=retry_after, remaining=times))

    def _inject(self, method: str | None, injected: _Injected) -> None:
        if injected.remaining < 1:
            raise ValueError("times must be at least 1")
        key = None if method in (None, "*") else _METHODS.get(method.lower(), method)
        with self._lock:
            self._injected.setdefault(key, []).append(injected)

    def _take_injected(self, method: str) -> _Injected | None:
        with self._lock:
            for key in (method, None):
                queue = self._injected.get(key)
                if queue:
                    head = queue[0]
                    head.remaining -= 1
                    if head.remaining == 0:
                        queue.pop(0)
                    return head
        return None

    # ----------------------------------------------------------------------------------------
    # the HTTP side

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        token = request.match_info["token"]
        sent_name = request.match_info["method"]
        name = _METHODS.get(sent_name.lower(), sent_name)
        raw: dict[str, Any] = dict(request.query)
        body_error: _ApiError | None = None
        if request.content_type == "application/json" and request.can_read_body:
            try:
                body = await request.json()
            except ValueError:
                body_error = _bad_request("Can't parse JSON request body")
            else:
                if isinstance(body, dict):
                    raw.update(body)
                else:
                    body_error = _bad_request("Can't parse JSON request body")
        elif request.can_read_body:
            form = await request.post()
            for key, value in form.items():
                raw[key] = value if isinstance(value, str) else f"<file {value.filename}>"
        args, decode_error = _normalize(raw)

        injected = self._take_injected(name)
        if injected is not None:
            return self._injected_response(name, args, injected)

        try:
            self._check_token(token)
            if name not in _METHODS.values():
                raise _ApiError(404, "Not Found")
            if body_error is not None:
                raise body_error
            if decode_error is not None:
                raise decode_error
            if name == "getUpdates":
                result, description = await self._get_updates(args), None
            else:
                with self._lock:
                    result, description = self._dispatch(name, args)
        except _ApiError as e:
            answer: dict[str, Any] = {
                "ok": False,
                "error_code": e.code,
                "description": e.description,
            }
            if e.parameters:
                answer["parameters"] = e.parameters
            self._record(Call(name, args, e.code, e.description, answer))
            return _json_response(answer, e.code)
        answer = {"ok": True, "result": result}
        if description is not None:
            answer["description"] = description
        self._record(Call(name, args, 200, None, answer))
        return _json_response(answer, 200)

    def _check_token(self, token: str) -> None:
        if token == self.token:
            return
        bot_id, colon, _ = token.partition(":")
        if not colon or not bot_id.isdigit():
            raise _ApiError(404, "Not Found")
        if bot_id.startswith("0"):
            raise _ApiError(401, "Unauthorized: invalid token specified")
        raise _ApiError(401, "Unauthorized")

    def _injected_response(
        self, method: str, args: dict[str, Any], injected: _Injected
    ) -> web.Response:
        if injected.retry_after is not None:
            description = f"Too Many Requests: retry after {injected.retry_after}"
            answer = {
                "ok": False,
                "error_code": 429,
                "description": description,
                "parameters": {"retry_after": injected.retry_after},
            }
            self._record(Call(method, args, 429, description, answer))
            response = _json_response(answer, 429)
            response.headers["Retry-After"] = str(injected.retry_after)
            return response
        try:
            reason = http.HTTPStatus(injected.status).phrase
        except ValueError:
            reason = "Error"
        self._record(Call(method, args, injected.status, f"http_{injected.status}", None))
        return web.Response(
            status=injected.status,
            text=_NGINX_PAGE.format(code=injected.status, reason=reason),
            content_type="text/html",
        )

    def _dispatch(self, method: str, args: dict[str, Any]) -> tuple[Any, str | None]:
        if method == "getMe":
            return self._get_me(), None
        if method in ("logOut", "close"):
            return True, None
        if method == "getChat":  # a ChatFullInfo: the chat and the fields Telegram always sends
            chat = copy.deepcopy(self._chat(args.get("chat_id")))
            return {**chat, "accent_color_id": 0, "max_reaction_count": 11}, None
        if method == "sendMessage":
            return self._send_message(args), None
        if method == "createForumTopic":
            name = _text_arg(args.get("name"))
            if not 1 <= len(name) <= 128:
                missing = 'Parameter "name" is required'
                raise _bad_request("TOPIC_NAME_INVALID" if name else missing)
            root = self._open_topic(int(self._chat(args.get("chat_id"))["id"]), name, None)
            forum_topic = {"message_thread_id": root["message_thread_id"], "name": name}
            return {**forum_topic, "icon_color": root["forum_topic_created"]["icon_color"]}, None
        if method == "editMessageText":
            return self._edit_message_text(args), None
        if method == "editMessageReplyMarkup":
            return self._edit_message_reply_markup(args), None
        if method == "answerCallbackQuery":
            return self._answer_callback_query(args), None
        if method in ("setWebhook", "deleteWebhook"):
            return True, self._set_webhook(args, method == "setWebhook")
        if method == "getWebhookInfo":
            return self._get_webhook_info(), None
        if method == "setMyCommands":
            return self._set_my_commands(args), None
        key = _commands_key(args.get("scope"), str(args.get("language_code") or ""))
        if method == "getMyCommands":
            return copy.deepcopy(self._commands.get(key, [])), None
        self._commands.pop(key, None)  # deleteMyCommands
        return True, None

    # ----------------------------------------------------------------------------------------
    # methods

    def _get_me(self) -> dict[str, Any]:
        return {
            **self.bot_user,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
            "can_connect_to_business": False,
            "has_main_web_app": False,
        }

    def _answer_callback_query(self, args: dict[str, Any]) -> bool:
        query_id = str(args.get("callback_query_id") or "")
        if not query_id.isdigit() or int(query_id) == 0 or query_id in self._answered_queries:
            raise _bad_request(_QUERY_ID_INVALID)
        text = _text_arg(args.get("text"))
        if len(text) > MAX_CALLBACK_ANSWER_LENGTH:
            raise _bad_request("MESSAGE_TOO_LONG")
        self._answered_queries[query_id] = dict(args)
        return True

    def _set_my_commands(self, args: dict[str, Any]) -> bool:
        commands = args.get("commands")
        if not isinstance(commands, list):
            raise _bad_request("Can't parse commands JSON object")
        for command in commands:
            if not isinstance(command, dict):
                raise _bad_request("Can't parse BotCommand: Object expected")
            name, description = command.get("command"), command.get("description")
            if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9_]{1,32}", name.lower()):
                raise _bad_request("BOT_COMMAND_INVALID")
            if not isinstance(description, str) or not 1 <= len(description) <= 256:
                raise _bad_request("BOT_COMMAND_DESCRIPTION_INVALID")
        key = _commands_key(args.get("scope"), str(args.get("language_code") or ""))
        self._commands[key] = [
            {"command": c["command"], "description": c["description"]} for c in commands
        ]
        return True


def _json_response(answer: dict[str, Any], status: int) -> web.Response:
    return web.json_response(
        answer,
        status=status,
        dumps=lambda o: json.dumps(o, ensure_ascii=False, separators=(",", ":")),
    )
