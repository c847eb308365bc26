"""Routing and eligibility (docs/routing.md)."""

from __future__ import annotations

import copy
import re
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.config import parse_config
from bot.errors import (
    InvalidRequest,
    NoRoute,
    NotAnApprover,
    SelfApproval,
    UnknownPrincipal,
    UnknownTenant,
)
from bot.routing import Directory
from store.records import Approval
from tests.support.samples import TEST_CONFIG, approval_record

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@pytest.fixture
def directory() -> Directory:
    return parse_config(copy.deepcopy(TEST_CONFIG)).directory()


def _directory(routes: list[dict[str, Any]]) -> Directory:
    data = copy.deepcopy(TEST_CONFIG)
    data["tenants"].append({"name": "acme-eu"})
    data["routes"] = routes
    return parse_config(data).directory()


def _approval(**changes: Any) -> Approval:
    return approval_record(**changes)


# -- route_for ---------------------------------------------------------------------------


def test_route_for_matches_tenant_and_capability_glob(directory: Directory) -> None:
    route = directory.route_for("acme", "payments.refund")
    assert route.approvers == ("group:finance",)
    assert directory.route_for("acme", "contracts.cancel").approvers == ("alice", "sam")
    assert directory.route_for("globex", "anything.at.all").approvers == ("dave",)


def test_route_for_first_match_wins() -> None:
    narrow = {"tenant": "acme", "capability": "payments.refund", "approvers": ["alice"]}
    broad = {"tenant": "*", "capability": "payments.*", "approvers": ["bob"]}

    narrow_first = _directory([narrow, broad])
    assert narrow_first.route_for("acme", "payments.refund").approvers == ("alice",)
    assert narrow_first.route_for("acme", "payments.charge").approvers == ("bob",)

    broad_first = _directory([broad, narrow])
    assert broad_first.route_for("acme", "payments.refund").approvers == ("bob",)


def test_route_tenant_is_a_glob() -> None:
    directory = _directory(
        [
            {"tenant": "acme-*", "capability": "payments.*", "approvers": ["alice"]},
            {"tenant": "*", "capability": "payments.*", "approvers": ["bob"]},
        ]
    )
    assert directory.route_for("acme-eu", "payments.refund").approvers == ("alice",)
    assert directory.route_for("acme", "payments.refund").approvers == ("bob",)
    assert directory.route_for("globex", "payments.refund").approvers == ("bob",)


def test_route_matching_is_case_sensitive(directory: Directory) -> None:
    with pytest.raises(NoRoute):
        directory.route_for("acme", "Payments.refund")


def test_no_route_names_tenant_and_capability(directory: Directory) -> None:
    with pytest.raises(NoRoute) as info:
        directory.route_for("acme", "hr.fire_everyone")
    assert "'acme'" in info.value.message
    assert "'hr.fire_everyone'" in info.value.message
    assert isinstance(info.value, InvalidRequest)  # refused as a bad request, not a crash


def test_route_carries_its_settings(directory: Directory) -> None:
    route = directory.route_for("acme", "payments.refund")
    assert route.approval_ttl == timedelta(hours=72)
    assert route.grant_ttl == timedelta(hours=24)
    assert [(e.after, e.to) for e in route.escalation] == [(timedelta(hours=24), "carol")]
    assert directory.route_for("acme", "quorum.vote").required_approvals == 2
    assert directory.route_for("acme", "contracts.sign").allow_self_approval is True


# -- lookups -----------------------------------------------------------------------------


def test_tenant_lookup(directory: Directory) -> None:
    assert directory.tenant("acme").webhook_url == "http://127.0.0.1:9/hooks"
    with pytest.raises(UnknownTenant) as info:
        directory.tenant("initech")
    assert "initech" in info.value.message


def test_principal_lookup(directory: Directory) -> None:
    alice = directory.principal("alice")
    assert (alice.name, alice.account("slack"), alice.account("telegram")) == (
        "Alice Ng",
        "U0ALICE",
        111,
    )
    assert directory.principal_for("slack", "U0ALICE") == alice
    assert directory.principal_for("telegram", 111) == alice
    assert directory.principal_for("telegram", "U0ALICE") is None
    with pytest.raises(UnknownPrincipal) as info:
        directory.principal("mallory")
    assert "mallory" in info.value.message


