"""How the fake Bot API reads a request: its method names, the arguments as it types them
(form text decoded to JSON, integers and booleans), and errors worded as Telegram words
them."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

JSON_FIELDS = frozenset(
    {
        "allowed_updates",
        "commands",
        "entities",
        "link_preview_options",
        "reply_markup",
        "reply_parameters",
        "scope",
    }
)
"""Arguments that the Bot API takes as JSON text in a form body."""

INT_FIELDS = frozenset(
    {
        "cache_time",
        "limit",
        "max_connections",
        "message_id",
        "message_thread_id",
        "offset",
        "reply_to_message_id",
        "timeout",
    }
)

BOOL_FIELDS = frozenset(
    {
        "allow_paid_broadcast",
        "allow_sending_without_reply",
        "disable_notification",
        "disable_web_page_preview",
        "drop_pending_updates",
        "protect_content",
        "show_alert",
    }
)

_METHODS = {
    name.lower(): name
    for name in (
        "getMe",
        "getChat",
        "createForumTopic",
        "logOut",
        "close",
        "sendMessage",
        "editMessageText",
        "editMessageReplyMarkup",
        "answerCallbackQuery",
        "setWebhook",
        "deleteWebhook",
        "getWebhookInfo",
        "getUpdates",
        "setMyCommands",
        "getMyCommands",
        "deleteMyCommands",
    )
}


class _ApiError(Exception):
    def __init__(
        self, code: int, description: str, parameters: dict[str, Any] | None = None
    ) -> None:
        super().__init__(description)
        self.code = code
        self.description = description
        self.parameters = parameters


def _bad_request(message: str) -> _ApiError:
    """A 400 worded as the Bot API words it (its fail_query_with_error)."""
    if message.startswith("Bad Request"):
        return _ApiError(400, message)
    # Upper-case codes such as BUTTON_DATA_INVALID keep their case; sentences lose their capital.
    if len(message) >= 2 and (message[1] == "_" or "A" <= message[1] <= "Z"):
        return _ApiError(400, f"Bad Request: {message}")
    return _ApiError(400, f"Bad Request: {message[:1].lower()}{message[1:]}")


_JSON_ERRORS = {
    "reply_markup": "Can't parse reply keyboard markup JSON object",
    "reply_parameters": "Can't parse reply parameters JSON object",
    "link_preview_options": "Can't parse link preview options JSON object",
    "entities": "Can't parse entities JSON object",
    "allowed_updates": "Can't parse allowed_updates JSON object",
    "commands": "Can't parse commands JSON object",
    "scope": "Can't parse BotCommandScope JSON object",
}


def _normalize(raw: Mapping[str, Any]) -> tuple[dict[str, Any], _ApiError | None]:
    """Type the arguments as the Bot API reads them; the first JSON-text error, if any."""
    args = dict(raw)
    error: _ApiError | None = None
    for name in JSON_FIELDS & args.keys():
        value = args[name]
        if isinstance(value, str):
            if not value:
                args[name] = None
                continue
            try:
                args[name] = json.loads(value)
            except ValueError:
                error = error or _bad_request(_JSON_ERRORS[name])
    for name in INT_FIELDS & args.keys():
        if isinstance(args[name], str) and re.fullmatch(r"-?\d+", args[name].strip()):
            args[name] = int(args[name])
    for name in BOOL_FIELDS & args.keys():
        value = args[name]
        if isinstance(value, str) and value.lower() in ("true", "1", "false", "0", ""):
            args[name] = value.lower() in ("true", "1")
    chat_id = args.get("chat_id")
    if isinstance(chat_id, str) and re.fullmatch(r"-?\d+", chat_id.strip()):
        args["chat_id"] = int(chat_id)
    return args, error


def _int(value: Any) -> int:
    """The Bot API's reading of an integer argument: anything unreadable is 0."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    return 0


def _clamped(args: Mapping[str, Any], name: str, default: int, low: int, high: int) -> int:
    """The Bot API's get_integer_arg: the default when absent, else clamped into range."""
    if args.get(name) in (None, ""):
        return default
    return min(max(_int(args[name]), low), high)


def _text_arg(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


def _commands_key(scope: Any, language_code: str) -> str:
    scope = scope if isinstance(scope, dict) and scope else {"type": "default"}
    return json.dumps([scope, language_code], sort_keys=True)


def _reply_parameters(args: dict[str, Any]) -> tuple[int, Any, bool]:
    """(message_id, chat_id or None, allow_sending_without_reply), as the Bot API reads them."""
    if "reply_parameters" not in args:
        return (
            _int(args.get("reply_to_message_id")),
            None,
            bool(args.get("allow_sending_without_reply")),
        )
    value = args["reply_parameters"]
    if value is None:
        return 0, None, False
    if not isinstance(value, dict):
        raise _bad_request("Object expected as reply parameters")
    if not value:
        return 0, None, False
    if "message_id" not in value:
        raise _bad_request('Can\'t find field "message_id"')
    message_id = value["message_id"]
    if isinstance(message_id, str) and re.fullmatch(r"-?\d+", message_id):
        message_id = int(message_id)
    if not isinstance(message_id, int) or isinstance(message_id, bool):
        raise _bad_request('Field "message_id" must be a valid Number')
    allow = value.get("allow_sending_without_reply", False)
    if not isinstance(allow, bool):
        raise _bad_request('Field "allow_sending_without_reply" must be of type Boolean')
    return max(message_id, 0), value.get("chat_id"), allow
