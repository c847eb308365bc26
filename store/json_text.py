"""JSON text for the store's JSON columns and the API's responses, written and read by orjson.

Here orjson writes an approval's JSON in a seventh of the standard library's time and reads
it in half, the check below included (JSON was about a tenth of a create's CPU, issue 27),
but three things it does differently would change a value, so those go to the standard
library:

- it refuses to write an integer past 64 bits (a JSON Schema's bound may be one) and a lone
  surrogate: `dumps` writes those with `json.dumps`, as before;
- it reads an integer past 64 bits as a float: text with a run of 19 digits or more (every
  such integer, and the odd long number inside a string) is read by `json.loads`;
- it refuses to read an escaped lone surrogate, which `json.loads` reads.

The text differs from the standard library's only in form (no spaces, UTF-8 unescaped);
rows written before read the same. Two differences stay, harmless here: orjson writes NaN
and infinities as null (request bodies refuse them: bot.validation), and writes datetimes,
UUIDs and dataclasses where `json.dumps` raised. The list endpoint's records are still
written by `json.dumps`, whose output sizes its pages. Request bodies are still parsed by
bot.validation (duplicate keys are refused there, which orjson cannot tell), and hashes
are RFC 8785's (bot.canonical).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

# Every ASCII digit to "0", everything else to ".": a run of 19 digits is then found by
# bytes.find, a twentieth of what a regular expression took (which cost more than
# json.loads itself).
_DIGITS = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x2E for byte in range(256))
_LONG_RUN = b"0" * 19


def dumps(value: Any) -> str:
    """`value` as JSON text (UTF-8 as is, no spaces)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:  # orjson.JSONEncodeError: see the module's docstring
        return json.dumps(value)


def loads(text: str | bytes) -> Any:
    """The value of JSON text written by `dumps` (or by the standard library before it)."""
    if isinstance(text, str):
        data = text.encode()
    elif isinstance(text, bytes):
        data = text
    else:  # as json.loads refuses it: SQLite hands back a number stored in a JSON column as one
        raise TypeError(f"JSON text must be str or bytes, not {type(text).__name__}")
    if data.translate(_DIGITS).find(_LONG_RUN) >= 0:
        return json.loads(data)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:  # an escaped lone surrogate, or text that is not JSON
        return json.loads(data)  # which reads the one and raises its own error for the other
