"""What the gateway passes on from the upstream to the MCP client whose call it forwards:
progress notifications, and the upstream's log messages (`notifications/message`).

The upstream is one connection shared by every client of the gateway, so what it sends is
tied to a call only by timing: progress carries the forwarded request's own token and goes
to that call's caller; a log message goes to the caller of every call forwarded at that
moment (one, on stdio), else to the client that called last. Nothing here changes what a
call does: a client that is gone, or did not ask for progress, is skipped.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import warnings
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPDeprecationWarning

__all__ = ["Caller", "Relay"]

log = logging.getLogger("signoff_client.mcp")

# The levels in order, for a client's logging/setLevel (handshake-era clients).
_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


@dataclass(frozen=True, eq=False)
class Caller:
    """The MCP request being answered: its session (the back-channel to that client) and id,
    and whether it asked for progress."""

    session: Any
    request_id: Any
    wants_progress: bool


_CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar(
    "signoff_mcp_caller", default=None
)


class Relay:
    """Routes the upstream's notifications to the gateway's callers. `answering(ctx)` marks
    the request a handler answers; `forwarding()` wraps each call sent upstream; `on_log` is
    the upstream client's logging callback."""

    def __init__(self) -> None:
        self._in_flight: list[Caller] = []
        self._last: Caller | None = None
        self._min_level = 0  # a handshake-era client's logging/setLevel

    @contextlib.contextmanager
    def answering(self, ctx: Any) -> Any:
        meta = getattr(ctx, "meta", None)
        wants = isinstance(meta, Mapping) and (
            meta.get("progressToken") is not None or meta.get("progress_token") is not None
        )
        caller = Caller(ctx.session, ctx.request_id, wants)
        self._last = caller
        token = _CALLER.set(caller)
        try:
            yield caller
        finally:
            _CALLER.reset(token)

    @contextlib.asynccontextmanager
    async def forwarding(self) -> AsyncIterator[ProgressFnT | None]:
        """Around one call sent upstream: the progress callback to pass (None when the
        caller asked for none), and the caller registered for log messages meanwhile."""
        caller = _CALLER.get()
        if caller is None:
            yield None
            return
        self._in_flight.append(caller)
        try:
            yield _progress_to(caller) if caller.wants_progress else None
        finally:
            self._in_flight.remove(caller)

    def set_level(self, level: str) -> None:
        self._min_level = _LEVELS.index(level) if level in _LEVELS else 0

    async def on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        """The upstream's log message, to the callers of the calls in flight (else the last
        caller), as the gateway's own `notifications/message`."""
        level = params.level
        if level in _LEVELS and _LEVELS.index(level) < self._min_level:
            return
        callers = list(self._in_flight) or ([self._last] if self._last else [])
        for caller in dict.fromkeys(callers):
            related = caller.request_id if caller in self._in_flight else None
            try:
                with warnings.catch_warnings():  # deprecated in 2026-07-28, still what we relay
                    warnings.simplefilter("ignore", MCPDeprecationWarning)
                    await caller.session.send_log_message(
                        level, params.data, params.logger, related_request_id=related
                    )
            except Exception as exc:  # a client that went away: the log line is lost, no more
                log.debug("could not relay an upstream log message: %r", exc)


def _progress_to(caller: Caller) -> ProgressFnT:
    async def progress(value: float, total: float | None, message: str | None) -> None:
        try:
            await caller.session.report_progress(value, total, message)
        except Exception as exc:  # the caller went away; the call itself goes on
            log.debug("could not relay upstream progress: %r", exc)

    return progress
