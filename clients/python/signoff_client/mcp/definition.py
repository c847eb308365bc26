"""What an approval binds in the gateway, and the checks a call passes before anything else.

- A tool's **definition** is the upstream's `{name, title, description, inputSchema}`; its
  digest, `sha256:<hex>` of the RFC 8785 form (docs/hashing.md, "MCP tool definitions"), is
  a field of every presentation the gateway files, next to the description and the schema a
  human reads. A human's approval therefore binds the tool as it was described to them, and
  a changed description or schema is a different request.
- A call's **arguments** must be a JSON object the signoff server could hold: no deeper
  than 64 levels (the server's own bound), JSON types only, within a size bound. The check
  walks iteratively: arguments nested 5,000 deep are refused in words, not by a
  RecursionError of the encoder that would have met them first.
"""

from __future__ import annotations

import hashlib
import json
import math
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as types

from signoff_client.errors import NotCanonical
from signoff_client.hashing import canonical_json
from signoff_client.mcp.policy import Decision

__all__ = [
    "AGAIN_LABEL",
    "DEFINITION_LABEL",
    "DESCRIPTION_LABEL",
    "MAX_ARGUMENT_BYTES",
    "MAX_DEPTH",
    "MAX_INTEGER_DIGITS",
    "SCHEMA_LABEL",
    "TITLE_LABEL",
    "Ambiguous",
    "BadDefinition",
    "ToolDefinition",
    "argument_label",
    "argument_problem",
    "cut",
    "field_value",
    "json_problem",
    "near_names",
    "presentation",
    "presented_digest",
    "run_id_for",
    "shown_name",
]

# The signoff server refuses JSON nested deeper (bot/canonical.py); an argument it could
# never hold is refused here, for allowed calls too, before any encoder recurses into it.
MAX_DEPTH = 64
# Arguments beyond this (as JSON, roughly) are refused before anything is forwarded or asked.
MAX_ARGUMENT_BYTES = 4 * 1024 * 1024
# Integers beyond this many digits are refused: Python's JSON parser (the SDK's, and many an
# upstream's) reads no more by default, and an upstream that cannot parse a request may
# never answer it.
MAX_INTEGER_DIGITS = 4300
_INTEGER_LIMIT = 10**MAX_INTEGER_DIGITS
# A definition beyond this is not shown to a human: refused rather than hashed unseen.
MAX_DEFINITION_BYTES = 1024 * 1024
# Card fields the gateway adds after the arguments' fields (labelled `Argument "<key>"`, so
# that no argument can be read as one of these).
AGAIN_LABEL = "Asked again after"
DESCRIPTION_LABEL = "MCP tool description"
TITLE_LABEL = "MCP tool title"
SCHEMA_LABEL = "MCP tool input schema"
DEFINITION_LABEL = "MCP tool definition"
MAX_SUMMARY = 4000  # the signoff server's bound on a presentation's summary
_SHOWN = 2000  # characters of an argument's value in its field (the card shows the call too)
_NEAR_NAME_LIMIT = 512  # longer names are not compared with the listed ones


class BadDefinition(ValueError):
    """The upstream describes a tool in a way no human could be shown faithfully."""


class Ambiguous(Exception):
    """The upstream lists two different definitions under one name: the gateway cannot know
    which of them a call would run, so it runs neither."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def words(self) -> str:
        return (
            f"the upstream server lists more than one tool named {shown_name(self.name)!r}, with "
            "different definitions, so which one a call would run is unknown"
        )


def shown_name(name: str) -> str:
    """A name as text any encoder takes (lone surrogates as escapes), cut to 120 characters:
    for messages and `_meta`, where the agent's raw name could break the answer."""
    text = name.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= 120 else text[:119] + "…"


