"""Conditions on a call's arguments: one small form, checked once, evaluated without running
any code.

A condition compares one top-level argument with a constant, or combines conditions:

    {"arg": "amount", "op": "<=", "value": 12000}
    {"arg": "currency", "op": "in", "value": ["eur", "usd"]}
    {"arg": "charge", "op": "glob", "value": "ch_*"}
    {"all": [condition, ...]}     {"any": [condition, ...]}

`op` is one of == != < <= > >= in glob. `parse` checks a document once (a condition that
cannot be true of any JSON value is refused, naming where it is) and returns a Condition;
`Condition.holds(arguments)` decides. The text form (`text`, for config files) is the same
thing written as `amount <= 12000 and currency in ["eur", "usd"]`, read with Python's own
parser and accepted only where it is one of these shapes: nothing is ever evaluated.

Equality is the hash's: 1 and 1.0 are equal, true and 1 are not (RFC 8785). Ordering compares
numbers with numbers and strings with strings; a glob matches strings (fnmatch, case
sensitive). A comparison with an argument the call does not have, or of another type, is
false, and so is its `!=`: a condition never holds for want of an argument.

This is the client's copy of the server's bot/conditions.py, so that the MCP gateway's policy
(mcp/policy.py) reads `when` exactly as the server reads a route's: the client cannot import
the server. Only the imports differ (the client's canonical JSON and error classes);
tests/unit/test_conditions_copies.py fails when the two drift apart.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from signoff_client.errors import InvalidRequest, SignoffError
from signoff_client.hashing import canonical_json

OPS = ("==", "!=", "<", "<=", ">", ">=", "in", "glob")
_ORDER = ("<", "<=", ">", ">=")
_AST_OPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
_ABSENT = object()
MAX_PARTS = 50  # comparisons in one condition: a config line, not a program


def _canonical(value: Any) -> str | None:
    """The value as the hash writes it; None for one it cannot (never stored: the intake
    refuses such arguments, so a condition does not hold for it either)."""
    try:
        return canonical_json(value)
    except (TypeError, ValueError, SignoffError):
        return None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class Comparison:
    arg: str
    op: str
    value: Any

    def holds(self, arguments: dict[str, Any]) -> bool:
        given = arguments.get(self.arg, _ABSENT)
        if given is _ABSENT:
            return False
        if self.op in ("==", "!="):
            if (mine := _canonical(given)) is None:
                return False
            same = mine == _canonical(self.value)
            return same if self.op == "==" else not same
        if self.op == "in":
            mine = _canonical(given)
            return mine is not None and any(mine == _canonical(v) for v in self.value)
        if self.op == "glob":
            return isinstance(given, str) and fnmatchcase(given, self.value)
        if _number(self.value) != _number(given) or (
            not _number(given) and not isinstance(given, str)
        ):
            return False  # ordering across types, or of a list, never holds
        if self.op == "<":
            return bool(given < self.value)
        if self.op == "<=":
            return bool(given <= self.value)
        if self.op == ">":
            return bool(given > self.value)
        return bool(given >= self.value)

    def document(self) -> dict[str, Any]:
        return {"arg": self.arg, "op": self.op, "value": self.value}


@dataclass(frozen=True, slots=True)
class Combined:
    every: bool  # all (True) or any (False)
    parts: tuple[Condition, ...]

    def holds(self, arguments: dict[str, Any]) -> bool:
        results = (part.holds(arguments) for part in self.parts)
        return all(results) if self.every else any(results)

    def document(self) -> dict[str, Any]:
        return {"all" if self.every else "any": [p.document() for p in self.parts]}


Condition = Comparison | Combined


def parse(document: Any, where: str = "condition") -> Condition:
    """The Condition a document describes; InvalidRequest naming the first part that is not
    one, or could never hold."""
    count = [0]

    def visit(node: Any, at: str) -> Condition:
        if not isinstance(node, dict):
            raise _refuse(at, "expected an object: {arg, op, value}, {all: [...]} or {any: [...]}")
        if set(node) in ({"all"}, {"any"}):
            ((key, parts),) = node.items()
            if not isinstance(parts, list) or not parts:
                raise _refuse(f"{at}.{key}", "expected a non-empty list of conditions")
            return Combined(
                key == "all", tuple(visit(p, f"{at}.{key}[{i}]") for i, p in enumerate(parts))
            )
        if set(node) != {"arg", "op", "value"}:
            raise _refuse(at, f"unexpected keys {sorted(node)}; expected arg, op, value")
        count[0] += 1
        if count[0] > MAX_PARTS:
            raise _refuse(at, f"more than {MAX_PARTS} comparisons")
        return _comparison(node["arg"], node["op"], node["value"], at)

    return visit(document, where)


def _comparison(arg: Any, op: Any, value: Any, at: str) -> Comparison:
    if not isinstance(arg, str) or not arg:
        raise _refuse(at, "`arg` must name a top-level argument")
    if op not in OPS:
        raise _refuse(at, f"unknown op {op!r}; one of {' '.join(OPS)}")
    try:
        canonical_json(value)  # a constant the hash could not carry is refused here
    except (TypeError, ValueError, SignoffError):
        raise _refuse(at, f"{arg} {op}: the value is not JSON the hash can carry") from None
    if op in _ORDER and not (_number(value) or isinstance(value, str)):
        shown = canonical_json(value).decode()
        raise _refuse(at, f"{arg} {op} needs a number or a string, not {shown}")
    if op == "in" and (not isinstance(value, list) or not value):
        raise _refuse(at, f"{arg} in needs a non-empty list")
    if op == "glob" and not isinstance(value, str):
        raise _refuse(at, f"{arg} glob needs a string pattern")
    return Comparison(arg, op, value)


def text(source: str, where: str = "when") -> Condition:
    """The text form: comparisons (`amount <= 12000`, `currency in ["eur"]`,
    `glob(charge, "ch_*")`) joined by `and`, `or` and parentheses, read by Python's parser
    and refused unless it is exactly that."""
    try:
        tree = ast.parse(source.strip(), mode="eval").body
    except SyntaxError as exc:
        raise _refuse(where, f"not a condition ({exc.msg} at column {exc.offset})") from None
    count = [0]

    def visit(node: ast.expr) -> Condition:
        if isinstance(node, ast.BoolOp):
            parts = tuple(visit(v) for v in node.values)
            return Combined(isinstance(node.op, ast.And), parts)
        count[0] += 1
        if count[0] > MAX_PARTS:
            raise _refuse(where, f"more than {MAX_PARTS} comparisons")
        if isinstance(node, ast.Call):
            if (
                isinstance(node.func, ast.Name)
                and node.func.id == "glob"
                and len(node.args) == 2
                and not node.keywords
                and isinstance(node.args[0], ast.Name)
            ):
                return _comparison(node.args[0].id, "glob", _constant(node.args[1]), where)
            raise _refuse(where, f'only glob(argument, "pattern") may be called: {_show(node)}')
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left, (op,), (right,) = node.left, node.ops, node.comparators
            if not isinstance(left, ast.Name):
                raise _refuse(where, f"the left side must be an argument's name: {_show(node)}")
            if isinstance(op, ast.In):
                return _comparison(left.id, "in", _constant(right), where)
            if type(op) in _AST_OPS:
                return _comparison(left.id, _AST_OPS[type(op)], _constant(right), where)
        raise _refuse(where, f"not a comparison of an argument with a constant: {_show(node)}")

    def _constant(node: ast.expr) -> Any:
        try:
            value = ast.literal_eval(node)
        except ValueError:
            raise _refuse(where, f"not a constant: {_show(node)}") from None
        if isinstance(value, tuple | set):
            value = list(value)
        return value

    return visit(tree)


def _show(node: ast.AST) -> str:
    return ast.unparse(node)


def _refuse(where: str, message: str) -> InvalidRequest:
    return InvalidRequest(f"{where}: {message}", fields=[{"field": where, "message": message}])


__all__ = ["OPS", "Combined", "Comparison", "Condition", "parse", "text"]
