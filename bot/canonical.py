"""Canonical JSON (RFC 8785, JCS) and the request hash a decision binds to.

The hash covers exactly `{kind, capability, presentation, tool: {name, arguments}}` (a
question: `{kind, capability, presentation, question}`); see
docs/hashing.md for how an agent in any language computes the same value. Input that JCS
cannot represent is refused with NotCanonical: hashing a stand-in (a string for a NaN, a
rounded float for a huge integer) would let a human approve something other than what runs.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import rfc8785

from bot.errors import NotCanonical

MAX_DEPTH = 64
MAX_SAFE_INTEGER = 2**53 - 1
# From here up JCS (like ECMAScript) writes a double with an exponent ("1e+21").
_JCS_EXPONENT_FROM = 1e21
_SCALARS = (str, int, float, bool, type(None))


def _check(value: Any, path: str, depth: int, most: int = MAX_DEPTH) -> None:
    """Refuse non-JSON types and excessive nesting before the encoder sees the value."""
    if isinstance(value, dict):
        depth += 1
        if depth > most:
            raise NotCanonical(f"nested deeper than {most} levels")
        for key, item in value.items():
            if not isinstance(key, str):
                raise NotCanonical(f"{path}: object key {key!r} is not a string")
            if not _is_utf8(key):
                raise NotCanonical(f"{path}: object key {key!r} contains a lone surrogate")
            _check(item, f"{path}.{key}", depth, most)
    elif isinstance(value, list):
        depth += 1
        if depth > most:
            raise NotCanonical(f"nested deeper than {most} levels")
        for index, item in enumerate(value):
            _check(item, f"{path}[{index}]", depth, most)
    elif isinstance(value, float) and not math.isfinite(value):
        raise NotCanonical(
            f"{path}: {value} is not a JSON number (NaN, Infinity, or a literal too large "
            "for a double, such as 1e400)"
        )
    elif isinstance(value, float) and MAX_SAFE_INTEGER < abs(value) < _JCS_EXPONENT_FROM:
        # JCS writes these doubles as bare integers ("10000000000000000" for 1e16): their
        # canonical form would be refused when sent back as written, and a reader that parses
        # integers exactly would see a different value than one that reads doubles.
        raise NotCanonical(
            f"{path}: {value!r} is written as the integer {int(value)}, outside ±(2^53 - 1), "
            "which a double cannot hold exactly; send it as a string"
        )
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_SAFE_INTEGER:
        raise NotCanonical(
            f"{path}: integer {value} is outside ±(2^53 - 1), which a double cannot hold "
            "exactly; send it as a string"
        )
    elif isinstance(value, str) and not _is_utf8(value):
        raise NotCanonical(f"{path}: the string contains a lone surrogate")
    elif not isinstance(value, _SCALARS):
        raise NotCanonical(f"{path}: {type(value).__name__} is not a JSON value")


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def canonical_json(value: Any, *, max_depth: int = MAX_DEPTH) -> bytes:
    """RFC 8785 canonical UTF-8 bytes of a JSON value, or NotCanonical (also for nesting
    deeper than `max_depth` levels)."""
    _check(value, "$", 0, max_depth)
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, UnicodeEncodeError) as exc:
        raise NotCanonical(f"cannot canonicalise: {exc}") from exc


def check_canonical(value: Any, *, max_depth: int = MAX_DEPTH) -> None:
    """NotCanonical exactly when canonical_json would refuse `value`, without serialising
    it: for input that is checked whole but hashed in part (a create body), so the request
    is canonicalised once, for its hash."""
    _check(value, "$", 0, max_depth)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


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
    question (kind "question") has no call: its `question` (the options offered) is hashed in
    place of the tool."""
    document: dict[str, Any] = {
        "kind": kind,
        "capability": capability,
        "presentation": presentation,
    }
    if kind == QUESTION:
        document["question"] = question
    else:
        document["tool"] = {"name": tool_name, "arguments": arguments}
    return sha256_hex(canonical_json(document))


def short_hash(full: str) -> str:
    """The form printed on cards: `sha256:` and the first 12 hex digits."""
    return f"sha256:{full[:12]}"