def json_problem(
    value: Any, *, max_depth: int = MAX_DEPTH, max_bytes: int | None = None, root: str = "arguments"
) -> str | None:
    """Why `value` is not JSON the gateway passes on (too deep, too big, not JSON types, a
    non-finite number, a lone surrogate), or None. Iterative, with one iterator per open
    container: no depth makes it recurse, and it stops at the first problem or as soon as
    the running size passes `max_bytes`, without first expanding a huge container."""
    size = 0
    # (the container's remaining entries, its depth, its path, whether its keys are names)
    pending: list[tuple[Iterator[tuple[Any, Any]], int, str, bool]] = [
        (iter([(None, value)]), 0, root, False)
    ]
    while pending:
        entries, depth, path, named = pending[-1]
        step = next(entries, None)
        if step is None:
            pending.pop()
            continue
        key, item = step
        if named:
            if not isinstance(key, str):
                return f"{path} has a key that is not a string ({type(key).__name__})"
            if not _is_text(key):
                return f"{path} has a key with a lone surrogate, which is not text"
            size += len(key) + 4
            here = _step(path, f".{_short(key)}")
        else:
            size += 1
            here = path if key is None else _step(path, f"[{key}]")
        if isinstance(item, dict | list):
            if depth + 1 > max_depth:
                return f"{here} is nested deeper than {max_depth} levels"
            size += 2
            if isinstance(item, dict):
                pending.append((iter(item.items()), depth + 1, here, True))
            else:
                pending.append((enumerate(item), depth + 1, here, False))
        elif isinstance(item, str):
            if not _is_text(item):
                return f"{here} contains a lone surrogate, which is not text"
            size += len(item) + 2
        elif isinstance(item, bool) or item is None:
            size += 5
        elif isinstance(item, float):
            if not math.isfinite(item):
                return f"{here} is {item}, which is not a JSON number"
            size += 24  # rough: the bound is about memory, not an exact byte count
        elif isinstance(item, int):
            if not -_INTEGER_LIMIT < item < _INTEGER_LIMIT:
                return (
                    f"{here} is an integer of more than {MAX_INTEGER_DIGITS:,} digits, more "
                    "than a JSON parser can be relied on to read"
                )
            size += 24 if -(2**64) < item < 2**64 else item.bit_length() // 3 + 1
        else:
            return f"{here} is a {type(item).__name__}, which is not a JSON value"
        if max_bytes is not None and size > max_bytes:
            return f"{root}: larger than {max_bytes} bytes as JSON"
    return None


def _is_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def argument_problem(arguments: Any, *, max_bytes: int = MAX_ARGUMENT_BYTES) -> str | None:
    """Why a call's arguments cannot be passed on, in words; None for a fitting JSON object."""
    if not isinstance(arguments, Mapping):
        return f"the arguments must be a JSON object, not {_kind(arguments)}"
    return json_problem(dict(arguments), max_bytes=max_bytes)


def _kind(value: Any) -> str:
    return {list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, int | float) else f"a {type(value).__name__}"
    )


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """One upstream tool as a human is shown it, and the digest that binds it."""

    name: str
    title: str | None
    description: str | None
    schema_text: str  # the input schema as canonical JSON text, for the card
    digest: str  # "sha256:" + 64 hex digits

    @classmethod
    def of(cls, tool: types.Tool) -> ToolDefinition:
        """The definition of a listed tool; BadDefinition if it cannot be hashed faithfully."""
        document = {
            "name": tool.name,
            "title": tool.title,
            "description": tool.description,
            "inputSchema": tool.input_schema,
        }
        problem = json_problem(document, max_bytes=MAX_DEFINITION_BYTES, root="the definition")
        if problem is not None:
            raise BadDefinition(problem)
        return cls(
            name=tool.name,
            title=tool.title,
            description=tool.description,
            schema_text=_json_text(tool.input_schema),
            digest="sha256:" + hashlib.sha256(_json_text(document).encode()).hexdigest(),
        )


