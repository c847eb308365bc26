"""Field types shared by the config and the request body, so both refuse the same things."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

from bot.durations import parse_duration


def _duration(value: str) -> str:
    parse_duration(value)  # its ValueError becomes a validation error naming the field
    return value


def _http_url(value: str) -> str:
    if not re.match(r"^https?://[^\s/?#@]+", value):
        raise ValueError(f"expected an http(s) URL with a host, got {value!r}")
    return value


def _text(value: str) -> str:
    # PostgreSQL text cannot hold NUL; SQLite can. Refuse it so both databases agree.
    if "\x00" in value:
        raise ValueError("contains a NUL character (U+0000)")
    return value


# Validators to compose with other constraints: Annotated[StrictStr, Field(...), NO_NUL].
IS_DURATION = AfterValidator(_duration)
IS_HTTP_URL = AfterValidator(_http_url)
NO_NUL = AfterValidator(_text)

DurationText = Annotated[str, IS_DURATION]
HttpUrl = Annotated[str, IS_HTTP_URL]
