"""JSON text as the store and the API write it (store/json_text.py): orjson's speed, never a
value different from what the standard library would have kept."""

from __future__ import annotations

import json

import pytest

from store import json_text

VALUES = [
    {"amount": 12000, "currency": "EUR", "note": "für Zoë ✓", "nested": [1, 2.5, None, True]},
    2**70,  # past 64 bits: orjson refuses to write it and would read it as a float
    -(2**70),
    2**64 - 1,  # 20 digits: read by the standard library, as every run of 19 or more is
    -(2**63),
    {"account": 123456789012345678901234567890},
    {"id": "00000000000000000000000"},  # a long run of digits inside a string
    0.1,
    1e16,
    "\ud800",  # a lone surrogate: orjson refuses it, the standard library escapes it
]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_what_is_written_reads_back_as_the_same_value(value: object) -> None:
    text = json_text.dumps(value)
    back = json_text.loads(text)
    assert back == value and type(back) is type(value)
    assert json_text.loads(text.encode()) == value


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_text_the_standard_library_wrote_reads_as_it_did(value: object) -> None:
    # Rows written before orjson: spaces after separators, non-ASCII escaped.
    text = json.dumps(value)
    assert json_text.loads(text) == json.loads(text)
    assert type(json_text.loads(text)) is type(json.loads(text))


def test_the_text_is_the_standard_librarys_values_in_utf8() -> None:
    value = {"name": "Zoë", "n": [1, 2]}
    assert json_text.dumps(value) == '{"name":"Zoë","n":[1,2]}'
    assert json.loads(json_text.dumps(value)) == value


def test_a_value_that_is_not_text_is_refused_as_the_standard_library_refuses_it() -> None:
    # SQLAlchemy's SQLite JSON type reads a number stored as one by catching this TypeError.
    for value in (1.5, 12000, None):
        with pytest.raises(TypeError):
            json.loads(value)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            json_text.loads(value)  # type: ignore[arg-type]