def _json_text(value: Any) -> str:
    """RFC 8785 text; for what JCS cannot hold exactly (an integer beyond ±2^53 in a schema's
    bounds) Python's sorted, compact json.dumps, which is as deterministic for the gateway's
    own comparisons (docs/hashing.md)."""
    try:
        return canonical_json(value).decode()
    except NotCanonical:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def presentation(
    server: str,
    decision: Decision,
    definition: ToolDefinition,
    arguments: Mapping[str, Any],
    *,
    asked_again_after: str | None = None,
) -> dict[str, Any]:
    """What the human reads, and the approval hashes: the tool's own description (in full: as
    the summary when it fits the server's 4,000 characters, else in a field of its own that
    the summary points to), one field per argument in key order (the same call must always
    look the same), labelled `Argument "<key>"` so that no argument can pass for one of the
    gateway's own fields, then the tool's title, input schema and definition digest, which
    are never cut: what the digest binds is what is shown.

    `asked_again_after`: the superseded request this one asks again after (the same call
    shown the same way was superseded, and signoff would otherwise hand that request back)."""
    title = decision.title or f"{decision.tool} (MCP server {server})"
    description = (definition.description or "").strip()
    fields: list[dict[str, Any]] = [
        {"label": argument_label(key), "value": field_value(arguments[key])}
        for key in sorted(arguments)
    ]
    if asked_again_after is not None:
        fields.append({"label": AGAIN_LABEL, "value": asked_again_after})
    if len(description) <= MAX_SUMMARY:
        summary = description or f"Call the MCP tool {decision.tool}."
    else:
        summary = (
            f"The tool's description is {len(description):,} characters, more than a summary "
            f"holds: read all of it in the field {DESCRIPTION_LABEL!r}."
        )
        fields.append({"label": DESCRIPTION_LABEL, "value": description})
    if definition.title:
        fields.append({"label": TITLE_LABEL, "value": definition.title})
    fields.append({"label": SCHEMA_LABEL, "value": definition.schema_text})
    fields.append({"label": DEFINITION_LABEL, "value": definition.digest})
    return {"title": title[:300], "summary": summary, "fields": fields}


def argument_label(key: str) -> str:
    """An argument's card label: `Argument "<key>"`, the key JSON-quoted (line breaks and
    other control characters escaped), cut to the server's 200 characters with a mark."""
    quoted = json.dumps(key, ensure_ascii=False)
    if len(quoted) > 180:
        quoted = quoted[:160] + f'…" ({len(key)} characters)'
    return f"Argument {quoted}"


def presented_digest(shown: Any) -> str | None:
    """The definition digest a filed presentation carries (the last such field: the gateway
    appends it after the arguments), or None for one filed before definitions were bound."""
    fields = shown.get("fields") if isinstance(shown, Mapping) else None
    found = [
        f.get("value")
        for f in fields or []
        if isinstance(f, Mapping) and f.get("label") == DEFINITION_LABEL
    ]
    return found[-1] if found and isinstance(found[-1], str) else None


def run_id_for(
    server: str, name: str, arguments: Mapping[str, Any], scope: str | None = None
) -> str:
    """The run id of an `ask` call: the server, an optional scope, and SHA-256 of the canonical
    call. The same call with the same arguments, asked again from any session or after a
    restart, finds the same approval (signoff dedupes on tenant, run id and hash); any changed
    argument is a new request. NotCanonical for arguments JSON cannot carry exactly."""
    digest = hashlib.sha256(canonical_json({"name": name, "arguments": dict(arguments)}))
    prefix = f"mcp:{server}:{scope}:" if scope else f"mcp:{server}:"
    return prefix + digest.hexdigest()


def near_names(name: str, listed: Mapping[str, Any] | list[str]) -> list[str]:
    """Listed names that `name` resembles the way a lenient server would match them (case,
    padding, invisible characters, `-` for `_`): named in the refusal so a model can correct
    itself. Never used to forward anything."""
    if len(name) > _NEAR_NAME_LIMIT:
        return []
    wanted = _loose(name)
    return sorted(n for n in listed if _loose(n) == wanted)


def _loose(name: str) -> str:
    text = unicodedata.normalize("NFKC", name)
    text = "".join(c for c in text if unicodedata.category(c) != "Cf")
    return "".join(text.split()).casefold().replace("-", "_")


def field_value(value: Any) -> Any:
    """An argument as a card field: scalars as they are, anything else as compact JSON."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int) and abs(value) <= 2**53 - 1:
        return value
    if isinstance(value, float):
        return value
    if isinstance(value, str):
        return cut(value, _SHOWN)
    try:
        text = canonical_json(value).decode()
    except NotCanonical:
        text = repr(value)
    return cut(text, _SHOWN)


def cut(text: str, limit: int) -> str:
    """`text` within `limit` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    more = len(text) - limit
    suffix = f"… ({more} more characters)"
    return text[: max(limit - len(suffix), 0)] + suffix


def _short(key: str) -> str:
    return key if len(key) <= 40 else key[:37] + "..."


def _step(path: str, step: str) -> str:
    """A path one level deeper, kept from growing past a message's worth of text."""
    if len(path) > 120:
        return path if path.endswith("…") else path + "…"
    return path + step
