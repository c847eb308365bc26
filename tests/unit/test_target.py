"""Notify targets: every form the config accepts is split once into surface and place, and
written back exactly as configured (it is stored in outbox jobs and shown in logs)."""

from __future__ import annotations

import pytest

from bot.target import Target


@pytest.mark.parametrize(
    ("text", "surface", "where", "principal", "every_approver"),
    [
        ("slack:C0FINANCE", "slack", "C0FINANCE", None, False),
        ("slack:dm", "slack", "dm", None, True),
        ("slack:@alice", "slack", "@alice", "alice", False),
        ("telegram:-1001234567890", "telegram", "-1001234567890", None, False),
        ("telegram:dm", "telegram", "dm", None, True),
        ("telegram:@bob", "telegram", "@bob", "bob", False),
        ("web", "web", "", None, False),
    ],
)
def test_a_target_is_split_once_and_written_back_as_configured(
    text: str, surface: str, where: str, principal: str | None, every_approver: bool
) -> None:
    target = Target.parse(text)
    assert (target.surface, target.where) == (surface, where)
    assert target.principal == principal
    assert target.every_approver is every_approver
    assert str(target) == text
    assert Target.parse(str(target)) == target


def test_a_personal_target_names_one_principal_on_one_surface() -> None:
    target = Target.personal("telegram", "carol")
    assert str(target) == "telegram:@carol"
    assert target.principal == "carol" and not target.every_approver
