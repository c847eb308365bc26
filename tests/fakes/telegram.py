"""A fake Telegram for tests: the Bot API over real HTTP, and the updates Telegram sends a bot.

`FakeTelegram` is an aiohttp server on 127.0.0.1 that answers ``POST`` (or ``GET``)
``/bot{token}/{method}`` the way https://api.telegram.org does, for the methods signoff uses:
``getMe``, ``sendMessage``, ``editMessageText``, ``editMessageReplyMarkup``,
``answerCallbackQuery``, ``setWebhook``, ``deleteWebhook``, ``getWebhookInfo``, ``getUpdates``,
``setMyCommands``, ``getMyCommands``, ``deleteMyCommands``, ``close`` and ``logOut``.
``fake.base_url`` is the value for ``Bot(token, base_url=...)`` and
``Application.builder().token(token).base_url(...)``: python-telegram-bot ("PTB") appends the
token, then ``/method``.

What is faithful (taken from the Bot API server's source, tdlib/telegram-bot-api Client.cpp,
and tdlib's MessageEntity.cpp, where its HTML parser lives):

- Arguments come from the query string, a form-encoded, multipart or JSON body, and method names
  are case-insensitive. PTB sends every request form-encoded, with integers as decimal text,
  booleans as ``true``/``false`` and objects (``reply_markup``, ``reply_parameters``,
  ``allowed_updates``, ...) as JSON text; each `Call` records them decoded and typed.
- Every answer is ``{"ok": true, "result": ...}`` (setWebhook and deleteWebhook add Telegram's
  ``description``) or ``{"ok": false, "error_code": N, "description": "..."}`` with HTTP status
  N. Descriptions are Telegram's, including its casing rule: after ``Bad Request: `` the first
  letter is lowered unless the message is an upper-case code (``Bad Request:
  BUTTON_DATA_INVALID``). A token of the bot-id form that is not the fake's answers 401
  ``Unauthorized``, a malformed one 404 ``Not Found``; an unknown method 404 ``Not Found``.
- ``sendMessage`` validates in Telegram's order: text (``message text is empty``), entity
  parsing, reply parameters and markup syntax, the chat (``chat_id is empty``, ``chat not
  found``, or a 403 set with `FakeTelegram.block`), the replied message (``message to be
  replied not found`` unless ``allow_sending_without_reply``), then content (``text must be
  non-empty`` for blank text, ``message is too long`` above 4096 UTF-16 code units,
  ``BUTTON_DATA_INVALID`` for callback_data over 64 bytes, bad button URLs).
- ``parse_mode=HTML`` is parsed by a port of tdlib's ``parse_html``: the tags b, strong, i, em,
  u, ins, s, strike, del, span class="tg-spoiler", tg-spoiler, a href, code (class
  "language-x" inside pre), pre, blockquote [expandable] and tg-emoji; the entities ``&lt;``
  ``&gt;`` ``&amp;`` ``&quot;`` and numeric ones (the ``;`` optional). Errors read as
  Telegram's: ``can't parse entities: Unsupported start tag "x" at byte offset N``, ``Can't
  find end tag corresponding to start tag "b"``, ``Unmatched end tag at byte offset N,
  expected "</i>", found "</b>"``... Note that, as in Telegram, a bare ``&`` or ``>`` is kept
  as text; only a ``<`` that opens no supported tag fails. Then, as tdlib's
  ``fix_formatted_text`` does: control characters become spaces, ``\\r`` is dropped, entities
  are sorted, nested ones split where Telegram splits them, adjacent equal ones merged, the text
  trimmed of leading and trailing spaces and newlines, and text_link URLs normalized
  (``https://example.com`` becomes ``https://example.com/``; an invalid URL drops the link).
  Offsets and lengths are in UTF-16 code units.
- Like Telegram, it finds url, email, mention, hashtag, cashtag and bot_command entities in
  sent text (outside code, pre and links) and in the messages `text_message` builds; but URLs
  only with a scheme (``https://``, ``http://``, ``ftp://``, ``tg://``) or ``www.``, where
  Telegram also links bare domains such as ``example.com``.
- The answered Message has ``message_id`` (increasing per chat), ``from`` (the bot; a channel
  post has ``sender_chat`` instead), ``chat`` (private for positive ids, supergroup for
  ``-100...`` ids, group for other negative ids, unless given with `FakeTelegram.add_chat` or
  learnt from an update), ``date``, ``reply_to_message`` (the stored message, without its own
  reply), ``text``, ``entities`` and ``reply_markup`` -- only for an inline keyboard, as
  Telegram echoes no other markup.
- ``editMessageText`` without ``reply_markup`` removes the message's keyboard, as on Telegram;
  an edit that changes neither content nor keyboard fails with ``message is not modified: ...``.
- ``getUpdates`` answers updates given to `FakeTelegram.push_update`, confirming those below
  ``offset`` (a negative offset keeps the last ones), honouring ``limit``, ``allowed_updates``
  (applied when an update is pushed, as Telegram applies it when it creates one) and
  ``timeout`` as a long poll, capped at ``long_poll_cap`` seconds. A second long poll ends the
  first with 409 ``Conflict: terminated by other getUpdates request; ...``, setWebhook ends it
  with ``Conflict: terminated by setWebhook request``, and getUpdates while a webhook is set
  answers 409 ``Conflict: can't use getUpdates method while webhook is active; ...``.
- Forum topics: `FakeTelegram.create_forum_topic` (or the ``createForumTopic`` method) makes a
  supergroup a forum and opens a topic whose root is the ``forum_topic_created`` service
  message, its ``message_id`` the topic's ``message_thread_id``. ``sendMessage`` with
  ``message_thread_id`` posts into the topic (``message thread not found`` for one that does
  not exist), and a reply lands in the topic of the message it replies to; both answer
  ``message_thread_id`` and ``is_topic_message``, as Telegram does in a forum.
- A chat's fate can be set: `FakeTelegram.block` (403, e.g. ``Forbidden: bot was blocked by
  the user``), `FakeTelegram.lose_chat` (400 ``chat not found``), `FakeTelegram.restrict`
  (sendMessage answers 400 ``not enough rights to send text messages to the chat``) and
  `FakeTelegram.migrate` (a basic group upgraded to a supergroup: every call naming the old id
  answers 400 ``group chat was upgraded to a supergroup chat`` with
  ``parameters.migrate_to_chat_id``, and its messages keep their ids under the new one).
- Failures can be injected: `FakeTelegram.rate_limit_next` (HTTP 429 with ``Retry-After`` and
  ``"parameters": {"retry_after": N}``) and `FakeTelegram.fail_next` (HTTP 5xx with nginx's
  HTML page, no JSON).

What is not: setWebhook accepts ``http://`` URLs on any port (Telegram wants HTTPS on port 443,
80, 88 or 8443 and a public address) and does not rate-limit itself to one call a second;
Markdown parse modes answer a 400 that says the fake lacks them; ``tg://user?id=`` links stay
text_link entities (Telegram makes them text_mention); ``input_field_placeholder`` length is not
checked; inline messages and media are not supported; the fake never expires callback queries
(only a second answer to one fails, with ``query is too old and response timeout expired or
query ID is invalid``).

Every request is recorded as a `Call`. Messages the fake sent, edited or was pushed are kept
(`FakeTelegram.message`, `FakeTelegram.messages_in`) as Message dicts plus one non-API key,
`RAW_TEXT` (``"raw_text"``): the text exactly as last sent, e.g. the HTML before parsing. The
builders below drop that key, so a stored message can go straight into a reply or a button
click. Use the fake inside a test's event loop (``async with FakeTelegram() as tg:``) or, for
tests that drive a subprocess, on a loop of its own (``with FakeTelegram.in_thread() as tg:``).

The module functions build what Telegram sends to a bot (`user`, `private_chat`, `group_chat`,
`text_message`, `callback_query`), shaped as Telegram posts them to a webhook; `webhook_body`
and `webhook_headers` give the request (a JSON body, and `SECRET_HEADER` carrying the
secret_token given to setWebhook). `FakeTelegram.deliver` posts an update to the webhook set,
as Telegram would.
"""

from __future__ import annotations

import asyncio
import copy
import http
import ipaddress
import itertools
import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from tests.fakes.recording import Call, RecordingFake

__all__ = [
    "ANONYMOUS_ADMIN",
    "RAW_TEXT",
    "SECRET_HEADER",
    "Call",
    "FakeTelegram",
    "callback_query",
    "group_chat",
    "media_message",
    "private_chat",
    "text_message",
    "user",
    "webhook_body",
    "webhook_headers",
]

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
"""The header in which Telegram sends a webhook the secret_token given to setWebhook."""

ANONYMOUS_ADMIN = {
    "id": 1087968824,
    "is_bot": True,
    "first_name": "Group",
    "username": "GroupAnonymousBot",
}
"""Who Telegram names in ``from`` of an anonymous group admin's message (``sender_chat`` is
the group itself)."""

