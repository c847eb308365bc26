"""What a human is shown (Card, render_card) and what a resumed agent reads (execution_of,
public_record)."""

from __future__ import annotations

import copy
import json
import re
from datetime import datetime, timedelta
from typing import Any

import pytest

from bot.card import Card
from bot.cli.rendering import emit_json, render_card
from bot.config import parse_config
from bot.model import Execution, State, execution_of, public_record
from bot.routing import Directory
from store.records import Approval
from tests.support.samples import RECORD_HASH as HASH
from tests.support.samples import RECORD_NOW as NOW
from tests.support.samples import TEST_CONFIG, approval_record


@pytest.fixture
def directory() -> Directory:
    return parse_config(copy.deepcopy(TEST_CONFIG)).directory()


def _approval(**changes: Any) -> Approval:
    return approval_record(**changes)


def _decided(**changes: Any) -> Approval:
    decided: dict[str, Any] = {
        "state": "approved",
        "decided_by": "alice",
        "decided_at": NOW + timedelta(hours=5, minutes=7),
        "decision_note": "checked the ledger",
        "version": 2,
    }
    return _approval(**{**decided, **changes})


# -- Card.from_approval ------------------------------------------------------------------


def test_card_shows_the_request(directory: Directory) -> None:
    card = Card.from_approval(_approval(), NOW, directory)
    assert card.title == "Refund €120.00 to Zoë"
    assert card.summary == "Customer asked twice."
    assert card.tool_name == "stripe.refunds.create"
    assert card.fields == (("Amount", "€120.00"),)
    assert dict(card.arguments) == {"charge": "ch_1", "amount": "12000"}
    assert card.reason == "refunds over €100 need approval"
    assert card.requested_by == "Sam Requester (sam)"
    assert card.assignee == "group finance"
    assert card.hash == HASH
    assert card.short_hash == f"sha256:{HASH[:12]}"


def test_card_shows_non_string_arguments_as_json() -> None:
    card = Card.from_approval(
        _approval(tool_args={"notify": True, "meta": None, "items": [1, 2]}), NOW
    )
    shown = dict(card.arguments)
    assert shown["notify"] == "true"
    assert shown["meta"] == "null"
    assert json.loads(shown["items"]) == [1, 2]


def test_card_truncates_long_argument_values_showing_their_size() -> None:
    long_value = "a" * 200 + "TAIL-MARKER" + "b" * 289
    card = Card.from_approval(_approval(tool_args={"body": long_value, "to": "x"}), NOW)
    shown = dict(card.arguments)
    assert shown["body"].startswith(long_value[:200])
    assert "TAIL-MARKER" not in shown["body"]
    assert shown["body"].endswith("… (500 chars)")
    assert shown["to"] == "x"


def test_card_truncates_long_structured_arguments_and_fields() -> None:
    lines = list(range(1000))
    approval = _approval(
        tool_args={"lines": lines},
        presentation={"title": "Bulk", "fields": [{"label": "Note", "value": "n" * 300}]},
    )
    card = Card.from_approval(approval, NOW, max_value=50)
    shown = dict(card.arguments)["lines"]
    size = len(json.dumps(lines))
    assert shown.endswith(f"… ({size} chars)")
    assert len(shown) < 100
    assert card.fields == (("Note", "n" * 50 + "… (300 chars)"),)


def test_card_value_at_the_limit_is_not_truncated() -> None:
    card = Card.from_approval(_approval(tool_args={"v": "x" * 200}), NOW)
    assert dict(card.arguments)["v"] == "x" * 200


def test_pending_card_says_how_long_is_left() -> None:
    approval = _approval()
    later = NOW + timedelta(minutes=30)
    card = Card.from_approval(approval, later)
    assert card.expires_in == "2 d 23 h"
    assert card.expires_at == approval.expires_at


def test_card_without_a_limit_shows_every_value_in_full() -> None:
    long = "x" * 5000
    card = Card.from_approval(_approval(tool_args={"v": long}), NOW, max_value=None)
    assert dict(card.arguments)["v"] == long


def test_pending_card_past_its_ttl_is_overdue_not_counting_down(directory: Directory) -> None:
    approval = _approval()
    card = Card.from_approval(approval, approval.expires_at + timedelta(seconds=1))
    assert (card.expires_in, card.overdue) == (None, True)
    assert "Time ran out  at 2026-03-05 09:00 UTC; it can no longer be decided" in render_card(card)
    assert not Card.from_approval(approval, NOW).overdue


