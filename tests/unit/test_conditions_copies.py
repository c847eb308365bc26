"""The condition language has two copies: the server's (bot/conditions.py: routes, standing
grants) and the client's (clients/python/signoff_client/conditions.py: the MCP gateway's `when`),
since the client cannot import the server. A policy's `when` must mean what the same text
means in the server's config, so the two must not drift apart:

- as code: the same module once docstrings are dropped and the imports of canonical JSON and
  the error classes are read as the same thing (a change to one copy alone fails here);
- as behaviour: for conditions and arguments hypothesis makes up, both accept the same
  conditions (refusing the rest in the same words) and decide every call alike. This also
  covers the one difference the code check cannot see, the two `canonical_json` functions.

Settings as in the property tests (tests/support/json_strategies.py property_settings): no
example database, a fixed seed under CI=true.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bot import conditions as server
from bot.errors import InvalidRequest as ServerInvalid
from signoff_client import conditions as client
from signoff_client.errors import InvalidRequest as ClientInvalid

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "bot" / "conditions.py"
CLIENT = ROOT / "clients" / "python" / "signoff_client" / "conditions.py"

# What each copy imports for the same job.
_SAME = {
    "bot.canonical": "<canonical json>",
    "signoff_client.hashing": "<canonical json>",
    "bot.errors": "<errors>",
    "signoff_client.errors": "<errors>",
}


def normalised(source: str) -> tuple[list[str], list[str]]:
    """(the imports, the rest of the module's statements), each statement as an AST dump,
    with every docstring removed and the two packages' imports named alike. The imports are
    sorted: the two copies order them as their own package names sort."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                if isinstance(body[0].value.value, str):
                    node.body = body[1:] or [ast.Pass()]
    imports, rest = [], []
    for statement in tree.body:
        if isinstance(statement, ast.ImportFrom) and statement.module in _SAME:
            statement.module = _SAME[statement.module]
            imports.append(ast.dump(statement, include_attributes=False))
        elif isinstance(statement, ast.Import | ast.ImportFrom):
            imports.append(ast.dump(statement, include_attributes=False))
        else:
            rest.append(ast.dump(statement, include_attributes=False))
    return sorted(imports), rest


def test_the_copies_are_the_same_code() -> None:
    server_imports, server_code = normalised(SERVER.read_text("utf-8"))
    client_imports, client_code = normalised(CLIENT.read_text("utf-8"))
    assert client_imports == server_imports
    assert len(client_code) == len(server_code)
    for mine, theirs in zip(client_code, server_code, strict=True):
        assert mine == theirs, f"{CLIENT.relative_to(ROOT)} differs from bot/conditions.py"


@pytest.mark.parametrize(
    "change",
    [
        ('if self.op == "<":', 'if self.op == "<=":'),  # one operator's meaning
        ("MAX_PARTS = 50", "MAX_PARTS = 51"),  # a bound
        ("from fnmatch import fnmatchcase", "from fnmatch import fnmatch as fnmatchcase"),
        (
            "from bot.errors import InvalidRequest, SignoffError",
            "from bot.errors import SignoffError",
        ),
    ],
)
def test_a_change_to_one_copy_alone_is_seen(change: tuple[str, str]) -> None:
    old, new = change
    source = SERVER.read_text("utf-8")
    assert old in source
    client_source = CLIENT.read_text("utf-8")
    # Docstrings and comments are not code: a copy may word them its own way.
    assert '"""The value as the hash' in client_source
    assert normalised(client_source) == normalised(
        client_source.replace('"""The value as the hash', '"""Another wording: the value as')
    )
    assert normalised(source.replace(old, new)) != normalised(client_source)


# -- behaviour ------------------------------------------------------------------------------

_SETTINGS = settings(
    max_examples=300,
    database=None,
    derandomize=os.environ.get("CI") == "true",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

NAMES = ["amount", "currency", "charge", "flag", "items"]
# Scalars where the two canonical forms could part: ints and doubles past ±(2^53 - 1), the
# doubles JCS writes as bare integers, NaN and infinities, lone surrogates; and the usual.
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.sampled_from([0, 1, -1, 50, 2**53 - 1, 2**53, -(2**53), 1.0, 0.0, -0.0, 1.5, 2.0**53])
    | st.floats()
    | st.text(max_size=6)
    | st.sampled_from(["eur", "usd", "ch_1", "ch_*", "\ud800", "", "[a-c]*"])
)
values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=8,
)
numbers = (
    st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats()
    | st.sampled_from([0, 1, 50, 50.0, 2**53 - 1, 2**53, 2.0**53, -0.0, 1.5])
)
strings = st.text(max_size=6) | st.sampled_from(["eur", "usd", "ch_1", "ch_*", "\ud800", "[a-c]*"])
# Mostly comparisons the language accepts (each op with the constants it takes), and some
# that it refuses: the refusals must agree too.
comparisons = st.one_of(
    st.fixed_dictionaries(
        {"arg": st.sampled_from(NAMES), "op": st.sampled_from(["==", "!="]), "value": values}
    ),
    st.fixed_dictionaries(
        {
            "arg": st.sampled_from(NAMES),
            "op": st.sampled_from(["<", "<=", ">", ">="]),
            "value": numbers | strings,
        }
    ),
    st.fixed_dictionaries(
        {"arg": st.sampled_from(NAMES), "op": st.just("in"), "value": st.lists(values, max_size=3)}
    ),
    st.fixed_dictionaries({"arg": st.sampled_from(NAMES), "op": st.just("glob"), "value": strings}),
    st.fixed_dictionaries(
        {
            "arg": st.sampled_from([*NAMES, "", 1, None]),
            "op": st.sampled_from([*server.OPS, "~", None]),
            "value": values,
        }
    ),
)
documents = st.recursive(
    comparisons,
    lambda parts: st.dictionaries(st.sampled_from(["all", "any"]), st.lists(parts, max_size=3),
                                  min_size=1, max_size=1),
    max_leaves=6,
)  # fmt: skip


