"""Canonical JSON (RFC 8785, JCS) and the request hash a decision binds to.

The hash covers exactly `{kind, capability, presentation, tool: {name, arguments}}` (a
question: `{kind, capability, presentation, question}`); see
docs/hashing.md for how an agent in any language computes the same value. Input that JCS
cannot represent is refused with NotCanonical: hashing a stand-in (a string for a NaN, a
rounded float for a huge integer) would let a human approve something other than what runs.
"""

from __future__ import annotations

import hashlib
import json
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


class _Refused(Exception):
    """A value canonical_json refuses; _check says where and why."""


def _plain(value: Any, depth: int, most: int) -> bool:
    """Whether Python's own JSON encoder writes `value` exactly as RFC 8785 does (_Refused
    for a value it refuses). It does when there is no float (JCS writes numbers as
    ECMAScript does: 1.0 as "1", 1e21 as "1e+21") and no key holds a character from U+D800
    up (JCS sorts keys by UTF-16 code units, Python by code points: they differ only
    there). Escapes agree: both write \\b \\t \\n \\f \\r \\" \\\\ short, other control
    characters as lowercase \\u00xx, and everything else as itself. This walk is the
    check's, without building a path per value; _check builds it once something is wrong."""
    kind = type(value)
    if kind is str:
        if not value.isascii() and not _is_utf8(value):
            raise _Refused
        return True
    if kind is dict:
        depth += 1
        if depth > most:
            raise _Refused
        plain = True
        for key, item in value.items():
            if type(key) is not str:
                raise _Refused
            if not key.isascii():
                if not _is_utf8(key):
                    raise _Refused
                if max(key) >= "\ud800":
                    plain = False
            if not _plain(item, depth, most):
                plain = False
        return plain
    if kind is list:
        depth += 1
        if depth > most:
            raise _Refused
        plain = True
        for item in value:
            if not _plain(item, depth, most):
                plain = False
        return plain
    if kind is bool or value is None:
        return True
    if kind is int:
        if abs(value) > MAX_SAFE_INTEGER:
            raise _Refused
        return True
    if kind is float:
        if not math.isfinite(value) or MAX_SAFE_INTEGER < abs(value) < _JCS_EXPONENT_FROM:
            raise _Refused
        return False
    # A subclass of a JSON type (an IntEnum, a str subclass) or anything else: _check decides,
    # and rfc8785 writes what it accepts.
    try:
        _check(value, "$", depth, most)
    except NotCanonical:
        raise _Refused from None
    return False


def canonical_json(value: Any, *, max_depth: int = MAX_DEPTH) -> bytes:
    """RFC 8785 canonical UTF-8 bytes of a JSON value, or NotCanonical (also for nesting
    deeper than `max_depth` levels).

    Most values a request carries (no floats, keys below U+D800) are written by the
    standard library's C encoder, which gives the same bytes about five times faster than
    rfc8785 (tests/unit/test_canonical.py holds both to the golden vectors, and to each other
    on generated values); the rest by rfc8785."""
    try:
        plain = _plain(value, 0, max_depth)
    except _Refused:
        _check(value, "$", 0, max_depth)  # raises NotCanonical, saying where
        raise AssertionError("_plain refused what _check accepts") from None
    if plain:
        return _FAST.encode(value).encode("utf-8")
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, UnicodeEncodeError) as exc:
        raise NotCanonical(f"cannot canonicalise: {exc}") from exc


_FAST = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def check_canonical(value: Any, *, max_depth: int = MAX_DEPTH) -> None:
    """NotCanonical exactly when canonical_json would refuse `value`, without serialising
    it: for input that is checked whole but hashed in part (a create body), so the request
    is canonicalised once, for its hash."""
    try:
        _plain(value, 0, max_depth)
    except _Refused:
        _check(value, "$", 0, max_depth)  # raises NotCanonical, saying where
        raise AssertionError("_plain refused what _check accepts") from None


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
