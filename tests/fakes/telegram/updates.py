"""Updates for the bot: the getUpdates queue and its long polls, and the webhook
(setWebhook, deleteWebhook, getWebhookInfo, delivering an update and what Telegram does
with the answer)."""

from __future__ import annotations

import asyncio
import copy
import ipaddress
import itertools
import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from tests.fakes.recording import Call
from tests.fakes.telegram.arguments import (
    _METHODS,
    _ApiError,
    _bad_request,
    _clamped,
    _int,
    _normalize,
    _text_arg,
)
from tests.fakes.telegram.inbound import webhook_body, webhook_headers
from tests.fakes.telegram.messages import _api

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


class Updates:
    """`FakeTelegram`'s updates and webhook. Its state (``_updates``, ``_webhook``,
    ``_poll_aborts``, ``_lock``, ...) is set up by `FakeTelegram.__init__`; an answer's
    method is run by `FakeTelegram._dispatch`."""

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

    def next_update_id(self) -> int:
        """A fresh update_id, above any pushed so far."""
        with self._lock:
            return next(self._update_seq)

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