def _constants(document: Any) -> list[Any]:
    if isinstance(document, dict) and ("all" in document or "any" in document):
        return [c for part in next(iter(document.values())) for c in _constants(part)]
    value = document.get("value")
    return list(value) if isinstance(value, list | tuple) else [value]


def _near(value: Any) -> list[Any]:
    """Values a call may hold that are, or almost are, the constant: the same number as
    another type, its neighbours, the same as text or in a list."""
    near = [value, [value], str(value)]
    if isinstance(value, int | float) and not isinstance(value, bool):
        near += [value + 1, value - 1, True, False]
        near.append(float(value) if isinstance(value, int) else value)
        if isinstance(value, float) and value.is_integer():
            near.append(int(value))
    return near


def calls_for(document: Any) -> st.SearchStrategy[list[dict[str, Any]]]:
    """Arguments for calls to judge by the condition: random values and values near its
    constants, under its argument names."""
    near = [v for c in _constants(document) for v in _near(c)]
    value = st.one_of(values, *[st.sampled_from(near)] * 3) if near else values
    call = st.fixed_dictionaries({}, optional=dict.fromkeys(NAMES, value))
    return st.lists(call, min_size=1, max_size=6)


def _text(document: Any) -> str:
    """The same condition in the text form, as a person writes it in a config file."""
    if "all" in document or "any" in document:
        ((key, parts),) = document.items()
        joiner = " and " if key == "all" else " or "
        return "(" + joiner.join(_text(p) for p in parts) + ")" if parts else "x =="
    arg, op, value = document["arg"], document["op"], document["value"]
    if op == "glob":
        return f"glob({arg}, {value!r})"
    return f"{arg} {op} {value!r}"


def _outcome(module: Any, error: type[Exception], read: Any, *args: Any) -> Any:
    """What a copy makes of the input: the refusal's words and fields, or the condition."""
    try:
        return ("condition", read(*args))
    except error as exc:
        return ("refused", exc.message, exc.fields)


def _same(document_or_text: Any, how: str) -> tuple[Any, Any]:
    mine = _outcome(client, ClientInvalid, getattr(client, how), document_or_text)
    theirs = _outcome(server, ServerInvalid, getattr(server, how), document_or_text)
    assert mine[0] == theirs[0], (mine, theirs)
    if mine[0] == "refused":
        assert mine == theirs
        return None, None
    assert mine[1].document() == theirs[1].document()
    return mine[1], theirs[1]


cases = documents.flatmap(lambda document: st.tuples(st.just(document), calls_for(document)))


@_SETTINGS
@given(cases)
@example(({"arg": "amount", "op": "==", "value": 1}, [{"amount": 1.0}, {"amount": True}]))
@example(({"arg": "amount", "op": "!=", "value": 2**53}, [{"amount": 2**53 + 1}, {}]))
@example(({"arg": "amount", "op": "in", "value": [2.0**53]}, [{"amount": 2**53}]))
@example(({"arg": "charge", "op": "==", "value": "x"}, [{"charge": "\ud800"}]))
@example(({"arg": "amount", "op": "<", "value": float("nan")}, [{"amount": 1}]))
def test_both_copies_read_and_decide_a_condition_alike(
    case: tuple[Any, list[dict[str, Any]]],
) -> None:
    document, calls = case
    mine, theirs = _same(document, "parse")
    if mine is None:
        return
    for call in calls:
        assert mine.holds(call) == theirs.holds(call), call


@_SETTINGS
@given(cases)
@example(({"arg": "amount", "op": "<=", "value": 50}, [{"amount": 50.0}, {"amount": "50"}]))
@example(({"arg": "currency", "op": "in", "value": ["eur", "usd"]}, [{"currency": "usd"}]))
def test_both_copies_read_and_decide_the_text_form_alike(
    case: tuple[Any, list[dict[str, Any]]],
) -> None:
    document, calls = case
    mine, theirs = _same(_text(document), "text")
    if mine is None:
        return
    for call in calls:
        assert mine.holds(call) == theirs.holds(call), call


@pytest.mark.parametrize(
    "source",
    [
        "amount <= 50 and currency in ['eur', 'usd']",
        "amount > 5000 or glob(charge, 'ch_*')",
        "__import__('os').system('true')",
        "amount <= 50 and",
        "not amount",
        "amount == flag",
        " or ".join(["amount == 1"] * 51),
    ],
)
def test_the_examples_of_both_docs_read_alike(source: str) -> None:
    _same(source, "text")