def test_expand_resolves_groups_to_distinct_people(directory: Directory) -> None:
    assert directory.expand(["group:finance", "alice", "carol"]) == {
        "alice",
        "bob",
        "sam",
        "carol",
    }


def test_describe_forms(directory: Directory) -> None:
    assert directory.describe("group:finance") == "group finance"
    assert directory.describe("alice") == "Alice Ng (alice)"
    assert directory.describe("someone-else") == "someone-else"


# -- check_eligible ----------------------------------------------------------------------


@pytest.mark.parametrize("member", ["alice", "bob"])
def test_member_of_assignee_group_may_decide(directory: Directory, member: str) -> None:
    approval = _approval()
    directory.check_eligible(approval, member, approving=True)
    directory.check_eligible(approval, member, approving=False)


def test_assignee_principal_may_decide(directory: Directory) -> None:
    approval = _approval(assignee="carol")  # escalated to carol
    directory.check_eligible(approval, "carol", approving=True)


def test_original_approver_keeps_authority_after_reassignment(directory: Directory) -> None:
    approval = _approval(assignee="carol", approvers=["group:finance"])
    directory.check_eligible(approval, "alice", approving=True)
    directory.check_eligible(approval, "bob", approving=False)


def test_non_member_is_refused_naming_the_assignee(directory: Directory) -> None:
    with pytest.raises(NotAnApprover) as info:
        directory.check_eligible(_approval(), "dave", approving=True)
    assert not isinstance(info.value, SelfApproval)
    assert "assigned to group finance" in info.value.message


def test_non_member_is_refused_for_reject_too(directory: Directory) -> None:
    with pytest.raises(NotAnApprover):
        directory.check_eligible(_approval(), "dave", approving=False)


def test_refusal_names_a_reassigned_principal(directory: Directory) -> None:
    approval = _approval(assignee="carol")
    with pytest.raises(NotAnApprover) as info:
        directory.check_eligible(approval, "dave", approving=True)
    assert "assigned to Carol Diaz (carol)" in info.value.message


def test_unknown_principal_is_not_an_approver(directory: Directory) -> None:
    with pytest.raises(NotAnApprover):
        directory.check_eligible(_approval(), "mallory", approving=True)


def test_requester_may_not_approve_own_request(directory: Directory) -> None:
    # sam is in finance, so entitled in general, but requested this one.
    with pytest.raises(SelfApproval) as info:
        directory.check_eligible(_approval(requested_by="sam"), "sam", approving=True)
    assert "sam" in info.value.message
    assert "self-approval" in info.value.message


def test_requester_may_approve_when_route_allowed_it(directory: Directory) -> None:
    approval = _approval(
        capability="contracts.sign",
        assignee="alice",
        approvers=["alice", "sam"],
        requested_by="sam",
        allow_self_approval=True,
    )
    directory.check_eligible(approval, "sam", approving=True)


def test_requester_may_reject_own_request(directory: Directory) -> None:
    directory.check_eligible(_approval(requested_by="sam"), "sam", approving=False)


def test_requester_who_is_not_entitled_may_not_reject(directory: Directory) -> None:
    with pytest.raises(NotAnApprover) as info:
        directory.check_eligible(_approval(requested_by="dave"), "dave", approving=False)
    assert not isinstance(info.value, SelfApproval)


def test_self_approval_flag_is_read_from_the_row_not_the_current_config(
    directory: Directory,
) -> None:
    # The payments route forbids self-approval today, but this row was created when allowed.
    approval = _approval(requested_by="sam", allow_self_approval=True)
    directory.check_eligible(approval, "sam", approving=True)


def test_the_docs_routing_example_is_a_valid_config() -> None:
    """The worked example in docs/routing.md parses and routes as it says."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "routing.md").read_text("utf-8")
    section = doc.split("## A worked example", 1)[1]
    [example] = re.findall(r"```toml\n(.*?)```", section.split("\n## ", 1)[0], re.S)
    directory = parse_config(tomllib.loads(example)).directory()
    refund = directory.route_for("acme", "payments.refund")
    assert refund.approvers == ("alice",)
    assert [(e.to, e.after.total_seconds()) for e in refund.escalation] == [
        ("carol", 86400),
        ("group:treasury", 86400),
    ]
    transfer = directory.route_for("acme", "treasury.transfer")
    assert (transfer.required_approvals, transfer.allow_self_approval) == (2, False)
