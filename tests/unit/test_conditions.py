"""bot/conditions.py: the one condition form of standing grants (and, to come, routes and the
MCP gateway's policy): what it accepts, what it refuses and where, and that it holds exactly
when its comparisons do, for generated arguments."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot import conditions
from bot.errors import InvalidRequest
from bot.standing import GrantScope, conditions_for
from tests.support.samples import approval_record

_HOUR = timedelta(hours=1)
JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(max_size=8),
)


def holds(document: Any, arguments: dict[str, Any]) -> bool:
    return conditions.parse(document).holds(arguments)


def test_each_op_compares_as_the_hash_does() -> None:
    args = {"amount": 1200, "currency": "eur", "charge": "ch_abc", "flag": True, "n": 1}
    assert holds({"arg": "amount", "op": "<=", "value": 1200}, args)
    assert not holds({"arg": "amount", "op": "<", "value": 1200}, args)
    assert holds({"arg": "amount", "op": "==", "value": 1200.0}, args)  # 1200 is 1200.0
    assert not holds({"arg": "n", "op": "==", "value": True}, args)  # 1 is not true
    assert holds({"arg": "currency", "op": "in", "value": ["usd", "eur"]}, args)
    assert holds({"arg": "charge", "op": "glob", "value": "ch_*"}, args)
    assert not holds({"arg": "charge", "op": "glob", "value": "CH_*"}, args)  # case matters
    assert holds({"arg": "currency", "op": ">", "value": "dollars"}, args)  # strings order
    # Across types, or with the argument missing, nothing holds: not even !=.
    assert not holds({"arg": "currency", "op": "<", "value": 5}, args)
    assert not holds({"arg": "flag", "op": ">=", "value": 0}, args)
    assert not holds({"arg": "missing", "op": "!=", "value": 1}, args)
    both = {"all": [{"arg": "amount", "op": ">", "value": 0}, {"arg": "n", "op": "==", "value": 2}]}
    either = {"any": both["all"]}
    assert not holds(both, args) and holds(either, args)


@pytest.mark.parametrize(
    ("document", "where", "words"),
    [
        ({"arg": "a", "op": "~", "value": 1}, "condition", "unknown op '~'"),
        ({"arg": "a", "op": "<", "value": [1]}, "condition", "needs a number or a string, not [1]"),
        ({"arg": "a", "op": "in", "value": []}, "condition", "non-empty list"),
        ({"arg": "a", "op": "glob", "value": 3}, "condition", "string pattern"),
        ({"arg": "", "op": "==", "value": 3}, "condition", "top-level argument"),
        ({"all": []}, "condition.all", "non-empty list"),
        (
            {"any": [{"arg": "a", "op": "==", "value": 1}, 3]},
            "condition.any[1]",
            "expected an object",
        ),
        ({"arg": "a", "op": "==", "value": 1, "x": 2}, "condition", "unexpected keys"),
    ],
)
def test_what_could_never_hold_is_refused_naming_where(
    document: Any, where: str, words: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        conditions.parse(document)
    assert refused.value.fields is not None
    assert refused.value.fields[0]["field"] == where
    assert words in refused.value.fields[0]["message"]


def test_the_text_form_reads_as_the_json_form_and_runs_nothing() -> None:
    parsed = conditions.text(
        'amount <= 12000 and (currency in ["eur", "usd"] or glob(charge, "ch_*"))'
    )
    assert parsed.document() == {
        "all": [
            {"arg": "amount", "op": "<=", "value": 12000},
            {
                "any": [
                    {"arg": "currency", "op": "in", "value": ["eur", "usd"]},
                    {"arg": "charge", "op": "glob", "value": "ch_*"},
                ]
            },
        ]
    }
    for source, words in (
        ("__import__('os').system('x')", "only glob"),
        ("amount + 1 > 2", "argument's name"),
        ("1 < amount", "argument's name"),
        ("amount < limit", "not a constant"),
        ("0 < amount < 5", "not a comparison"),
        ("amount <=", "not a condition"),
    ):
        with pytest.raises(InvalidRequest, match="when: ") as refused:
            conditions.text(source)
        assert words in str(refused.value), (source, refused.value)


@given(
    limit=st.integers(min_value=-1000, max_value=1000),
    charge=st.text(max_size=4),
    arguments=st.dictionaries(
        st.sampled_from(["amount", "charge", "memo"]), JSON_SCALARS, max_size=3
    ),
)
def test_a_grant_from_a_card_never_covers_arguments_outside_its_scope(
    limit: int, charge: str, arguments: dict[str, Any]
) -> None:
    """A grant bound to the card's charge (equal) and amount (at most) covers exactly the
    calls whose charge is that string and whose amount is a number no larger."""
    card = approval_record(tool_args={"amount": limit, "charge": charge})
    document = conditions_for(
        card, GrantScope(lifetime=_HOUR, equal=("charge",), at_most=("amount",))
    )
    amount = arguments.get("amount")
    inside = (
        arguments.get("charge") == charge
        and isinstance(arguments.get("charge"), str)
        and isinstance(amount, int | float)
        and not isinstance(amount, bool)
        and amount <= limit
    )
    assert holds(document, arguments) == inside


def test_a_grant_binds_only_what_the_card_shows() -> None:
    card = approval_record(tool_args={"amount": 10, "memo": "hi", "ok": True})
    with pytest.raises(InvalidRequest, match="no argument 'charge'"):
        conditions_for(card, GrantScope(lifetime=_HOUR, equal=("charge",)))
    with pytest.raises(InvalidRequest, match="memo is not a number"):
        conditions_for(card, GrantScope(lifetime=_HOUR, at_most=("memo",)))
    with pytest.raises(InvalidRequest, match="ok is not a number"):
        conditions_for(card, GrantScope(lifetime=_HOUR, at_most=("ok",)))
    assert conditions_for(card, GrantScope(lifetime=_HOUR)) is None
