"""The policy's choice of how an `ask` reaches a human (issue 50): `ask = "elicit"` (the
default) offers a host that can open a URL the approval page and waits `elicit_wait` for the
decision; `ask = "route"` leaves the request to the route's cards. A rule's own `ask` wins
over the gateway's; a wrong value is refused naming the file, the line and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from signoff_client.mcp import PolicyError, parse_policy
from signoff_client.mcp.cli import main

POLICY = """\
[gateway]
server = "mail"
{gateway}

[tools]
send_email = "ask"
archive = {{ action = "ask", ask = "route" }}
refund = [
  {{ when = "amount <= 50", action = "ask", ask = "elicit" }},
  {{ action = "ask", ask = "route" }},
]
"""


def test_elicit_is_the_default_and_a_rules_ask_wins() -> None:
    policy = parse_policy(POLICY.format(gateway=""))
    assert (policy.ask, policy.web_url, policy.elicit_wait) == ("elicit", None, 600.0)
    decided = {
        tool: policy.decide(tool, arguments).ask
        for tool, arguments in [
            ("send_email", {}),
            ("archive", {}),
            ("refund", {"amount": 10}),
            ("unnamed", {}),
        ]
    }
    assert decided == {"send_email": "elicit", "archive": "route", "refund": "elicit",
                       "unnamed": "elicit"}  # fmt: skip
    assert policy.decide("refund", {"amount": 99}).ask == "route"
    assert "  ask:" not in policy.summary()  # the defaults go unsaid


def test_the_gateways_settings() -> None:
    gateway = 'ask = "route"\nweb_url = "https://signoff.example.com"\nelicit_wait = "1h30m"'
    policy = parse_policy(POLICY.format(gateway=gateway))
    assert (policy.ask, policy.web_url, policy.elicit_wait) == (
        "route",
        "https://signoff.example.com",
        5400.0,
    )
    assert policy.decide("send_email").ask == "route"
    assert policy.decide("refund", {"amount": 1}).ask == "elicit"
    summary = policy.summary().splitlines()
    assert "  ask: route (the route's cards only)" in summary
    assert "  'archive'                ask -> capability mcp.mail.archive, ask route" in summary


@pytest.mark.parametrize(
    ("gateway", "tools", "line", "words"),
    [
        ('ask = "chat"', "", 3, 'gateway.ask must be "elicit"'),
        ("ask = true", "", 3, 'gateway.ask must be "elicit"'),
        ('web_url = "signoff.example.com"', "", 3, "gateway.web_url must be an http(s) URL"),
        ('elicit_wait = "10"', "", 3, "gateway.elicit_wait must be a duration"),
        ("elicit_wait = 600", "", 3, "gateway.elicit_wait must be a duration"),
        ('elicit_wait = "0s"', "", 3, "gateway.elicit_wait must be more than 0"),
        ("", 'x = { action = "ask", ask = "popup" }', 12, 'tools.x.ask must be "elicit"'),
        ("", 'x = { action = "allow", ask = "route" }', 12, "tools.x.ask: only an `ask` rule"),
        ("", 'y = [\n  "allow",\n]\nz = [\n  { action = "ask", ask = 1 },\n]', 16,
         'tools.z[0].ask must be "elicit"'),
    ],
)  # fmt: skip
def test_a_wrong_ask_names_its_line(gateway: str, tools: str, line: int, words: str) -> None:
    text = POLICY.format(gateway=gateway) + tools + "\n"
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, source="policy.toml")
    assert caught.value.line == line, (str(caught.value), text.splitlines()[line - 1 : line])
    assert str(caught.value).startswith(f"policy.toml:{line}: {words}"), str(caught.value)


@pytest.mark.parametrize(
    ("flag", "words"),
    [
        (["--elicit-wait", "0"], "--elicit-wait must be a number of seconds above 0"),
        (["--elicit-wait", "nan"], "--elicit-wait must be a number of seconds above 0"),
        (["--web-url", "signoff.example.com"], "--web-url must be an http(s) URL"),
    ],
)
def test_serve_refuses_a_wrong_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: list[str], words: str
) -> None:
    (tmp_path / "policy.toml").write_text(POLICY.format(gateway=""), "utf-8")
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--policy", str(tmp_path / "policy.toml"), *flag, "--", "true"])
    assert exited.value.code == 2
    assert words in capsys.readouterr().err
