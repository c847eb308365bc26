"""Strict JSON and the validators shared by the HTTP API, intake and the config, so every
door refuses the same things in the same words.

JSON is parsed by I-JSON's rules (no duplicate keys, no NaN or Infinity), because what an
agent sends is hashed and a human decides on that hash: a document two parsers could read
differently must be refused, not guessed at.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Annotated, Any, TypeVar
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, ValidationError

from bot.durations import parse_duration
from bot.errors import InvalidRequest, MalformedJson, NotCanonical, RequestTooLarge
from bot.model import MAX_LEASE

MAX_REQUEST_BYTES = 256 * 1024
# The longest a request may wait, or a grant wait to be claimed, whatever its route allows (a
# route may allow less: that is judged when the request is routed).
MAX_TTL = timedelta(days=365)

M = TypeVar("M", bound=BaseModel)


class StrictModel(BaseModel):
    """A JSON body: unknown fields and wrong types are refused, never coerced."""

    model_config = ConfigDict(extra="forbid", strict=True)


def _duration(value: str) -> str:
    parse_duration(value)  # its ValueError becomes a validation error naming the field
    return value


def _at_most(limit: timedelta, words: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if parse_duration(value) > limit:
            raise ValueError(f"{value!r} is longer than {words}")
        return value

    return check


def _http_url(value: str) -> str:
    if not re.match(r"^https?://[^\s/?#@]+", value):
        raise ValueError(f"expected an http(s) URL with a host, got {value!r}")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 -- raises for a port out of range
    except ValueError as exc:  # unbalanced [ ] of an IPv6 host, a port past 65535, ...
        raise ValueError(f"not a valid URL ({exc}): {value!r}") from None
    if not parts.hostname:
        raise ValueError(f"expected an http(s) URL with a host, got {value!r}")
    return value


def _text(value: str) -> str:
    # PostgreSQL text cannot hold NUL; SQLite can. Refuse it so both databases agree.
    if "\x00" in value:
        raise ValueError("contains a NUL character (U+0000)")
    return value


# Validators to compose with other constraints: Annotated[StrictStr, Field(...), NO_NUL].
IS_DURATION = AfterValidator(_duration)
IS_LEASE = AfterValidator(_at_most(MAX_LEASE, "the 24h a claim may hold a call"))
IS_TTL = AfterValidator(_at_most(MAX_TTL, "365 days"))
IS_HTTP_URL = AfterValidator(_http_url)
NO_NUL = AfterValidator(_text)

DurationText = Annotated[str, IS_DURATION]
HttpUrl = Annotated[str, IS_HTTP_URL]


def _whole(value: Any) -> Any:
    # JSON has one number type: 2.0 is the integer 2 (as JSON Schema's "integer" says), not a
    # float to refuse; 2.5 and true stay what they are and are refused as before.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# For an int in a strict model, written 2 or 2.0: Annotated[int, Field(...), IS_WHOLE] (after
# the Field, so its limits stay in the model's JSON Schema).
IS_WHOLE = BeforeValidator(_whole)


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)  # built in C; a key given twice leaves it shorter than `pairs`
    if len(result) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise MalformedJson(f"duplicate key {key!r} in JSON object")
            seen.add(key)
    return result


def _refuse_constant(name: str) -> Any:
    raise NotCanonical(f"{name} is not valid JSON and cannot be hashed")


def parse_json(data: bytes | str, limit: int = MAX_REQUEST_BYTES) -> Any:
    """Strict JSON: I-JSON's rules (no duplicate keys, no NaN/Infinity), size-limited."""
    if isinstance(data, str):
        try:
            data = data.encode()
        except UnicodeEncodeError:
            raise MalformedJson("the text is not valid Unicode (a lone surrogate)") from None
    size = len(data)
    if size > limit:
        raise RequestTooLarge(f"request is {size} bytes; the limit is {limit}")
    try:
        return json.loads(
            data, object_pairs_hook=_no_duplicate_keys, parse_constant=_refuse_constant
        )
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, InvalidRequest):
            raise
        raise MalformedJson(f"malformed JSON: {exc}") from None


def validate(model: type[M], document: Any) -> M:
    """Validate a parsed JSON document against a pydantic model; InvalidRequest lists every
    failing field with its message."""
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        fields = [
            {"field": ".".join(str(p) for p in err["loc"]) or "(body)", "message": err["msg"]}
            for err in exc.errors()
        ]
        summary = "; ".join(f"{f['field']}: {f['message']}" for f in fields[:5])
        raise InvalidRequest(f"invalid request: {summary}", fields=fields) from None