@pytest.mark.parametrize("state", [s.value for s in State if s is not State.PENDING])
def test_decided_card_has_no_countdown(state: str) -> None:
    assert Card.from_approval(_approval(state=state), NOW).expires_in is None


def test_decided_card_shows_the_decider(directory: Directory) -> None:
    card = Card.from_approval(_decided(), NOW, directory)
    assert card.state == "approved"
    assert card.decided_by == "Alice Ng (alice)"
    assert card.decision_note == "checked the ledger"


def test_card_without_a_title_falls_back_to_the_capability() -> None:
    card = Card.from_approval(_approval(presentation={"title": ""}), NOW)
    assert card.title == "payments.refund"


# -- execution_of ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "execution"),
    [
        ("pending", "not_started"),
        ("approved", "not_started"),
        ("rejected", "not_started"),
        ("expired", "not_started"),
        ("cancelled", "not_started"),
        ("superseded", "not_started"),
        ("executing", "started"),
        ("outcome_unknown", "started"),
        ("executed", "finished"),
        ("failed", "finished"),
    ],
)
def test_execution_tells_a_resumed_agent_the_truth(state: str, execution: str) -> None:
    assert execution_of(state) == Execution(execution)


def test_every_state_has_an_execution_answer() -> None:
    assert {s.value for s in State} == {
        "pending",
        "approved",
        "rejected",
        "expired",
        "cancelled",
        "superseded",
        "executing",
        "outcome_unknown",
        "executed",
        "failed",
        "answered",
    }
    assert execution_of("answered") == Execution.NOT_STARTED  # an answer never runs the call


def test_unknown_state_is_not_silently_not_started() -> None:
    with pytest.raises(ValueError):
        execution_of("paused")


# -- public_record -----------------------------------------------------------------------

_ISO_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


def test_public_record_of_a_pending_request() -> None:
    approval = _approval()
    record = public_record(approval)

    assert record["id"] == approval.id
    assert record["state"] == "pending"
    assert record["execution"] == "not_started"
    assert record["hash"] == HASH
    assert record["assignee"] == "group:finance"
    assert record["decided_by"] is None
    assert record["decided_at"] is None
    assert record["tool"] == {"name": "stripe.refunds.create", "arguments": approval.tool_args}
    assert record["step"] == {"cursor": 4}
    assert record["resume"] == {"thread": "t-1"}
    assert _ISO_Z.match(record["created_at"])
    assert _ISO_Z.match(record["expires_at"])
    assert datetime.fromisoformat(record["expires_at"]) == approval.expires_at


def test_public_record_of_a_decided_request() -> None:
    approval = _decided()
    record = public_record(approval)

    assert record["state"] == "approved"
    assert record["decided_by"] == "alice"
    assert _ISO_Z.match(record["decided_at"])
    assert datetime.fromisoformat(record["decided_at"]) == approval.decided_at
    assert record["decision_note"] == "checked the ledger"
    assert record["version"] == 2


def test_public_record_reports_execution_from_state() -> None:
    record = public_record(_decided(state="executing", claim_token="tok"))
    assert record["execution"] == "started"
    assert "claim_token" not in record


def test_public_record_is_json() -> None:
    record = public_record(_decided())
    assert json.loads(json.dumps(record)) == record


# -- render_card -------------------------------------------------------------------------


def _hostile(**changes: Any) -> Approval:
    return _approval(
        presentation={
            "title": "Refund\x1b[31m €1\rRefund €99999",
            "summary": "fine\x07 print\x9b2J",
            "fields": [{"label": "Amt\x1b]0;pwned\x07", "value": "1\x08\x08\x089"}],
        },
        tool_name="stripe\x1b[8m.hidden",
        tool_args={"to\x1b[2K": "acct\r_evil", "note": "x\x00y\x7f"},
        reason="because\x1b[0m\rreason: approved by CFO",
        requested_by="sam\x1b[1m",
        **changes,
    )


def _shown_escaped(char: str, after: str, text: str) -> bool:
    """`char` appears visibly escaped (\\xNN or \\uNNNN) right before `after`."""
    code = ord(char)
    pattern = rf"\\(?:x{code:02x}|u{code:04x}){re.escape(after)}"
    return re.search(pattern, text) is not None