RAW_TEXT = "raw_text"
"""The non-API key of stored messages holding the text as last sent (HTML before parsing)."""

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

MAX_TEXT_LENGTH = 4096
MAX_CALLBACK_DATA_BYTES = 64
MAX_CALLBACK_ANSWER_LENGTH = 200
_NOT_MODIFIED = (
    "message is not modified: specified new message content and reply markup are exactly the "
    "same as a current content and reply markup of the message"
)
_QUERY_ID_INVALID = "query is too old and response timeout expired or query ID is invalid"
# Telegram leaves these out of getUpdates unless asked for by allowed_updates.
_NOT_DEFAULT_UPDATES = frozenset({"chat_member", "message_reaction", "message_reaction_count"})
_MESSAGE_UPDATES = (
    "message",
    "edited_message",
    "channel_post",
    "edited_channel_post",
    "business_message",
    "edited_business_message",
)
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


class FakeTelegram(RecordingFake):
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

    def message(self, chat_id: int | str, message_id: int) -> dict[str, Any] | None:
        """The message as it stands now (after any edit), with `RAW_TEXT`; or None."""
        with self._lock:
            key = self._chat_key(chat_id)
            found = self._messages.get((key, int(message_id))) if key is not None else None
            return copy.deepcopy(found) if found is not None else None

    def messages_in(self, chat_id: int | str) -> list[dict[str, Any]]:
        """Every message kept for a chat, by message_id."""
        with self._lock:
            key = self._chat_key(chat_id)
            found = [m for (c, _), m in self._messages.items() if c == key]
            return copy.deepcopy(sorted(found, key=lambda m: m["message_id"]))

    def callback_answer(self, query_id: str) -> dict[str, Any] | None:
        """The arguments of the answerCallbackQuery that answered `query_id`, or None."""
        with self._lock:
            found = self._answered_queries.get(str(query_id))
            return copy.deepcopy(found) if found is not None else None

    @property
    def webhook(self) -> dict[str, Any] | None:
        """The webhook set (url, secret_token, max_connections, allowed_updates), or None."""
        with self._lock:
            return copy.deepcopy(self._webhook)

    @property
    def pending_updates(self) -> list[dict[str, Any]]:
        """Updates pushed and not yet confirmed by getUpdates."""
        with self._lock:
            return copy.deepcopy(self._updates)

    def commands(
        self, scope: Mapping[str, Any] | None = None, language_code: str = ""
    ) -> list[dict[str, Any]]:
        """The commands set with setMyCommands for a scope (default scope when None)."""
        with self._lock:
            return copy.deepcopy(self._commands.get(_commands_key(scope, language_code), []))

    # ----------------------------------------------------------------------------------------
    # the world around the bot

    def add_chat(self, chat: Mapping[str, Any]) -> None:
        """Make a chat known as given (e.g. `group_chat(...)` or a channel with a username)."""
        with self._lock:
            self._chats[int(chat["id"])] = copy.deepcopy(dict(chat))

    def block(
        self, chat_id: int, description: str = "Forbidden: bot was blocked by the user"
    ) -> None:
        """Answer 403 `description` to messages for `chat_id`, e.g. ``"Forbidden: bot can't
        initiate conversation with a user"`` for a user who never started the bot."""
        with self._lock:
            self._blocked[int(chat_id)] = description

    def unblock(self, chat_id: int) -> None:
        with self._lock:
            self._blocked.pop(int(chat_id), None)

    def lose_chat(self, chat_id: int) -> None:
        """Answer 400 ``chat not found`` for `chat_id` (the bot was never in it, or it is
        gone)."""
        with self._lock:
            self._lost.add(int(chat_id))

    def restrict(self, chat_id: int) -> None:
        """The bot may no longer post in `chat_id` (an admin took its right to send messages):
        sendMessage answers 400 ``not enough rights to send text messages to the chat``."""
        with self._lock:
            self._restricted.add(int(chat_id))

    def migrate(
        self, old_id: int, new_id: int, by: Mapping[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Upgrade the basic group `old_id` to the supergroup `new_id`, as Telegram does: the
        messages move with their ids, and every later call naming `old_id` answers 400 with
        ``parameters.migrate_to_chat_id``. Returns the two service messages Telegram sends the
        bot, ``migrate_to_chat_id`` in the old group and ``migrate_from_chat_id`` in the new
        one (each an update for `push_update` or a webhook)."""
        sender = dict(by) if by is not None else user(42, "Admin")
        with self._lock:
            old = self._chats.get(int(old_id)) or group_chat(old_id, type="group")
            new = {**group_chat(new_id, str(old.get("title", "Group")), "supergroup")}
            self._chats[int(new_id)] = new
            for (chat_id, message_id), message in list(self._messages.items()):
                if chat_id == int(old_id):
                    moved = {**copy.deepcopy(message), "chat": copy.deepcopy(new)}
                    self._messages[(int(new_id), message_id)] = moved
            self._next_message_id[int(new_id)] = self._next_message_id.get(int(old_id), 1)
            self._migrated[int(old_id)] = int(new_id)
            now = int(time.time())
            to_id = self._take_message_id(int(old_id))
            from_id = self._take_message_id(int(new_id))
            told = {
                "message_id": to_id,
                "from": sender,
                "chat": copy.deepcopy(old),
                "date": now,
                "migrate_to_chat_id": int(new_id),
            }
            started = {
                "message_id": from_id,
                "from": sender,
                "chat": copy.deepcopy(new),
                "date": now,
                "migrate_from_chat_id": int(old_id),
            }
            return (
                {"update_id": next(self._update_seq), "message": told},
                {"update_id": next(self._update_seq), "message": started},
            )

    def create_forum_topic(
        self, chat_id: int, name: str = "Approvals", by: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Open a topic in the supergroup `chat_id` (made a forum), created by `by` (the bot
        when None). Returns the topic's root message, the ``forum_topic_created`` service
        message whose message_id is the topic's message_thread_id."""
        with self._lock:
            return self._open_topic(int(chat_id), name, by)

    def _open_topic(self, chat_id: int, name: str, by: Mapping[str, Any] | None) -> dict[str, Any]:
        chat = self._chat(chat_id)
        if chat.get("type") != "supergroup":
            raise _bad_request("the chat is not a forum")
        chat["is_forum"] = True
        thread_id = self._take_message_id(chat_id)
        root = {
            "message_id": thread_id,
            "message_thread_id": thread_id,
            "from": dict(by) if by is not None else self.bot_user,
            "chat": copy.deepcopy(chat),
            "date": int(time.time()),
            "forum_topic_created": {"name": name, "icon_color": 7322096},
            "is_topic_message": True,
        }
        self._topics.setdefault(chat_id, set()).add(thread_id)
        self._messages[(chat_id, thread_id)] = root
        return copy.deepcopy(root)

    def next_update_id(self) -> int:
        """A fresh update_id, above any pushed so far."""
        with self._lock:
            return next(self._update_seq)

    def next_message_id(self, chat_id: int) -> int:
        """Reserve the next message_id of a chat, for a message a user is about to send."""
        with self._lock:
            return self._take_message_id(int(chat_id))

    def push_update(self, update: Mapping[str, Any]) -> dict[str, Any]:
        """Queue an update for getUpdates (an update_id is assigned when missing).

        Its messages are kept (see `message`) and its chats learnt. As on Telegram, an update of
        a type left out by the allowed_updates in force is dropped. Returns the update.
        """
        with self._lock:
            pushed = self._learn(update)
            kinds = {k for k in pushed if k != "update_id"}
            if self._allowed_updates:
                wanted = kinds <= set(self._allowed_updates)
            else:
                wanted = not kinds & _NOT_DEFAULT_UPDATES
            if wanted:
                self._updates.append(pushed)
            return copy.deepcopy(pushed)

    async def deliver(self, update: Mapping[str, Any]) -> int:
        """Post `update` to the webhook set, as Telegram does; return the HTTP status answered.

        The request has a JSON body and, if setWebhook was given one, the secret token in
        `SECRET_HEADER`. A non-2xx answer or a connection failure (which is re-raised) is
        reported by getWebhookInfo as ``last_error_message``, as Telegram reports it. An answer
        that is a JSON object with a ``"method"`` is executed, as Telegram executes it.
        """
        url, headers, body = self._delivery(update)
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.post(url, data=body, headers=headers) as resp,
            ):
                status, reason, answer = resp.status, resp.reason or "", await resp.read()
        except aiohttp.ClientError as exc:
            self._note_delivery_error(_connection_error(exc))
            raise
        self.answered(status, reason, answer)
        return status

    def deliver_sync(self, update: Mapping[str, Any]) -> int:
        """`deliver` from a plain thread (e.g. with a fake run `in_thread`)."""
        url, headers, body = self._delivery(update)
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as resp:
                status, reason, answer = resp.status, resp.reason or "", resp.read()
        except urllib.error.HTTPError as exc:
            status, reason, answer = exc.code, exc.reason or "", exc.read()
        except OSError as exc:
            self._note_delivery_error(_connection_error(exc))
            raise
        self.answered(status, reason, answer)
        return status

    def _delivery(self, update: Mapping[str, Any]) -> tuple[str, dict[str, str], bytes]:
        with self._lock:
            if self._webhook is None:
                raise RuntimeError("no webhook is set (call setWebhook first)")
            learnt = self._learn(update)
            return (
                self._webhook["url"],
                webhook_headers(self._webhook["secret_token"] or None),
                webhook_body(learnt),
            )

    def answered(self, status: int, reason: str, answer: bytes) -> None:
        """What Telegram does with a webhook's answer to an update: a non-2xx is kept as
        getWebhookInfo's ``last_error_message``; a 2xx body that is a JSON object with a
        ``"method"`` is run as that call (recorded like any other). For tests that post
        updates themselves instead of with `deliver`."""
        if not 200 <= status < 300:
            self._note_delivery_error(f"Wrong response from the webhook: {status} {reason}")
            return
        try:
            request = json.loads(answer) if answer.strip() else None
        except ValueError:
            return
        if isinstance(request, dict) and isinstance(request.get("method"), str):
            args = _normalize({k: v for k, v in request.items() if k != "method"})[0]
            name = _METHODS.get(request["method"].lower(), request["method"])
            try:
                if name not in _METHODS.values() or name == "getUpdates":
                    raise _ApiError(404, "Not Found")
                with self._lock:
                    result, _ = self._dispatch(name, args)
                self._record(Call(name, args, 200, None, {"ok": True, "result": result}))
            except _ApiError as e:
                self._record(Call(name, args, e.code, e.description, None))

    def _note_delivery_error(self, message: str) -> None:
        with self._lock:
            self._last_webhook_error = (int(time.time()), message)

    def _learn(self, update: Mapping[str, Any]) -> dict[str, Any]:
        """Keep the messages and chats of an inbound update; give it an update_id if needed."""
        learnt = _api(copy.deepcopy(dict(update)))
        if "update_id" not in learnt:
            learnt = {"update_id": next(self._update_seq), **learnt}
        else:
            seen = int(learnt["update_id"])
            current = next(self._update_seq)
            self._update_seq = itertools.count(max(current, seen + 1))
        for kind in _MESSAGE_UPDATES:
            if isinstance(learnt.get(kind), dict):
                self._keep_inbound(learnt[kind])
        query = learnt.get("callback_query")
        if isinstance(query, dict) and isinstance(query.get("message"), dict):
            chat = query["message"].get("chat")
            if isinstance(chat, dict) and "id" in chat:
                self._chats.setdefault(int(chat["id"]), copy.deepcopy(chat))
        return learnt

    def _keep_inbound(self, message: dict[str, Any]) -> None:
        chat = message.get("chat")
        if not isinstance(chat, dict) or "id" not in chat or "message_id" not in message:
            return
        chat_id, message_id = int(chat["id"]), int(message["message_id"])
        self._chats[chat_id] = copy.deepcopy(chat)
        kept = copy.deepcopy(message)
        if "text" in kept:
            kept[RAW_TEXT] = kept["text"]
        self._messages[(chat_id, message_id)] = kept
        self._next_message_id[chat_id] = max(self._next_message_id.get(chat_id, 1), message_id + 1)

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

    def _chat_key(self, chat_id: int | str) -> int | None:
        if isinstance(chat_id, str) and chat_id.startswith("@"):
            wanted = chat_id[1:].lower()
            for known in self._chats.values():
                if str(known.get("username", "")).lower() == wanted:
                    return int(known["id"])
            return None
        try:
            return int(chat_id)
        except (TypeError, ValueError):
            return None

    def _chat(self, chat_id: Any) -> dict[str, Any]:
        if chat_id is None or chat_id == "":
            raise _bad_request("chat_id is empty")
        key = self._chat_key(chat_id)
        if key is None or key == 0:
            raise _bad_request("chat not found")
        if key in self._lost:
            raise _bad_request("chat not found")
        if key in self._migrated:
            raise _ApiError(
                400,
                "Bad Request: group chat was upgraded to a supergroup chat",
                {"migrate_to_chat_id": self._migrated[key]},
            )
        chat = self._chats.get(key)
        if chat is None:
            if key > 0:
                chat = {"id": key, "first_name": f"User {key}", "type": "private"}
            elif str(key).startswith("-100"):
                chat = {"id": key, "title": f"Group {key}", "type": "supergroup"}
            else:
                chat = {"id": key, "title": f"Group {key}", "type": "group"}
            self._chats[key] = chat
        if key in self._blocked:
            raise _ApiError(403, self._blocked[key])
        return chat

    def _take_message_id(self, chat_id: int) -> int:
        message_id = self._next_message_id.get(chat_id, 1)
        self._next_message_id[chat_id] = message_id + 1
        return message_id

    def _send_message(self, args: dict[str, Any]) -> dict[str, Any]:
        raw_text = _text_arg(args.get("text"))
        if not raw_text:
            raise _bad_request("Message text is empty")
        parsed = _parse_input(raw_text, args.get("parse_mode"), args.get("entities"))
        reply_id, reply_chat, allow_without = _reply_parameters(args)
        markup = _reply_markup(args.get("reply_markup"))
        chat = self._chat(args.get("chat_id"))
        chat_id = int(chat["id"])
        if chat_id in self._restricted:
            raise _bad_request("not enough rights to send text messages to the chat")
        thread_id = _int(args.get("message_thread_id"))
        if chat.get("is_forum") and thread_id and thread_id not in self._topics.get(chat_id, ()):
            raise _bad_request("message thread not found")
        replied: dict[str, Any] | None = None
        if reply_id > 0:
            in_chat = chat_id if reply_chat is None else self._chat_key(reply_chat)
            replied = self._messages.get((in_chat, reply_id)) if in_chat is not None else None
            if replied is None and not allow_without:
                raise _bad_request("message to be replied not found")
        if chat.get("is_forum") and not thread_id and replied is not None:
            # A reply lands in the topic of the message it answers.
            thread_id = _int(replied.get("message_thread_id"))
        text, entities = _finish_text(*parsed)
        echoed = _check_markup_content(markup)

        message: dict[str, Any] = {"message_id": self._take_message_id(chat_id)}
        if chat.get("type") == "channel":
            message["sender_chat"] = copy.deepcopy(chat)
        else:
            message["from"] = self.bot_user
        if chat.get("is_forum") and thread_id:
            message["message_thread_id"] = thread_id
        message.update({"chat": copy.deepcopy(chat), "date": int(time.time())})
        if replied is not None:
            message["reply_to_message"] = _without_reply(replied)
        elif chat.get("is_forum") and thread_id:
            # In a topic, a message that replies to nothing replies to the topic's root.
            root = self._messages.get((chat_id, thread_id))
            if root is not None:
                message["reply_to_message"] = _without_reply(root)
        if chat.get("is_forum") and thread_id:
            message["is_topic_message"] = True
        message["text"] = text
        if entities:
            message["entities"] = entities
        preview = args.get("link_preview_options")
        if isinstance(preview, dict) and any(preview.values()):
            message["link_preview_options"] = {k: v for k, v in preview.items() if v}
        if echoed is not None:
            message["reply_markup"] = echoed
        self._messages[(chat_id, message["message_id"])] = {**message, RAW_TEXT: raw_text}
        return _api(copy.deepcopy(message))

    def _message_to_edit(self, args: dict[str, Any]) -> dict[str, Any]:
        chat_id, message_id = args.get("chat_id"), _int(args.get("message_id"))
        if (chat_id is None or chat_id == "") and message_id == 0:
            if not args.get("inline_message_id"):
                raise _bad_request("Message identifier is not specified")
            raise _bad_request("MESSAGE_ID_INVALID")
        chat = self._chat(chat_id)
        found = self._messages.get((int(chat["id"]), message_id)) if message_id > 0 else None
        if found is None:
            raise _bad_request("message to edit not found")
        sender = found.get("from") or {}
        if sender.get("id") != self.bot_id and "sender_chat" not in found:
            raise _bad_request("Message can't be edited")
        return found

    def _edit_message_text(self, args: dict[str, Any]) -> dict[str, Any]:
        raw_text = _text_arg(args.get("text"))
        if not raw_text:
            raise _bad_request("Message text is empty")
        parsed = _parse_input(raw_text, args.get("parse_mode"), args.get("entities"))
        markup = _reply_markup(args.get("reply_markup"))
        found = self._message_to_edit(args)
        text, entities = _finish_text(*parsed)
        echoed = _inline_only(markup)
        same_content = found.get("text") == text and found.get("entities", []) == entities
        if same_content and found.get("reply_markup") == echoed:
            raise _bad_request(_NOT_MODIFIED)
        found["edit_date"] = int(time.time())
        found["text"] = text
        found.pop("entities", None)
        if entities:
            found["entities"] = entities
        found.pop("reply_markup", None)
        if echoed is not None:
            found["reply_markup"] = echoed
        found[RAW_TEXT] = raw_text
        # edit_date sits after date in Telegram's JSON; rebuild so dumps read the same.
        ordered = _ordered_message(found)
        self._messages[(int(found["chat"]["id"]), int(found["message_id"]))] = ordered
        return _api(copy.deepcopy(ordered))

    def _edit_message_reply_markup(self, args: dict[str, Any]) -> dict[str, Any]:
        markup = _reply_markup(args.get("reply_markup"))
        found = self._message_to_edit(args)
        echoed = _inline_only(markup)
        if found.get("reply_markup") == echoed:
            raise _bad_request(_NOT_MODIFIED)
        found.pop("reply_markup", None)
        if echoed is not None:
            found["reply_markup"] = echoed
        return _api(copy.deepcopy(found))

    def _answer_callback_query(self, args: dict[str, Any]) -> bool:
        query_id = str(args.get("callback_query_id") or "")
        if not query_id.isdigit() or int(query_id) == 0 or query_id in self._answered_queries:
            raise _bad_request(_QUERY_ID_INVALID)
        text = _text_arg(args.get("text"))
        if len(text) > MAX_CALLBACK_ANSWER_LENGTH:
            raise _bad_request("MESSAGE_TOO_LONG")
        self._answered_queries[query_id] = dict(args)
        return True

    def _set_webhook(self, args: dict[str, Any], is_set: bool) -> str:
        url = _text_arg(args.get("url")) if is_set else ""
        drop = bool(args.get("drop_pending_updates"))
        if not url:
            if drop:
                self._updates.clear()
            was_set, self._webhook = self._webhook is not None, None
            return "Webhook was deleted" if was_set else "Webhook is already deleted"
        parts = urlsplit(url)
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            raise _bad_request("invalid webhook URL specified")
        secret = _text_arg(args.get("secret_token"))
        if len(secret) > 256:
            raise _bad_request("secret token is too long")
        if not re.fullmatch(r"[A-Za-z0-9_-]*", secret):
            raise _bad_request("secret token contains unallowed characters")
        self._set_allowed_updates(args.get("allowed_updates"))
        max_connections = _clamped(args, "max_connections", 40, 1, 100)
        wanted = {
            "url": url,
            "secret_token": secret,
            "max_connections": max_connections,
            "allowed_updates": list(self._allowed_updates),
        }
        if self._webhook == wanted and not drop:
            return "Webhook is already set"
        # A pending long poll ends as Telegram ends it when a webhook takes over.
        self._poll_aborts[self._poll_ticket] = "Conflict: terminated by setWebhook request"
        self._poll_ticket += 1
        if drop:
            self._updates.clear()
        self._webhook = wanted
        self._last_webhook_error = None
        return "Webhook was set"

    def _set_allowed_updates(self, allowed: Any) -> None:
        if isinstance(allowed, list):
            self._allowed_updates = [str(a) for a in allowed]

    def _get_webhook_info(self) -> dict[str, Any]:
        hook = self._webhook
        info: dict[str, Any] = {
            "url": hook["url"] if hook else "",
            "has_custom_certificate": False,
            "pending_update_count": len(self._updates),
        }
        if hook and self._last_webhook_error is not None:
            info["last_error_date"], info["last_error_message"] = self._last_webhook_error
        if hook:
            info["max_connections"] = hook["max_connections"]
            info["ip_address"] = _ip_of(hook["url"])
        if self._allowed_updates:
            info["allowed_updates"] = list(self._allowed_updates)
        return info

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

    async def _get_updates(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        offset = _int(args.get("offset"))
        limit = _clamped(args, "limit", 100, 1, 100)
        timeout = _clamped(args, "timeout", 0, 0, 50)
        with self._lock:
            if self._webhook is not None:
                raise _ApiError(
                    409,
                    "Conflict: can't use getUpdates method while webhook is active; use "
                    "deleteWebhook to delete the webhook first",
                )
            self._set_allowed_updates(args.get("allowed_updates"))
            ready = self._confirm_and_take(offset, limit)
            if ready or timeout == 0:
                return ready
            # Telegram ends an older long poll when a new one starts waiting.
            self._poll_aborts[self._poll_ticket] = (
                "Conflict: terminated by other getUpdates request; make sure that only one bot "
                "instance is running"
            )
            self._poll_ticket += 1
            ticket = self._poll_ticket
        deadline = time.monotonic() + min(timeout, self.long_poll_cap)
        while True:
            await asyncio.sleep(0.01)
            with self._lock:
                aborted = self._poll_aborts.pop(ticket, None)
                if aborted is not None:
                    raise _ApiError(409, aborted)
                if self._closing:
                    return []
                ready = self._confirm_and_take(offset, limit)
                if ready:
                    return ready
            if time.monotonic() >= deadline:
                return []

    def _confirm_and_take(self, offset: int, limit: int) -> list[dict[str, Any]]:
        if offset < 0:
            del self._updates[: max(len(self._updates) + offset, 0)]
        elif offset > 0:
            self._updates = [u for u in self._updates if int(u["update_id"]) >= offset]
        return copy.deepcopy(self._updates[:limit])


# --------------------------------------------------------------------------------------------
# arguments


def _json_response(answer: dict[str, Any], status: int) -> web.Response:
    return web.json_response(
        answer,
        status=status,
        dumps=lambda o: json.dumps(o, ensure_ascii=False, separators=(",", ":")),
    )


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


def _ip_of(url: str) -> str:
    host = urlsplit(url).hostname or ""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return "127.0.0.1" if host == "localhost" else "<unknown>"


def _connection_error(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError) or "refused" in str(exc).lower():
        return "Connection refused"
    return f"Connection error: {exc}"


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


# --------------------------------------------------------------------------------------------
# reply markup


@dataclass
class _Markup:
    kind: str  # "inline", "keyboard", "remove" or "force_reply"
    rows: list[list[dict[str, Any]]]


_INLINE_ACTIONS = (
    "callback_game",
    "pay",
    "switch_inline_query",
    "switch_inline_query_chosen_chat",
    "switch_inline_query_current_chat",
    "login_url",
    "web_app",
    "copy_text",
)


def _reply_markup(value: Any) -> _Markup | None:
    """The markup as the Bot API parses it (get_reply_markup); syntax errors raise here."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _bad_request("Object expected as reply markup")
    for name in ("keyboard", "inline_keyboard"):
        if name in value and not isinstance(value[name], list):
            raise _bad_request(f'Field "{name}" must be of type Array')
    rows: list[list[dict[str, Any]]] = []
    for row in value.get("keyboard") or []:
        if not isinstance(row, list):
            raise _bad_request('Field "keyboard" must be an Array of Arrays')
        rows.append([_keyboard_button(b) for b in row])
    inline_rows: list[list[dict[str, Any]]] = []
    for row in value.get("inline_keyboard") or []:
        if not isinstance(row, list):
            raise _bad_request(
                'Field "inline_keyboard" of the InlineKeyboardMarkup must be an Array of Arrays'
            )
        inline_rows.append([_inline_button(b) for b in row])
    flags = {}
    for name in (
        "hide_keyboard",
        "remove_keyboard",
        "personal_keyboard",
        "selective",
        "force_reply_keyboard",
        "force_reply",
        "resize_keyboard",
        "one_time_keyboard",
        "is_persistent",
    ):
        flag = value.get(name, False)
        if not isinstance(flag, bool):
            raise _bad_request(f'Field "{name}" must be of type Boolean')
        flags[name] = flag
    placeholder = value.get("input_field_placeholder", "")
    if not isinstance(placeholder, str):
        raise _bad_request('Field "input_field_placeholder" must be of type String')
    if rows:
        return _Markup("keyboard", rows)
    if inline_rows:
        return _Markup("inline", inline_rows)
    if flags["hide_keyboard"] or flags["remove_keyboard"]:
        return _Markup("remove", [])
    if flags["force_reply"] or flags["force_reply_keyboard"]:
        return _Markup("force_reply", [])
    # An empty inline_keyboard is no markup at all: how a keyboard is removed by an edit.
    return None


def _keyboard_button(button: Any) -> dict[str, Any]:
    if isinstance(button, str):
        return {"text": button}
    if not isinstance(button, dict):
        raise _bad_request(
            "Can't parse keyboard button: KeyboardButton must be a String or an Object"
        )
    if "text" not in button:
        raise _bad_request("Can't parse keyboard button: Can't find field \"text\"")
    if not isinstance(button["text"], str):
        raise _bad_request('Can\'t parse keyboard button: Field "text" must be of type String')
    return dict(button)


def _inline_button(button: Any) -> dict[str, Any]:
    prefix = "Can't parse inline keyboard button: "
    if not isinstance(button, dict):
        raise _bad_request(prefix + "InlineKeyboardButton must be an Object")
    if "text" not in button:
        raise _bad_request(prefix + 'Can\'t find field "text"')
    if not isinstance(button["text"], str):
        raise _bad_request(prefix + 'Field "text" must be of type String')
    # The Bot API takes the first action present in this order and ignores any other.
    for name in ("url", "callback_data"):
        action = button.get(name)
        if action is not None and not isinstance(action, str):
            raise _bad_request(prefix + f'Field "{name}" must be of type String')
        if action:
            return {"text": button["text"], name: action}
    for name in _INLINE_ACTIONS:
        if name in button:
            return {"text": button["text"], name: button[name]}
    raise _bad_request(prefix + "Text buttons are unallowed in the inline keyboard")


def _check_markup_content(markup: _Markup | None) -> dict[str, Any] | None:
    """Checks Telegram makes once the chat is known; the markup a Message echoes, if any."""
    if markup is None or markup.kind != "inline":
        return None
    echoed_rows = []
    for row in markup.rows:
        echoed_row = []
        for button in row:
            echoed = dict(button)
            if "callback_data" in echoed:
                size = len(echoed["callback_data"].encode("utf-8"))
                if size > MAX_CALLBACK_DATA_BYTES:
                    raise _bad_request("BUTTON_DATA_INVALID")
            elif "url" in echoed:
                try:
                    echoed["url"] = _check_link(echoed["url"])
                except ValueError as exc:
                    raise _bad_request(
                        f"Inline keyboard button URL '{echoed['url']}' is invalid: {exc}"
                    ) from None
            elif "web_app" in echoed:
                url = str((echoed["web_app"] or {}).get("url", ""))
                if not url.lower().startswith("https://"):
                    raise _bad_request(
                        f"Inline keyboard button Web App URL '{url}' is invalid: "
                        "Only HTTPS links are allowed"
                    )
            elif "copy_text" in echoed:
                copied = str((echoed["copy_text"] or {}).get("text", ""))
                if not 1 <= len(copied) <= 256:
                    raise _bad_request("BUTTON_COPY_TEXT_INVALID")
            elif "pay" in echoed or "callback_game" in echoed:
                raise _bad_request("BUTTON_TYPE_INVALID")
            echoed_row.append(echoed)
        echoed_rows.append(echoed_row)
    return {"inline_keyboard": echoed_rows}


def _inline_only(markup: _Markup | None) -> dict[str, Any] | None:
    if markup is not None and markup.kind != "inline":
        raise _bad_request("Inline keyboard expected")
    return _check_markup_content(markup)


def _check_link(url: str) -> str:
    """tdlib's LinkManager::check_link: the normalized link, or ValueError(reason)."""
    if url.lower().startswith("tg:"):
        rest = url[3:].removeprefix("//")
        if not re.match(r"[A-Za-z0-9_-]+", rest):
            raise ValueError("Wrong tg URL")
        return "tg://" + rest
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "http", url
    if scheme.lower() not in ("http", "https"):
        raise ValueError("Unsupported URL protocol")
    match = re.match(r"(?:[^@/?#]*@)?([^:/?#]*)(:\d+)?(.*)", rest, re.S)
    if match is None or not match.group(1):
        raise ValueError("URL host is empty")
    host, port, tail = match.group(1).lower(), match.group(2) or "", match.group(3)
    if not re.fullmatch(r"[\w.~%-]+", host):
        raise ValueError("Wrong URL host")
    if "." not in host:
        raise ValueError("Wrong HTTP URL")
    if not tail.startswith("/"):
        tail = "/" + tail
    return f"{scheme.lower()}://{host}{port}{tail}"


# --------------------------------------------------------------------------------------------
# text and entities: a port of tdlib's parse_html and fix_formatted_text


_PRIORITY = {
    "bold": 90,
    "italic": 91,
    "underline": 92,
    "strikethrough": 93,
    "spoiler": 94,
    "code": 20,
    "pre": 11,
    "text_link": 49,
    "text_mention": 49,
    "blockquote": 0,
    "expandable_blockquote": 0,
    "custom_emoji": 99,
}
_SPLITTABLE = ("bold", "italic", "underline", "strikethrough", "spoiler")
_BLOCKQUOTES = frozenset({"blockquote", "expandable_blockquote"})
_PRE = frozenset({"pre", "code"})
_CONTINUOUS = frozenset(
    {
        "mention",
        "hashtag",
        "cashtag",
        "bot_command",
        "url",
        "email",
        "phone_number",
        "text_link",
        "text_mention",
        "custom_emoji",
    }
)
_ENTITY_TYPES = frozenset(_PRIORITY) | _CONTINUOUS
_HTML_TAGS = frozenset(
    {
        "a",
        "b",
        "strong",
        "i",
        "em",
        "s",
        "strike",
        "del",
        "u",
        "ins",
        "tg-spoiler",
        "tg-emoji",
        "span",
        "pre",
        "code",
        "blockquote",
    }
)
_HTML_ENTITIES = {b"lt": 0x3C, b"gt": 0x3E, b"amp": 0x26, b"quot": 0x22}


class _ParseError(Exception):
    pass


def _priority(entity: dict[str, Any]) -> int:
    if entity["type"] == "pre" and entity.get("language"):
        return 10
    return _PRIORITY.get(entity["type"], 50)


def _sort(entities: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(entities, key=lambda e: (e["offset"], -e["length"], _priority(e)))


def _end(entity: dict[str, Any]) -> int:
    return entity["offset"] + entity["length"]


def _entity(kind: str, offset: int, length: int, **extra: Any) -> dict[str, Any]:
    return {"offset": offset, "length": length, "type": kind, **extra}


def _u16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _is_space(c: int) -> bool:
    # tdlib's is_space counts the terminating NUL, which stops every scan at the end.
    return c in (0x20, 0x09, 0x0D, 0x0A, 0x00, 0x0B)


def _is_alpha(c: int) -> bool:
    return 0x41 <= c <= 0x5A or 0x61 <= c <= 0x7A


def _is_alnum(c: int) -> bool:
    return _is_alpha(c) or 0x30 <= c <= 0x39


def _decode_html_entity(t: bytes, pos: int) -> tuple[int, int]:
    """(code point, position after it), or (0, pos) when no entity starts at pos."""
    if t[pos] != 0x26:
        return 0, pos
    end = pos + 1
    code = 0
    if t[pos + 1] == 0x23:
        end += 1
        if t[pos + 2] == 0x78:
            end += 1
            while chr(t[end]) in "0123456789abcdefABCDEF":
                code = code * 16 + int(chr(t[end]), 16)
                end += 1
        else:
            while 0x30 <= t[end] <= 0x39:
                code = code * 10 + t[end] - 0x30
                end += 1
        if code == 0 or code >= 0x10FFFF or end - pos >= 10:
            return 0, pos
    else:
        while _is_alpha(t[end]):
            end += 1
        code = _HTML_ENTITIES.get(t[pos + 1 : end], 0)
        if code == 0:
            return 0, pos
    if t[end] == 0x3B:
        end += 1
    return code, end


def _parse_html(text: str) -> tuple[str, list[dict[str, Any]]]:
    """tdlib's parse_html: the plain text and its entities, or _ParseError(Telegram's words)."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        raise _ParseError("Strings must be encoded in UTF-8") from None
    size = len(data)
    t = data + b"\0"
    out = bytearray()
    entities: list[dict[str, Any]] = []
    stack: list[tuple[str, str, int, int]] = []
    utf16 = 0
    has_surrogates = False
    i = 0
    while i < size:
        c = t[i]
        if c == 0x26:
            code, after = _decode_html_entity(t, i)
            if code:
                utf16 += 1 + (code > 0xFFFF)
                has_surrogates = has_surrogates or 0xD800 <= code <= 0xDFFF
                out += chr(code).encode("utf-8", "surrogatepass")
                i = after
                continue
        if c != 0x3C:
            if c & 0xC0 != 0x80:
                utf16 += 1 + (c >= 0xF0)
            out.append(c)
            i += 1
            continue
        begin = i
        i += 1
        if t[i] != 0x2F:
            while not _is_space(t[i]) and t[i] != 0x3E:
                i += 1
            if t[i] == 0:
                raise _ParseError(f"Unclosed start tag at byte offset {begin}")
            tag = t[begin + 1 : i].lower().decode("utf-8", "replace")
            if tag not in _HTML_TAGS:
                raise _ParseError(f'Unsupported start tag "{tag}" at byte offset {begin}')
            argument = ""
            while t[i] != 0x3E:
                while t[i] != 0 and _is_space(t[i]):
                    i += 1
                if t[i] == 0x3E:
                    break
                attr_begin = i
                while not _is_space(t[i]) and t[i] not in (0x3D, 0x3E, 0x2F, 0x22, 0x27):
                    i += 1
                attr = t[attr_begin:i]
                if not attr:
                    raise _ParseError(
                        f'Empty attribute name in the tag "{tag}" at byte offset {begin}'
                    )
                while t[i] != 0 and _is_space(t[i]):
                    i += 1
                if t[i] != 0x3D:
                    if t[i] == 0:
                        raise _ParseError(f'Unclosed start tag "{tag}" at byte offset {begin}')
                    if tag == "blockquote" and attr == b"expandable":
                        argument = "1"
                    continue
                i += 1
                while t[i] != 0 and _is_space(t[i]):
                    i += 1
                if t[i] == 0:
                    raise _ParseError(f'Unclosed start tag "{tag}" at byte offset {begin}')
                value = bytearray()
                if t[i] not in (0x22, 0x27):
                    token_begin = i
                    while _is_alnum(t[i]) or t[i] in (0x2E, 0x2D):
                        i += 1
                    value += t[token_begin:i].lower()
                    if not _is_space(t[i]) and t[i] != 0x3E:
                        raise _ParseError(
                            f"Unexpected end of name token at byte offset {token_begin}"
                        )
                else:
                    quote = t[i]
                    i += 1
                    while t[i] != quote and t[i] != 0:
                        if t[i] == 0x26:
                            code, after = _decode_html_entity(t, i)
                            if code:
                                value += chr(code).encode("utf-8", "surrogatepass")
                                i = after
                                continue
                        value.append(t[i])
                        i += 1
                    if t[i] == quote:
                        i += 1
                if t[i] == 0:
                    raise _ParseError(f"Unclosed start tag at byte offset {begin}")
                decoded = bytes(value).decode("utf-8", "replace")
                if tag == "a" and attr == b"href":
                    argument = decoded
                elif tag == "code" and attr == b"class" and decoded.startswith("language-"):
                    argument = decoded[9:]
                elif tag == "span" and attr == b"class" and decoded.startswith("tg-"):
                    argument = decoded[3:]
                elif tag == "tg-emoji" and attr == b"emoji-id":
                    argument = decoded
                elif tag == "blockquote" and attr == b"expandable":
                    argument = "1"
            if tag == "span" and argument != "spoiler":
                raise _ParseError(f'Tag "span" must have class "tg-spoiler" at byte offset {begin}')
            stack.append((tag, argument, utf16, len(out)))
            i += 1
            continue
        if not stack:
            raise _ParseError(f"Unexpected end tag at byte offset {begin}")
        while not _is_space(t[i]) and t[i] != 0x3E:
            i += 1
        end_tag = t[begin + 2 : i].lower().decode("utf-8", "replace")
        while _is_space(t[i]) and t[i] != 0:
            i += 1
        if t[i] != 0x3E:
            raise _ParseError(f"Unclosed end tag at byte offset {begin}")
        tag, argument, offset, out_begin = stack[-1]
        if end_tag and end_tag != tag:
            raise _ParseError(
                f'Unmatched end tag at byte offset {begin}, expected "</{tag}>", '
                f'found "</{end_tag}>"'
            )
        if utf16 > offset:
            entity = _html_entity(tag, argument, offset, utf16 - offset, out, out_begin, entities)
            if entity is not None:
                entities.append(entity)
        stack.pop()
        i += 1
    if stack:
        raise _ParseError(f'Can\'t find end tag corresponding to start tag "{stack[-1][0]}"')
    for entity in entities:
        entity.pop("_language", None)
    try:
        result = bytes(out).decode("utf-8")
    except UnicodeDecodeError:
        raise _ParseError("Strings must be encoded in UTF-8") from None
    if has_surrogates:
        raise _ParseError(
            "Text contains invalid Unicode characters after decoding HTML entities, check for "
            "unmatched surrogate code units"
        )
    return result, _sort(entities)


def _html_entity(
    tag: str,
    argument: str,
    offset: int,
    length: int,
    out: bytearray,
    out_begin: int,
    entities: list[dict[str, Any]],
) -> dict[str, Any] | None:
    """The entity a closed tag makes; pre and code of the same span merge into one pre."""
    simple = {
        "b": "bold",
        "strong": "bold",
        "i": "italic",
        "em": "italic",
        "u": "underline",
        "ins": "underline",
        "s": "strikethrough",
        "strike": "strikethrough",
        "del": "strikethrough",
        "tg-spoiler": "spoiler",
        "span": "spoiler",
    }
    if tag in simple:
        return _entity(simple[tag], offset, length)
    if tag == "tg-emoji":
        if not re.fullmatch(r"\d{1,19}", argument) or not 0 < int(argument) < 2**63:
            raise _ParseError("Invalid custom emoji identifier specified")
        return _entity("custom_emoji", offset, length, custom_emoji_id=argument)
    if tag == "a":
        url = argument or bytes(out[out_begin:]).decode("utf-8", "replace")
        try:
            return _entity("text_link", offset, length, url=_check_link(url))
        except ValueError:
            return None
    last = entities[-1] if entities else None
    same_span = last is not None and last["offset"] == offset and last["length"] == length
    if tag == "pre":
        if same_span and last["type"] == "code" and last.get("_language"):
            entities[-1] = _entity("pre", offset, length, language=last["_language"])
            return None
        return _entity("pre", offset, length)
    if tag == "code":
        if same_span and last["type"] == "pre" and argument:
            last["language"] = argument
            return None
        return _entity("code", offset, length, _language=argument)
    kind = "expandable_blockquote" if argument else "blockquote"
    return _entity(kind, offset, length)


def _input_entities(text: str, value: Any) -> list[dict[str, Any]]:
    """Entities given as the ``entities`` argument, checked as the Bot API checks them."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise _bad_request("Can't parse entities JSON object")
    prefix = "Can't parse MessageEntity: "
    entities = []
    for item in value:
        if not isinstance(item, dict):
            raise _bad_request(prefix + "Object expected as MessageEntity")
        kind = item.get("type")
        if kind not in _ENTITY_TYPES:
            raise _bad_request(prefix + "Unsupported type specified")
        for name in ("offset", "length"):
            if not isinstance(item.get(name), int) or isinstance(item.get(name), bool):
                raise _bad_request(prefix + f'Field "{name}" must be a valid Number')
        entity = _entity(kind, item["offset"], item["length"])
        if kind == "text_link":
            if not isinstance(item.get("url"), str):
                raise _bad_request(prefix + 'Can\'t find field "url"')
            try:
                entity["url"] = _check_link(item["url"])
            except ValueError as exc:
                reason = "URL host is empty" if not item["url"] else str(exc)
                raise _bad_request(f"Entity URL '{item['url']}' is invalid: {reason}") from None
        elif kind == "pre" and item.get("language"):
            entity["language"] = str(item["language"])
        elif kind == "custom_emoji":
            if "custom_emoji_id" not in item:
                raise _bad_request(prefix + 'Can\'t find field "custom_emoji_id"')
            entity["custom_emoji_id"] = str(item["custom_emoji_id"])
        elif kind == "text_mention":
            if not isinstance(item.get("user"), dict):
                raise _bad_request(prefix + 'Can\'t find field "user"')
            entity["user"] = item["user"]
        elif kind not in _PRIORITY:
            continue  # Telegram finds these itself and ignores the ones given.
        entities.append(entity)
    total = _u16(text)
    for entity in entities:
        if entity["offset"] < 0 or entity["offset"] > 1_000_000:
            raise _bad_request(f"Receive an entity with incorrect offset {entity['offset']}")
        if entity["length"] < 0 or entity["length"] > 1_000_000:
            raise _bad_request(f"Receive an entity with incorrect length {entity['length']}")
    for entity in _sort([e for e in entities if e["length"] > 0]):
        if entity["offset"] > total:
            raise _bad_request(
                f"Entity begins after the end of the text at UTF-16 offset {entity['offset']}"
            )
        if _end(entity) > total:
            raise _bad_request(
                f"Entity beginning at UTF-16 offset {entity['offset']} ends after the end of the "
                f"text at UTF-16 offset {_end(entity)}"
            )
    return entities


def _parse_input(text: str, parse_mode: Any, entities: Any) -> tuple[str, list[dict[str, Any]]]:
    """The text and entities of a message as sent: parse_mode wins over entities."""
    mode = str(parse_mode or "").lower()
    if mode and mode != "none":
        if mode == "html":
            try:
                return _parse_html(text)
            except _ParseError as exc:
                raise _bad_request(f"Can't parse entities: {exc}") from None
        if mode in ("markdown", "markdownv2"):
            raise _bad_request(f"FakeTelegram does not implement parse_mode {parse_mode}; use HTML")
        raise _bad_request("Unsupported parse_mode")
    return text, _input_entities(text, entities)


def _finish_text(text: str, entities: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """tdlib's fix_formatted_text for a message a bot sends, then the length limit."""
    entities = [e for e in entities if e["length"] > 0]
    if entities:
        entities = _fix_entities(entities)
    text, entities = _clean_text(text, entities)
    entities = [e for e in entities if e["length"] > 0]
    last = max((i for i, ch in enumerate(text) if ch not in " \n"), default=-1)
    if last < 0:
        raise _bad_request("Text must be non-empty")
    entities = _fix_entities(entities) if entities else entities
    text = text[: last + 1]
    total = _u16(text)
    entities = [e for e in entities if e["offset"] < total]
    for entity in entities:
        entity["length"] = min(_end(entity), total) - entity["offset"]
    entities = _sort(entities)
    first_entity = entities[0]["offset"] if entities else total
    lead = 0
    while lead < first_entity and text[lead] in " \n":
        lead += 1
    if lead:
        text = text[lead:]
        for entity in entities:
            entity["offset"] -= lead
    if _u16(text) > MAX_TEXT_LENGTH:
        raise _bad_request("Message is too long")
    entities = _merge_new(entities, _find_entities(text))
    return text, [_entity_out(e) for e in entities]


def _entity_out(entity: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entity.items() if not k.startswith("_")}


def _clean_text(text: str, entities: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """tdlib's clean_input_string: control characters become spaces, some are dropped."""
    out: list[str] = []
    old_to_new: list[int] = []
    new_pos = 0
    for ch in text:
        code = ord(ch)
        width = 2 if code > 0xFFFF else 1
        if code == 0x0D or 0x2028 <= code <= 0x202E or code in (0x0333, 0x033F, 0x030A):
            old_to_new.extend([new_pos] * width)
            continue
        if code < 0x20 and code != 0x0A:
            ch = " "
        old_to_new.extend(range(new_pos, new_pos + width))
        new_pos += width
        out.append(ch)
    old_to_new.append(new_pos)
    for entity in entities:
        start = old_to_new[min(entity["offset"], len(old_to_new) - 1)]
        stop = old_to_new[min(_end(entity), len(old_to_new) - 1)]
        entity["offset"], entity["length"] = start, stop - start
    return "".join(out), entities


def _entities_valid(entities: list[dict[str, Any]]) -> bool:
    """tdlib's are_entities_valid: properly nested, and no splittable one needs splitting."""
    last_end = dict.fromkeys(_SPLITTABLE, -1)
    stack: list[dict[str, Any]] = []
    for entity in entities:
        while stack and entity["offset"] >= _end(stack[-1]):
            stack.pop()
        if stack:
            kinds = {e["type"] for e in stack}
            if _end(entity) > _end(stack[-1]) or entity["type"] in kinds:
                return False
            if stack[-1]["type"] in _PRE:
                return False
            if entity["type"] in _PRE and kinds - _BLOCKQUOTES:
                return False
            nested = entity["type"] in _CONTINUOUS or entity["type"] in _BLOCKQUOTES
            if nested and kinds & _CONTINUOUS:
                return False
            if entity["type"] in _BLOCKQUOTES and kinds & _BLOCKQUOTES:
                return False
            if kinds & set(_SPLITTABLE):
                return False
        if entity["type"] in last_end:
            if last_end[entity["type"]] >= entity["offset"]:
                return False
            last_end[entity["type"]] = _end(entity)
        stack.append(entity)
    return True


def _remove_intersecting(entities: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kept, last_end = [], 0
    for entity in entities:
        if entity["offset"] >= last_end:
            kept.append(entity)
            last_end = _end(entity)
    return kept


def _remove_intersecting_blockquote(
    entities: list[dict[str, Any]], blockquotes: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    kept = []
    for entity in entities:
        crosses = any(
            entity["offset"] < _end(q)
            and (_end(q) < _end(entity) or entity["offset"] < q["offset"] < _end(entity))
            for q in blockquotes
        )
        if not crosses:
            kept.append(entity)
    return kept


def _split_entities(
    splittable: list[dict[str, Any]], others: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """tdlib's split_entities: merge touching bold/italic/..., cut them at other entities'
    edges, drop them inside code and pre."""
    begin = dict.fromkeys(_SPLITTABLE, 0)
    end = dict.fromkeys(_SPLITTABLE, 0)
    result: list[dict[str, Any]] = []
    position = 0

    def flush(offset: int) -> None:
        for kind in _SPLITTABLE:
            if end[kind] != 0 and begin[kind] < offset:
                if end[kind] <= offset:
                    result.append(_entity(kind, begin[kind], end[kind] - begin[kind]))
                    begin[kind] = end[kind] = 0
                else:
                    result.append(_entity(kind, begin[kind], offset - begin[kind]))
                    begin[kind] = offset

    def add_entities(end_offset: int) -> None:
        nonlocal position
        while position < len(splittable):
            entity = splittable[position]
            if entity["offset"] >= end_offset:
                break
            kind = entity["type"]
            if entity["offset"] <= end[kind] and end[kind] != 0:
                end[kind] = max(end[kind], _end(entity))
            else:
                flush(entity["offset"])
                begin[kind], end[kind] = entity["offset"], _end(entity)
            position += 1
        flush(end_offset)

    stack: list[dict[str, Any]] = []

    def add_offset(offset: int) -> None:
        while stack and offset >= _end(stack[-1]):
            size = len(result)
            add_entities(_end(stack[-1]))
            if stack[-1]["type"] in _PRE:
                del result[size:]
            stack.pop()
        add_entities(offset)

    for other in others:
        add_offset(other["offset"])
        stack.append(other)
    add_offset(2**31 - 1)
    return _sort(result)


def _resplit(
    splittable: list[dict[str, Any]], others: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    if not splittable:
        return others
    split = _split_entities(splittable, others)
    return _sort(others + split) if others else split


def _fix_entities(entities: list[dict[str, Any]]) -> list[dict[str, Any]]:
    entities = _sort(entities)
    if _entities_valid(entities):
        return entities
    splittable = [e for e in entities if e["type"] in _SPLITTABLE]
    blockquotes = [e for e in entities if e["type"] in _BLOCKQUOTES]
    others = _remove_intersecting(
        [e for e in entities if e["type"] not in _SPLITTABLE and e["type"] not in _BLOCKQUOTES]
    )
    if blockquotes:
        blockquotes = _remove_intersecting(blockquotes)
        others = _sort(_remove_intersecting_blockquote(others, blockquotes) + blockquotes)
    return _resplit(splittable, others)


def _merge_new(entities: list[dict[str, Any]], found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """tdlib's merge_new_entities: found entities never cross code, pre or links."""
    if not found:
        return entities
    splittable = [e for e in entities if e["type"] in _SPLITTABLE]
    blockquotes = [e for e in entities if e["type"] in _BLOCKQUOTES]
    others = [e for e in entities if e["type"] not in _SPLITTABLE and e["type"] not in _BLOCKQUOTES]
    found = _remove_intersecting_blockquote(found, blockquotes)
    merged = _sort(
        others
        + [
            f
            for f in found
            if not any(f["offset"] < _end(o) and o["offset"] < _end(f) for o in others)
        ]
    )
    if blockquotes:
        merged = _sort(merged + blockquotes)
    return _resplit(splittable, merged)


def _is_word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


_COMMAND = re.compile(r"/([A-Za-z0-9_]+)(@[A-Za-z0-9_]+)?")
_MENTION = re.compile(r"@([A-Za-z0-9_]+)")
_HASHTAG = re.compile(r"#([\w\u200c]+)")
_CASHTAG = re.compile(r"\$(1INCH|[A-Z]+)")
_URL = re.compile(r"(?:(?:https?|ftp|tg)://|www\.)[^\s<>\"]+", re.IGNORECASE)
_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")


def _find_entities(text: str) -> list[dict[str, Any]]:
    """Telegram's automatic entities (a simplified tdlib find_entities); UTF-16 offsets."""
    found: list[tuple[str, int, int]] = []

    def before(i: int) -> str:
        return text[i - 1] if i > 0 else ""

    def after(i: int) -> str:
        return text[i] if i < len(text) else ""

    for m in _COMMAND.finditer(text):
        prev, nxt = before(m.start()), after(m.end())
        if (prev and (_is_word(prev) or prev in "/<>")) or len(m.group(1)) > 64:
            continue
        if m.group(2) and not 3 <= len(m.group(2)) - 1 <= 32:
            continue
        if nxt and (_is_word(nxt) or nxt in "/<>"):
            continue
        found.append(("bot_command", m.start(), m.end()))
    for m in _MENTION.finditer(text):
        prev, nxt = before(m.start()), after(m.end())
        if (prev and _is_word(prev)) or not 5 <= len(m.group(1)) <= 32 or (nxt and _is_word(nxt)):
            continue
        found.append(("mention", m.start(), m.end()))
    for m in _HASHTAG.finditer(text):
        prev, nxt = before(m.start()), after(m.end())
        body = m.group(1)
        if (prev and _is_word(prev)) or nxt == "#" or not any(ch.isalpha() for ch in body):
            continue
        found.append(("hashtag", m.start(), m.start() + 1 + min(len(body), 256)))
    for m in _CASHTAG.finditer(text):
        prev, nxt = before(m.start()), after(m.end())
        if len(m.group(1)) > 8 or (prev and (_is_word(prev) or prev == "$")):
            continue
        if nxt and (_is_word(nxt) or nxt == "$"):
            continue
        found.append(("cashtag", m.start(), m.end()))
    for m in _URL.finditer(text):
        if m.start() > 0 and (_is_word(before(m.start())) or before(m.start()) in "@/."):
            continue
        url = m.group(0).rstrip(".,:;!?'\"")
        while url.endswith(")") and url.count(")") > url.count("("):
            url = url[:-1].rstrip(".,:;!?'\"")
        try:
            _check_link(url if "://" in url else "http://" + url)
        except ValueError:
            continue
        found.append(("url", m.start(), m.start() + len(url)))
    for m in _EMAIL.finditer(text):
        if m.start() > 0 and _is_word(before(m.start())):
            continue
        found.append(("email", m.start(), m.end()))
    prefix = [0]
    for ch in text:
        prefix.append(prefix[-1] + (2 if ord(ch) > 0xFFFF else 1))
    entities = [_entity(kind, prefix[s], prefix[e] - prefix[s]) for kind, s, e in found]
    return _remove_intersecting(_sort(entities))


# --------------------------------------------------------------------------------------------
# messages


def _api(value: Any) -> Any:
    """A copy without the fake's own keys, at any depth (messages nest messages)."""
    if isinstance(value, dict):
        return {k: _api(v) for k, v in value.items() if k != RAW_TEXT}
    if isinstance(value, list):
        return [_api(v) for v in value]
    return value


def _without_reply(message: Mapping[str, Any]) -> dict[str, Any]:
    """A replied-to message as Telegram nests it: without a reply_to_message of its own."""
    nested = _api(copy.deepcopy(dict(message)))
    nested.pop("reply_to_message", None)
    return nested


_MESSAGE_ORDER = (
    "message_id",
    "message_thread_id",
    "from",
    "sender_chat",
    "chat",
    "date",
    "edit_date",
    "reply_to_message",
    "text",
    "entities",
    "link_preview_options",
    "reply_markup",
)


def _ordered_message(message: Mapping[str, Any]) -> dict[str, Any]:
    ordered = {k: message[k] for k in _MESSAGE_ORDER if k in message}
    ordered.update({k: v for k, v in message.items() if k not in ordered})
    return ordered


# --------------------------------------------------------------------------------------------
# inbound: what Telegram sends to the bot


def user(
    id: int,
    first_name: str = "Test",
    *,
    last_name: str | None = None,
    username: str | None = None,
    is_bot: bool = False,
    language_code: str | None = "en",
) -> dict[str, Any]:
    """A User as Telegram sends it in ``from`` (optional fields only when set)."""
    found: dict[str, Any] = {"id": id, "is_bot": is_bot, "first_name": first_name}
    if last_name:
        found["last_name"] = last_name
    if username:
        found["username"] = username
    if language_code:
        found["language_code"] = language_code
    return found


def private_chat(user_dict: Mapping[str, Any]) -> dict[str, Any]:
    """The private Chat of the bot with a user: the chat id is the user id."""
    chat: dict[str, Any] = {"id": user_dict["id"], "first_name": user_dict["first_name"]}
    for name in ("last_name", "username"):
        if user_dict.get(name):
            chat[name] = user_dict[name]
    chat["type"] = "private"
    return chat


def group_chat(
    id: int,
    title: str = "Finance",
    type: str = "supergroup",
    *,
    username: str | None = None,
) -> dict[str, Any]:
    """A group, supergroup or channel Chat. Supergroup and channel ids start with -100."""
    chat: dict[str, Any] = {"id": id, "title": title}
    if username:
        chat["username"] = username
    chat["type"] = type
    return chat


def text_message(
    update_id: int,
    *,
    chat: Mapping[str, Any],
    from_user: Mapping[str, Any],
    text: str,
    message_id: int,
    reply_to: Mapping[str, Any] | None = None,
    date: int | None = None,
    entities: Sequence[Mapping[str, Any]] | None = None,
    sender_chat: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The update of a user's text message, as Telegram posts it to a webhook.

    `reply_to` is the Message replied to (e.g. ``tg.message(chat_id, message_id)``); it is
    nested as Telegram nests it, without its own reply. In a forum topic, Telegram sets
    ``message_thread_id`` and ``is_topic_message`` from the message replied to, and a message
    that answers nothing in particular replies to the topic's root (pass that root, from
    `FakeTelegram.create_forum_topic`). `sender_chat` is the chat an anonymous admin
    (`ANONYMOUS_ADMIN` in ``from``) or a channel posts as. Telegram's automatic entities
    (bot_command for ``/start``, url, mention, ...) are added unless `entities` is given.
    """
    message = _user_message(message_id, chat, from_user, reply_to, date, sender_chat)
    message["text"] = text
    found = [dict(e) for e in entities] if entities is not None else _find_entities(text)
    if found:
        message["entities"] = found
    return {"update_id": update_id, "message": message}


def media_message(
    update_id: int,
    *,
    chat: Mapping[str, Any],
    from_user: Mapping[str, Any],
    caption: str | None,
    message_id: int,
    kind: str = "photo",
    reply_to: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The update of a user's photo or document (`kind`) with an optional caption, as
    Telegram posts it: no ``text``, the words in ``caption``."""
    message = _user_message(message_id, chat, from_user, reply_to, None, None)
    if kind == "photo":
        message["photo"] = [
            {
                "file_id": f"AgACAgQAAxkBAAI{message_id}",
                "file_unique_id": f"AQAD{message_id}",
                "file_size": size * 40,
                "width": size,
                "height": size,
            }
            for size in (90, 320, 800)
        ]
    else:
        message["document"] = {
            "file_name": "invoice.pdf",
            "mime_type": "application/pdf",
            "file_id": f"BQACAgQAAxkBAAI{message_id}",
            "file_unique_id": f"AgAD{message_id}",
            "file_size": 48213,
        }
    if caption is not None:
        message["caption"] = caption
        found = _find_entities(caption)
        if found:
            message["caption_entities"] = found
    return {"update_id": update_id, "message": message}


def _user_message(
    message_id: int,
    chat: Mapping[str, Any],
    from_user: Mapping[str, Any],
    reply_to: Mapping[str, Any] | None,
    date: int | None,
    sender_chat: Mapping[str, Any] | None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"message_id": message_id}
    thread = reply_to.get("message_thread_id") if reply_to is not None else None
    if chat.get("is_forum") and thread:
        message["message_thread_id"] = thread
    message["from"] = dict(from_user)
    if sender_chat is not None:
        message["sender_chat"] = dict(sender_chat)
    message["chat"] = dict(chat)
    message["date"] = int(time.time()) if date is None else date
    if reply_to is not None:
        message["reply_to_message"] = _without_reply(reply_to)
    if chat.get("is_forum") and thread:
        message["is_topic_message"] = True
    return message


_query_seq = itertools.count(1)


def callback_query(
    update_id: int,
    *,
    from_user: Mapping[str, Any],
    message: Mapping[str, Any],
    data: str,
    query_id: str | None = None,
    chat_instance: str | None = None,
) -> dict[str, Any]:
    """The update of a user pressing an inline button of `message` (the Message as shown, e.g.
    ``tg.message(chat_id, message_id)``), as Telegram posts it to a webhook.

    The query id is a fresh numeric string unless given; chat_instance is stable per chat.
    """
    shown = _api(copy.deepcopy(dict(message)))
    chat_id = int(shown["chat"]["id"])
    return {
        "update_id": update_id,
        "callback_query": {
            "id": query_id
            if query_id is not None
            else str(5_000_000_000_000_000_000 + next(_query_seq)),
            "from": dict(from_user),
            "message": shown,
            "chat_instance": chat_instance
            if chat_instance is not None
            else str(-4_000_000_000_000_000_000 - abs(chat_id) % 10**15),
            "data": data,
        },
    }


def webhook_body(update: Mapping[str, Any]) -> bytes:
    """An update as Telegram posts it: compact JSON, UTF-8."""
    return json.dumps(_api(dict(update)), ensure_ascii=False, separators=(",", ":")).encode()


def webhook_headers(secret: str | None) -> dict[str, str]:
    """The headers of Telegram's webhook request: JSON, and the secret token when one is set."""
    headers = {"Content-Type": "application/json"}
    if secret:
        headers[SECRET_HEADER] = secret
    return headers
