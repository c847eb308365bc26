"""Messages: those the fake bot sends and edits (sendMessage, editMessageText,
editMessageReplyMarkup) and those it is told of by updates; what is kept of each, and the
copies answered without the fake's own keys."""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from typing import Any

from tests.fakes.telegram.arguments import _bad_request, _int, _reply_parameters, _text_arg
from tests.fakes.telegram.formatted_text import _finish_text, _parse_input
from tests.fakes.telegram.markup import _check_markup_content, _inline_only, _reply_markup

RAW_TEXT = "raw_text"
"""The non-API key of stored messages holding the text as last sent (HTML before parsing)."""

_NOT_MODIFIED = (
    "message is not modified: specified new message content and reply markup are exactly the "
    "same as a current content and reply markup of the message"
)


class Messages:
    """`FakeTelegram`'s messages. Its state (``_messages``, ``_chats``, ``_lock``, ...) is
    set up by `FakeTelegram.__init__`, and chats are looked up with `Chats`."""

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
