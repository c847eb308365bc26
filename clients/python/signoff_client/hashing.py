"""The request hash a decision binds to: SHA-256 of the RFC 8785 (JCS) form of
`{kind, capability, presentation, tool: {name, arguments}}` (a question, kind "question":
`{kind, capability, presentation, question}`).

An agent computes it to check that what it is about to run is what a human approved (the
server's `hash` field), and the adapters store it with their paused runs. The server keeps the
same function (bot/canonical.py, which also bounds nesting depth for its own protection);
tests/unit/test_client_package.py runs both on the same vectors.
"""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785

from signoff_client.errors import NotCanonical

_MAX_SAFE_INTEGER = 2**53 - 1
_EXPONENT_FROM = 1e21  # from here up JCS writes a double with an exponent ("1e+21")


def canonical_json(value: Any) -> bytes:
    """RFC 8785 canonical UTF-8 bytes of a JSON value, or NotCanonical for what JCS cannot
    represent exactly (NaN, infinities, integers beyond ±(2^53 - 1), lone surrogates, non-JSON
    types): hashing a stand-in would bind a decision to something other than what runs.
    A double from 2^53 up to 1e21 is refused too, as the server refuses it: JCS writes it as
    a bare integer beyond ±(2^53 - 1), which would be refused when sent back as written."""
    _refuse_bare_integer_doubles(value)
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, UnicodeEncodeError, TypeError, ValueError) as exc:
        raise NotCanonical(f"cannot canonicalise: {exc}") from exc


def _refuse_bare_integer_doubles(value: Any) -> None:
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, float) and _MAX_SAFE_INTEGER < abs(item) < _EXPONENT_FROM:
            raise NotCanonical(
                f"cannot canonicalise: {item!r} is written as an integer outside ±(2^53 - 1)"
            )


QUESTION = "question"


def approval_hash(
    kind: str,
    capability: str,
    presentation: Any,
    tool_name: str,
    arguments: Any,
    question: Any = None,
) -> str:
    """SHA-256 hex of the canonical request: what the human is shown and what will run. A
    question has no call: its `question` (the options offered, or `{}`) is hashed in place
    of the tool, and `tool_name` and `arguments` are ignored."""
    document: dict[str, Any] = {
        "kind": kind,
        "capability": capability,
        "presentation": presentation,
    }
    if kind == QUESTION:
        document["question"] = question
    else:
        document["tool"] = {"name": tool_name, "arguments": arguments}
    return hashlib.sha256(canonical_json(document)).hexdigest()


def record_hash(record: Any) -> str:
    """The hash of an approval as the API returned it (an ApprovalRecord or its JSON): compare
    it with the record's `hash` before running its `tool`."""
    raw = record.raw if hasattr(record, "raw") else record
    if raw["kind"] == QUESTION:
        return approval_hash(
            QUESTION, raw["capability"], raw["presentation"], "", {}, raw.get("question")
        )
    return approval_hash(
        raw["kind"],
        raw["capability"],
        raw["presentation"],
        raw["tool"]["name"],
        raw["tool"]["arguments"],
    )


def original_hash(record: Any) -> str | None:
    """For a call approved as edited, the hash of the call the agent asked for (its original
    arguments), to compare with the record's `original_hash`; None if it was not edited."""
    raw = record.raw if hasattr(record, "raw") else record
    if not raw.get("edited"):
        return None
    return approval_hash(
        raw["kind"],
        raw["capability"],
        raw["presentation"],
        raw["tool"]["name"],
        raw.get("original_arguments"),
    )
