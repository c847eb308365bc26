"""A route's `when` (bot/conditions.py's text form): checked when the config loads, with the
error naming its line; it sends a call to a route by its arguments; an approver's edit may
not move a call to another route."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from bot.config import load_config, parse_config
from bot.edits import revise
from bot.errors import ConfigError, EditRefused
from tests.support.cli import to_toml
from tests.support.samples import TEST_CONFIG, approval_record

LARGE = {
    "tenant": "acme",
    "capability": "payments.*",
    "approvers": ["carol"],
    "when": "amount > 10000 and currency in ['eur', 'usd']",
    "edits": "any",
}


def _config() -> dict:
    raw = copy.deepcopy(TEST_CONFIG)
    raw["routes"][0]["edits"] = "any"
    raw["routes"].insert(0, LARGE)
    return raw


def test_a_call_takes_the_first_route_its_arguments_meet() -> None:
    directory = parse_config(_config()).directory()
    large = directory.route_for("acme", "payments.refund", {"amount": 20000, "currency": "eur"})
    small = directory.route_for("acme", "payments.refund", {"amount": 500, "currency": "eur"})
    odd = directory.route_for("acme", "payments.refund", {"amount": 20000, "currency": "gbp"})
    assert large.approvers == ("carol",)
    assert small.approvers == odd.approvers == ("group:finance",)
    # Without the arguments (the API's route preview), a conditional route is passed over.
    assert directory.route_for("acme", "payments.refund").approvers == ("group:finance",)
    row = approval_record(tool_args={"amount": 20000, "currency": "usd"})
    assert directory.route_of(row).approvers == ("carol",)


def test_an_edit_may_not_move_a_call_to_another_route() -> None:
    directory = parse_config(_config()).directory()
    row = approval_record(tool_args={"amount": 20000, "currency": "eur"})
    route = directory.route_of(row)
    with pytest.raises(EditRefused, match="would take another route"):
        revise(row, {"amount": 900, "currency": "eur"}, route, directory)
    kept = revise(row, {"amount": 15000, "currency": "eur"}, route, directory)
    assert kept.arguments["amount"] == 15000
    small = approval_record(tool_args={"amount": 500, "currency": "eur"})
    with pytest.raises(EditRefused, match="would take another route"):
        revise(small, {"amount": 50000, "currency": "eur"}, directory.route_of(small), directory)


@pytest.mark.parametrize(
    ("when", "words"),
    [
        ("amount >", "not a condition"),
        ("amount < [1, 2]", "needs a number or a string"),
        ("open('x')", "only glob"),
    ],
)
def test_a_when_that_is_not_a_condition_is_refused_at_load_naming_its_line(
    tmp_path: Path, when: str, words: str
) -> None:
    raw = _config()
    raw["routes"][0]["when"] = when
    path = tmp_path / "signoff.toml"
    path.write_text(to_toml(raw), "utf-8")
    line = next(
        n for n, text in enumerate(path.read_text().splitlines(), 1) if text.startswith("when")
    )
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert f"routes.0.when (line {line}): " in str(refused.value)
    assert words in str(refused.value)