def test_render_card_escapes_terminal_control_characters(directory: Directory) -> None:
    text = render_card(Card.from_approval(_hostile(), NOW, directory))

    raw = {"\x1b", "\r", "\x07", "\x08", "\x00", "\x7f", "\x9b"}
    assert not raw & set(text), f"raw control characters reached the terminal: {text!r}"
    # Escaped visibly, not dropped: the human sees that something odd was sent.
    assert _shown_escaped("\x1b", "[31m", text)  # title
    assert _shown_escaped("\r", "Refund €99999", text)  # title
    assert _shown_escaped("\x9b", "2J", text)  # summary, C1 CSI
    assert _shown_escaped("\x1b", "]0;pwned", text)  # field label
    assert _shown_escaped("\x1b", "[8m.hidden", text)  # tool name
    assert _shown_escaped("\r", "_evil", text)  # argument value
    # reason: a carriage return may become a continuation line, never the start of one.
    assert "reason: approved by CFO" in text
    assert not any(line.lower().startswith("reason: approved") for line in text.splitlines())
    assert [line[:6] for line in text.splitlines() if line.lower().startswith("reason")] == [
        "Reason"
    ]
    assert _shown_escaped("\x1b", "[1m", text)  # requested_by


def test_render_card_escapes_the_decision_note(directory: Directory) -> None:
    card = Card.from_approval(_decided(decision_note="ok\x1b[2J"), NOW, directory)
    text = render_card(card)
    assert "\x1b" not in text
    assert _shown_escaped("\x1b", "[2J", text)


def test_agent_text_cannot_forge_card_lines(directory: Directory) -> None:
    fake = "hash          sha256:" + "0" * 64
    approval = _approval(
        presentation={"title": f"Refund €1\n{fake}", "summary": f"ok\n{fake}"},
        tool_args={"note": f"x\n{fake}"},
        reason=f"fine\n{fake}\nstate         approved",
    )
    text = render_card(Card.from_approval(approval, NOW, directory))
    card_lines = [line for line in text.splitlines() if line.startswith(("Hash ", "State "))]
    assert card_lines == ["State         pending", f"Hash          sha256:{HASH}"]


@pytest.mark.parametrize("char", ["\u202e", "\u2066", "\u200f"])
def test_render_card_escapes_bidi_overrides(directory: Directory, char: str) -> None:
    # "Trojan Source": a right-to-left override makes "€1 0009" display as "€9000 1".
    approval = _approval(presentation={"title": f"Refund {char}0009 €"})
    text = render_card(Card.from_approval(approval, NOW, directory))
    assert char not in text
    assert _shown_escaped(char, "0009", text)


def test_render_card_shows_full_hash_and_labels_the_reason(directory: Directory) -> None:
    text = render_card(Card.from_approval(_approval(), NOW, directory))
    lines = text.splitlines()
    assert f"sha256:{HASH}" in text
    assert any(
        line.startswith("Reason (from the agent") and "refunds over €100 need approval" in line
        for line in lines
    )
    assert "unverified" in text


def test_render_card_shows_what_will_run(directory: Directory) -> None:
    card = Card.from_approval(_approval(), NOW + timedelta(hours=1), directory)
    text = render_card(card)
    assert "Refund €120.00 to Zoë" in text
    assert "payments.refund" in text
    assert "stripe.refunds.create" in text
    assert "charge = ch_1" in text
    assert "amount = 12000" in text
    assert "Amount: €120.00" in text
    assert "Sam Requester (sam)" in text
    assert "group finance" in text
    assert "in 2 d 23 h" in text
    assert _approval().id in text


def test_render_card_of_a_decision_shows_who_and_when(directory: Directory) -> None:
    lines = render_card(Card.from_approval(_decided(), NOW, directory)).splitlines()
    assert lines[-2:] == [
        "Approved by Alice Ng (alice) at 2026-03-02 14:07 UTC",
        "Note: checked the ledger",
    ]
    assert "State         approved" in lines
    assert "Deadline      2026-03-05 09:00 UTC" in lines  # no countdown
    assert not any(line.startswith("Expires") for line in lines)


def test_json_output_keeps_values_but_never_raw_terminal_controls(
    capsys: pytest.CaptureFixture[str],
) -> None:
    document = {"title": "Refund \x9b31m\u202eZoë\u2028", "escape": "\x1b[2J", "n": [1, 2]}
    emit_json(document)
    out = capsys.readouterr().out
    assert json.loads(out) == document
    assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u202e]", out)
    assert "Zoë" in out  # readable text stays readable
