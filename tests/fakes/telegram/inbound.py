"""What Telegram sends to a bot: users and chats, text and media messages and button
presses as updates, and the webhook request that carries an update."""

from __future__ import annotations

import copy
import itertools
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from tests.fakes.telegram.entities import _find_entities
from tests.fakes.telegram.messages import _api, _without_reply

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
