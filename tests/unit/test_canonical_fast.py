"""canonical_json writes most values with the standard library's encoder instead of rfc8785
(bot/canonical.py): the bytes, and what is refused, must be exactly rfc8785's behind the
check, on generated values. The golden vectors of tests/unit/test_canonical.py hold both to
RFC 8785 itself.

Generated: JSON as requests carry it (with and without floats), keys from the parts of
Unicode where UTF-16 and code-point order differ (U+D800 up: astral characters beside
U+E000-U+FFFF), every control character, and Python values that are not JSON at all.
"""

from __future__ import annotations

from typing import Any

import rfc8785
from hypothesis import example, given
from hypothesis import strategies as st

from bot.canonical import MAX_SAFE_INTEGER, canonical_json, check_canonical
from bot.errors import NotCanonical
from tests.support.json_strategies import json_values, python_values
from tests.support.json_strategies import property_settings as _settings


def reference(value: Any) -> bytes | None:
    """What canonical_json answered before: the check, then rfc8785 (None: refused)."""
    try:
        check_canonical(value)
        return rfc8785.dumps(value)
    except (NotCanonical, rfc8785.CanonicalizationError, UnicodeEncodeError):
        return None


def ours(value: Any) -> bytes | None:
    try:
        return canonical_json(value)
    except NotCanonical:
        return None


# Where the two key orders part: just below and above the surrogates, the private use area
# and the last BMP characters, astral characters, and ASCII for company.
_edges = st.sampled_from(
    ["a", "z", "\u00e9", "\ud7ff", "\ue000", "\uf8ff", "\uffff", "\U00010000", "\U0001f600"]
)
order_keys = st.lists(_edges, min_size=1, max_size=3).map("".join)
controls = st.characters(max_codepoint=0x7F) | st.sampled_from(["\u2028", "\u2029", "\ufeff"])
plain_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
    | st.text(controls, max_size=8)
    | st.text(max_size=8)
)
plain_values = st.recursive(
    plain_scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(order_keys | st.text(max_size=6), children, max_size=5)
    ),
    max_leaves=20,
)


@_settings(300)
@given(value=plain_values)
@example(value={"\ue000": 1, "\U0001f600": 2})
@example(value={"b": '\u007f\u0000\u001f\b\t\n\f\r"\\/', "a": [True, None, -0]})
def test_values_without_floats_are_written_as_rfc8785_writes_them(value: Any) -> None:
    assert ours(value) == reference(value) is not None


@_settings(300)
@given(value=json_values)
@example(value={"amount": 1.0, "rate": 1e21, "tiny": 5e-324})
def test_any_json_value_is_written_as_rfc8785_writes_it(value: Any) -> None:
    assert ours(value) == reference(value)


@_settings(300)
@given(value=python_values)
@example(value={"k": "\ud800"})
@example(value={1: "a"})
@example(value=[2**53])
def test_what_is_refused_is_what_was_refused(value: Any) -> None:
    assert ours(value) == reference(value)
