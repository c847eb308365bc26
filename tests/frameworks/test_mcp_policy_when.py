"""The gateway policy's argument-aware rules (issue 30): a tool's entry may be a list of rules
whose `when` is a condition on the call's arguments, checked in order, the first that holds
deciding, and `default` when none does. What a policy file says is read and checked when it
is loaded: a `when` that is not a condition, or could never hold, is refused naming the file,
the line and the key, as every other mistake in the file is.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from signoff_client.mcp import PolicyError, load_policy, parse_policy
from tests.support import prefork

HEAD = """\
[gateway]
server = "shop"
approvers = ["alice"]

[tools]
"""

# The brief's example, with a glob of its own and both list spellings.
POLICY = (
    HEAD
    + """\
refund = [
  { when = "amount <= 50", action = "allow" },
  { when = 'amount > 5000 or currency in ["btc", "doge"]', action = "deny" },
  { action = "ask", capability = "payments.refund", approvers = ["bob"] },
]
charge = [{ when = 'glob(card, "test_*")', action = "allow" }, "deny"]
read_note = "allow"

[[tools."send_*"]]
when = 'to == "ops@example.com"'
action = "allow"

[[tools."send_*"]]
when = "attachments in [0, 1]"
action = "ask"
"""
)


def decide(arguments: Any, tool: str = "refund") -> tuple[str, str | None]:
    decision = parse_policy(POLICY).decide(tool, arguments)
    return decision.action, decision.rule.name if decision.rule else None


@pytest.mark.parametrize(
    ("arguments", "action", "rule"),
    [
        ({"amount": 50}, "allow", "tools.refund[0]"),
        ({"amount": 50.0}, "allow", "tools.refund[0]"),  # RFC 8785: the same number
        ({"amount": -3, "currency": "btc"}, "allow", "tools.refund[0]"),  # the first decides
        ({"amount": 50.5}, "ask", "tools.refund[2]"),
        ({"amount": 5000}, "ask", "tools.refund[2]"),
        ({"amount": 5001}, "deny", "tools.refund[1]"),
        ({"amount": 100, "currency": "doge"}, "deny", "tools.refund[1]"),
        # Not numbers: no ordering holds, so neither conditional rule decides.
        ({"amount": "10"}, "ask", "tools.refund[2]"),
        ({"amount": True}, "ask", "tools.refund[2]"),
        ({"amount": None}, "ask", "tools.refund[2]"),
        ({}, "ask", "tools.refund[2]"),
        # Arguments that are not an object satisfy no `when`.
        ([{"amount": 1}], "ask", "tools.refund[2]"),
        ("amount <= 50", "ask", "tools.refund[2]"),
        (None, "ask", "tools.refund[2]"),
    ],
)
def test_the_first_rule_whose_when_holds_decides(arguments: Any, action: str, rule: str) -> None:
    assert decide(arguments) == (action, rule)


def test_a_list_where_no_rule_holds_falls_to_the_default() -> None:
    policy = parse_policy(POLICY)
    # The glob's list, in `[[tools."send_*"]]` tables.
    assert decide({"to": "ops@example.com"}, "send_mail") == ("allow", 'tools."send_*"[0]')
    assert decide({"to": "x@example.com", "attachments": 1.0}, "send_mail") == (
        "ask",
        'tools."send_*"[1]',
    )
    unmatched = policy.decide("send_mail", {"to": "x@example.com", "attachments": 3})
    assert (unmatched.action, unmatched.rule) == ("ask", None)  # `default` is ask
    assert unmatched.reason == 'the default: no rule of tools."send_*" held for these arguments'
    assert unmatched.capability == "mcp.shop.send_mail" and unmatched.approvers == ("alice",)
    strict = parse_policy(POLICY.replace('approvers = ["alice"]', 'default = "deny"'))
    assert strict.decide("send_mail", {"attachments": 3}).action == "deny"
    # A string item is a rule without `when`: it ends the list.
    assert decide({"card": "test_42"}, "charge") == ("allow", "tools.charge[0]")
    assert decide({"card": "live_42"}, "charge") == ("deny", "tools.charge[1]")


def test_what_a_rule_of_a_list_asks_for_is_its_own() -> None:
    policy = parse_policy(POLICY)
    asked = policy.decide("refund", {"amount": 700})
    assert (asked.capability, asked.approvers) == ("payments.refund", ("bob",))
    assert asked.reason == "rule tools.refund[2]" and asked.by_arguments
    allowed = policy.decide("refund", {"amount": 7})
    assert allowed.reason == "rule tools.refund[0]: amount <= 50"
    denied = policy.decide("refund", {"amount": 7000})
    assert denied.reason == 'rule tools.refund[1]: amount > 5000 or currency in ["btc", "doge"]'
    assert [r.line for r in policy.rules if r.pattern == "refund"] == [7, 8, 9]
    assert [r.line for r in policy.rules if r.pattern == "send_*"] == [14, 18]


def test_the_single_rule_forms_are_unchanged() -> None:
    policy = parse_policy(POLICY)
    for arguments in (None, {}, {"amount": 1}, [1]):
        read = policy.decide("read_note", arguments)
        assert (read.action, read.rule and read.rule.name, read.by_arguments) == (
            "allow",
            "tools.read_note",
            False,
        )
        other = policy.decide("anything", arguments)
        assert (other.action, other.rule, other.reason) == (
            "ask",
            None,
            "the default for tools no rule names",
        )


def test_check_prints_each_rule_in_order_and_what_is_left_to_the_default(
    tmp_path: Path,
) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(POLICY, "utf-8")
    summary = load_policy(path).summary().splitlines()
    assert summary[4:] == [
        "  'refund'[0]              allow when amount <= 50",
        '  \'refund\'[1]              deny when amount > 5000 or currency in ["btc", "doge"]',
        "  'refund'[2]              ask -> capability payments.refund, approvers bob",
        "  'charge'[0]              allow when glob(card, \"test_*\")",
        "  'charge'[1]              deny",
        "  'read_note'              allow",
        "  'send_*'[0]              allow when to == \"ops@example.com\"",
        "  'send_*'[1]              ask when attachments in [0, 1] -> capability mcp.shop.<tool>",
        "  'send_*' otherwise       ask (the default)",
        "  (any other tool)         ask",
    ]


# (the [tools] text after HEAD, the line the error names, what it says). HEAD is 5 lines.
BAD = [
    (
        'refund = [\n  { when = "amount <= 50", action = "allow" },\n'
        '  { when = "amount <=", action = "deny" },\n]\n',
        8,
        "tools.refund[1].when: not a condition",
    ),
    (
        'refund = [\n  { when = "amount <= [50]", action = "allow" },\n  "ask",\n]\n',
        7,
        "tools.refund[0].when: amount <= needs a number or a string",
    ),
    (
        'refund = [\n  "ask",\n  { when = "amount <= 50", action = "allow" },\n]\n',
        8,
        "tools.refund[1]: never applies: tools.refund[0] has no `when`",
    ),
    (
        "refund = [\n  { when = \"__import__('os').system('id')\", action = \"allow\" },\n]\n",
        7,
        'tools.refund[0].when: only glob(argument, "pattern") may be called',
    ),
    (
        'refund = [\n  { when = "amount in []", action = "allow" },\n]\n',
        7,
        "tools.refund[0].when: amount in needs a non-empty list",
    ),
    (
        'refund = [\n  { when = "not amount", action = "allow" },\n]\n',
        7,
        "tools.refund[0].when: not a comparison of an argument with a constant: not amount",
    ),
    (
        'refund = [\n  { when = "amount == limit", action = "allow" },\n]\n',
        7,
        "tools.refund[0].when: not a constant: limit",
    ),
    (
        'refund = [\n  { when = 50, action = "allow" },\n]\n',
        7,
        "tools.refund[0].when must be a condition written as text",
    ),
    (
        'refund = [\n  { when = "amount < 5", action = "permit" },\n]\n',
        7,
        "tools.refund[0]: action must be one of allow, deny, ask (got 'permit')",
    ),
    (
        'refund = [\n  { when = "amount < 5", action = "allow", capability = "x.y" },\n]\n',
        7,
        "tools.refund[0].capability: only an `ask` rule requests approval",
    ),
    (
        'refund = [\n  { when = "amount < 5", action = "allow", if = "x" },\n]\n',
        7,
        "tools.refund[0].if: unknown key",
    ),
    ('refund = [{ when = "a == 1", action = "allow" }, 7]\n', 6, "tools.refund[1]: expected"),
    ("refund = []\n", 6, "tools.refund: an empty list of rules decides nothing"),
    ('refund = { when = "amount <", action = "allow" }\n', 6, "tools.refund.when: not a"),
    (
        '\n[[tools.refund]]\nwhen = "amount <= 50"\naction = "allow"\n\n'
        '[[tools.refund]]\naction = "ask"\nwhen = "amount > \'5\' and currency glob 1"\n',
        13,
        "tools.refund[1].when: not a condition",
    ),
    (
        # A bracket inside a string or a comment is not an item.
        'refund = [  # [{\n  { when = "c in [\\"]{\\"]", action = "allow" },\n'
        '  { when = \'c == "["\', action = "alow" },\n]\n',
        8,
        "tools.refund[1]: action must be",
    ),
]


@pytest.mark.parametrize(("tools", "line", "says"), BAD)
def test_a_bad_rule_names_the_file_the_line_and_the_key(tools: str, line: int, says: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(HEAD + tools, source="shop.toml")
    assert caught.value.line == line, str(caught.value)
    assert str(caught.value).startswith(f"shop.toml:{line}: {says}"), str(caught.value)


def test_signoff_mcp_check_refuses_a_bad_when(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(POLICY.replace('"amount <= 50"', '"amount <= 50 and"'), "utf-8")
    done = subprocess.run(
        [prefork.python(), "-m", "signoff_client.mcp.cli", "check", str(path)],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 1, done
    assert f"{path}:7: tools.refund[0].when: not a condition" in done.stderr, done.stderr
