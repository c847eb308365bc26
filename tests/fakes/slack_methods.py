"""The Slack Web API methods the fake Slack (tests/fakes/slack.py) answers, each checking its
arguments and refusing them with the error Slack gives, over the state `FakeSlack` holds."""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from tests.fakes import slack_views
from tests.fakes.slack_inbound import APP_ID


class _SlackError(Exception):
    def __init__(self, error: str, **extra: Any) -> None:
        super().__init__(error)
        self.error = error
        self.extra = extra


class WebApiMethods:
    """`FakeSlack`'s Web API methods. Its state (``_messages``, ``_views``, ``_homes``,
    ``_opened_dms``, ``_lock``, ...) is set up by `FakeSlack.__init__`."""

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
