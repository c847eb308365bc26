"""Hypothesis settings and strategies the property tests share: JSON as requests carry it,
Python values that are not JSON at all, and principal names."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from bot.canonical import MAX_SAFE_INTEGER


def property_settings(max_examples: int) -> settings:
    """`database=None` keeps hypothesis from saving failing examples under
    `.hypothesis/examples` and replaying one checkout's old failures first on the next run, so
    a run depends only on the test file and its seed; under CI=true the seed is fixed too
    (`derandomize`), so CI tries the same examples every time, while local runs keep exploring
    new ones (a failure prints the example to add as @example). `deadline=None`: the functions
    tested do no I/O, but a loaded machine can make one example slow without making it wrong.
    The example counts of tests/unit/test_properties_*.py keep those files to about ten seconds
    of CPU together."""
    return settings(
        max_examples=max_examples,
        database=None,
        derandomize=os.environ.get("CI") == "true",
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# -- JSON ------------------------------------------------------------------------------------

# Text as JSON can carry it: every Unicode scalar value (hypothesis's text() leaves out lone
# surrogates, which UTF-8 cannot encode).
texts = st.text(max_size=30)
# Text as a Python str can hold it, lone surrogates included (json.loads("\"\\ud800\"")):
# hypothesis's text() seldom makes them even when asked, so half of these are built by hand.
any_texts = texts | st.lists(
    st.characters(codec=None, categories=None) | st.characters(categories=["Cs"]), max_size=30
).map("".join)

# Doubles from 2^53 up to 1e21 are integers that JCS writes without a fraction or exponent
# ("9007199254740992"), so signoff refuses them as it refuses that integer: the properties
# about accepted values leave them out (the round-trip property in
# tests/unit/test_properties_create_body.py is about them).
_AMBIGUOUS = (2.0**53, 1e21)
ambiguous_floats = st.floats(min_value=_AMBIGUOUS[0], max_value=_AMBIGUOUS[1], exclude_max=True)
ambiguous_floats |= ambiguous_floats.map(lambda f: -f)
json_floats = st.floats(allow_nan=False, allow_infinity=False).filter(
    lambda f: not _AMBIGUOUS[0] <= abs(f) < _AMBIGUOUS[1]
)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
    | json_floats
    | texts
)


def _json_containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4)


json_values = st.recursive(json_scalars, _json_containers, max_leaves=20)


# -- principal names -------------------------------------------------------------------------

principal_keys = st.from_regex(r"[a-z0-9][a-z0-9_.-]{0,15}", fullmatch=True)


# -- Python values ---------------------------------------------------------------------------

python_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | any_texts
    | st.binary(max_size=4)
    | st.datetimes()
    | st.decimals()
    | st.complex_numbers()
)
python_keys = any_texts | st.integers() | st.none() | st.booleans() | st.tuples(st.integers())
python_values = st.recursive(
    python_scalars,
    lambda children: (
        st.lists(children, max_size=3)
        | st.tuples(children)
        | st.frozensets(st.integers(), max_size=2)
        | st.dictionaries(python_keys, children, max_size=3)
    ),
    max_leaves=12,
)
