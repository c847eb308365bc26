"""The values of a policy file's keys, checked (mcp/policy.py reads the file): each check
takes the key's dotted name for its message and a `fail(message, key)` that makes the error
naming the file's line."""

from __future__ import annotations

import re
from typing import Any, Literal

__all__ = [
    "ASK_MODES",
    "ELICIT_WAIT",
    "AskMode",
    "approvers_value",
    "ask_mode",
    "duration",
    "seconds",
    "url_value",
]

# How an `ask` reaches a human: the host's user is offered the approval page, or the route only.
AskMode = Literal["elicit", "route"]
ASK_MODES: tuple[str, ...] = ("elicit", "route")
ELICIT_WAIT = 600.0  # seconds an elicited call waits for the decision, by default
_DURATION = re.compile(r"(?:[0-9]+[smhdw])+")


def approvers_value(value: Any, name: str, fail: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(v, str) and v.strip() for v in value)
    ):
        raise fail(
            f'{name} must be a non-empty list of principals or "group:NAME"',
            name.rsplit(".", 1)[-1],
        )
    return tuple(value)


def duration(value: Any, name: str, fail: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _DURATION.fullmatch(value):
        raise fail(
            f"{name} must be a duration like '72h', '3d' or '1d12h' (got {value!r})",
            name.rsplit(".", 1)[-1],
        )
    return value


def ask_mode(value: Any, name: str, fail: Any) -> AskMode | None:
    if value is not None and value not in ASK_MODES:
        raise fail(
            f'{name} must be "elicit" (offer the MCP host\'s user the approval page) or "route" '
            f"(the route's cards only; got {value!r})",
            "ask",
        )
    return value


def url_value(value: Any, name: str, fail: Any) -> str | None:
    if value is not None and (
        not isinstance(value, str) or not re.match(r"https?://[^\s/]+", value)
    ):
        raise fail(
            f"{name} must be an http(s) URL, e.g. 'http://127.0.0.1:8700'", name.rsplit(".")[-1]
        )
    return value


def seconds(duration: str) -> float:
    """A validated duration ('1h30m') in seconds."""
    unit = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    return float(sum(int(n) * unit[u] for n, u in re.findall(r"([0-9]+)([smhdw])", duration)))
