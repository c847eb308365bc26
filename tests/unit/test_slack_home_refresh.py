"""Which Slack Homes are due, and their publishing in the background (channels.
slack_home_refresh), with plain functions in place of Slack and the database: a burst of
changes for one person costs one publish; a change during a publish is shown by one more;
past the bound on changed requests, everyone's Home is due instead, so none is missed."""

from __future__ import annotations

import asyncio

import pytest

from bot.errors import RetryLater
from channels.slack import home_refresh as slack_home_refresh
from channels.slack.home_refresh import HomeRefresh


class Slack:
    """Publishes as a workspace would, recording whose Home and what version of the world
    (`state`) each one showed."""

    def __init__(self) -> None:
        self.state = 0
        self.published: list[tuple[str, int, str | None]] = []
        self.took = 0.0
        self.looked_up: list[list[str]] = []
        self.everyone_asked = 0

    async def publish(self, user: str, note: str | None) -> None:
        seen = self.state  # read before the (slow) call, as a view is rendered
        await asyncio.sleep(self.took)
        self.published.append((user, seen, note))

    async def concerned(self, approval_ids: list[str]) -> set[str]:
        self.looked_up.append(approval_ids)
        return {f"U{approval_id}" for approval_id in approval_ids}

    def everyone(self) -> set[str]:
        self.everyone_asked += 1
        return {"UALL"}


@pytest.fixture(autouse=True)
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slack_home_refresh, "_INTERVAL", 0.2)


async def test_a_burst_for_one_person_costs_one_publish() -> None:
    slack = Slack()
    due = HomeRefresh(slack.publish, slack.concerned, slack.everyone)
    for n in range(100):
        slack.state = n
        due.people(["U1"])
    await due.settled()
    assert slack.published == [("U1", 99, None)]


async def test_a_change_during_a_publish_is_shown_by_one_more() -> None:
    slack = Slack()
    slack.took = 0.1
    due = HomeRefresh(slack.publish, slack.concerned, slack.everyone)
    due.people(["U1"])
    await asyncio.sleep(slack_home_refresh._SETTLE + 0.05)  # the publish has begun
    for n in range(1, 20):
        slack.state = n
        due.people(["U1"])
    await due.settled()
    assert slack.published == [("U1", 0, None), ("U1", 19, None)]


async def test_changed_requests_are_looked_up_together() -> None:
    slack = Slack()
    due = HomeRefresh(slack.publish, slack.concerned, slack.everyone)
    for approval_id in ("a", "b", "a", "c"):
        due.approval(approval_id)
    await due.settled()
    assert slack.looked_up == [["a", "b", "c"]]
    assert sorted(user for user, _, _ in slack.published) == ["Ua", "Ub", "Uc"]


async def test_past_the_bound_everyone_is_due_and_nothing_is_missed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(slack_home_refresh, "_APPROVALS_MAX", 3)
    slack = Slack()
    due = HomeRefresh(slack.publish, slack.concerned, slack.everyone)
    for n in range(10):
        due.approval(f"r{n}")
    assert len(due._approvals) <= 3
    await due.settled()
    assert slack.looked_up == []
    assert slack.everyone_asked == 1
    assert slack.published == [("UALL", 0, None)]


async def test_a_failed_look_up_is_tried_again() -> None:
    slack = Slack()
    failures = [RuntimeError("database gone")]

    async def concerned(approval_ids: list[str]) -> set[str]:
        if failures:
            raise failures.pop()
        return await slack.concerned(approval_ids)

    due = HomeRefresh(slack.publish, concerned, slack.everyone)
    due.approval("a")
    async with asyncio.timeout(5):
        await due.settled()
    assert [user for user, _, _ in slack.published] == ["Ua"]


async def test_a_line_for_the_top_is_published_once_and_kept_through_a_failure() -> None:
    slack = Slack()
    fail = [True]

    async def publish(user: str, note: str | None) -> None:
        if fail:
            fail.pop()
            raise RetryLater("Slack asked to wait", delay=0.1)
        await slack.publish(user, note)

    due = HomeRefresh(publish, slack.concerned, slack.everyone)
    due.people(["U1"], note="Approved.")
    async with asyncio.timeout(5):
        await due.settled()
    due.people(["U1"])
    await due.settled()
    assert slack.published == [("U1", 0, "Approved."), ("U1", 0, None)]
