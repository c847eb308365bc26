"""The chats around the fake bot: chats made known or learnt, their fates (blocked, lost,
restricted, upgraded to a supergroup), forum topics, and each chat's message ids."""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from typing import Any

from tests.fakes.telegram.arguments import _ApiError, _bad_request
from tests.fakes.telegram.inbound import group_chat, user


class Chats:
    """`FakeTelegram`'s chats. Its state (``_chats``, ``_blocked``, ``_topics``, ``_lock``,
    ...) is set up by `FakeTelegram.__init__`."""

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

    def next_message_id(self, chat_id: int) -> int:
        """Reserve the next message_id of a chat, for a message a user is about to send."""
        with self._lock:
            return self._take_message_id(int(chat_id))

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
