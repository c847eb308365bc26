"""Failures not worth retrying, and rate limits that are not failures: real slack-sdk code
against the fake Slack Web API, the outbox runner on a FakeClock, on SQLite and PostgreSQL.

Proves: a Slack answer no retry can change (`channel_not_found`, `not_in_channel`,
`account_inactive`, `invalid_auth`) makes the card job dead at its first attempt, with Slack's
code in its last error (what `signoff outbox list --dead` prints, checked as a subprocess) and
in `signoff_outbox_dead_total{kind,reason}`; an error Slack may answer differently next time
is still retried. A 429 with Retry-After waits as long as asked without using up an attempt,
however many times it comes, while the job is younger than `rate_limited_for`; after that each
429 counts, so a destination that answers 429 forever still ends, as dead with reason
`max_attempts`.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.clock import FakeClock
from bot.config import parse_config
from bot.metrics import Metrics
from bot.outbox.runner import OutboxRunner, OutboxSettings
from store.records import OutboxJob
from store.repository import Store
from tests.fakes.slack import FakeSlack
from tests.fakes.slack_methods import _SlackError
from tests.support.chat_server import API_KEY, ChatServer, serve
from tests.support.cli import Cli, base_env, config_with, to_toml
from tests.support.samples import TEST_CONFIG
from tests.support.slack_rig import CHANNEL, SECRET

SETTINGS = OutboxSettings(
    max_attempts=3,
    backoff_base=timedelta(seconds=10),
    backoff_max=timedelta(minutes=5),
    rate_limited_for=timedelta(minutes=10),
)


class RefusingSlack(FakeSlack):
    """The fake Slack, answering chosen methods with a chosen Web API error, as Slack does:
    HTTP 200 and `{"ok": false, "error": CODE}` (what slack-sdk turns into SlackApiError)."""

    def __init__(self) -> None:
        super().__init__()
        self.refusals: dict[str, str] = {}

    def _dispatch(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        if method in self.refusals:
            raise _SlackError(self.refusals[method])
        return super()._dispatch(method, args)


@dataclass
class Rig(ChatServer):
    slack: RefusingSlack
    metrics: Metrics

    async def card_job(self, approval_id: str) -> OutboxJob:
        async with self.store.read() as tx:
            [job] = [
                j for j in await tx.outbox_jobs(approval_id=approval_id) if j.kind != "webhook"
            ]
        return job


@pytest.fixture
async def rig(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Rig]:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-test")
    monkeypatch.setenv("SLACK_SIGNING_SECRET", SECRET)
    monkeypatch.setenv("SLACK_TEST_API_KEY", API_KEY)
    cleanup: list[Callable[[], Awaitable[None]]] = []
    async with RefusingSlack() as slack:
        data = copy.deepcopy(TEST_CONFIG)
        data["tenants"][0]["api_key_env"] = "SLACK_TEST_API_KEY"
        data["slack"] = {"api_base_url": slack.base_url}
        data["routes"][0]["notify"] = [f"slack:{CHANNEL}"]
        metrics = Metrics()
        server = await serve(
            Rig, parse_config(data), store, clock, API_KEY, cleanup, slack=slack, metrics=metrics
        )
        # The same handlers, run with the metrics and the test's settings.
        server.runner = OutboxRunner(
            store, server.runner.handlers, clock, SETTINGS, metrics=metrics, rand=lambda: 1.0
        )
        yield server
        for close in reversed(cleanup):
            await close()


@pytest.mark.parametrize(
    "code", ["channel_not_found", "not_in_channel", "account_inactive", "invalid_auth"]
)
async def test_a_permanent_slack_error_is_dead_at_once_with_its_reason(
    rig: Rig, code: str, db_url: str, tmp_path: Path
) -> None:
    rig.slack.refusals["chat.postMessage"] = code
    record = await rig.create()
    assert await rig.runner.run_once() == 1
    job = await rig.card_job(record["id"])
    assert (job.state, job.attempts) == ("dead", 1)
    assert job.last_error == f"Undeliverable: Slack answered {code}"
    assert await rig.runner.run_once() == 0  # nothing left to try
    assert len(rig.slack.calls_to("chat.postMessage")) == 1
    shown = rig.metrics.render().decode()
    assert f'signoff_outbox_dead_total{{kind="post_card",reason="{code}"}} 1.0' in shown
    assert 'signoff_outbox_jobs_total{kind="post_card",result="dead"} 1.0' in shown

    # The operator sees it, with Slack's reason, in `signoff outbox list --dead`.
    config = tmp_path / "signoff.toml"
    config.write_text(to_toml(config_with(db_url)), "utf-8")
    listed = Cli(tmp_path, base_env(SIGNOFF_CONFIG=str(config))).run("outbox", "list", "--dead")
    assert listed.returncode == 0, str(listed)
    assert f"{job.id}  post_card    dead" in listed.stdout
    assert f"Undeliverable: Slack answered {code}" in listed.stdout


async def test_an_error_slack_may_answer_differently_next_time_is_retried(rig: Rig) -> None:
    rig.slack.refusals["chat.postMessage"] = "internal_error"
    record = await rig.create()
    await rig.runner.run_once()
    job = await rig.card_job(record["id"])
    assert (job.state, job.attempts) == ("queued", 1)
    assert job.last_error == "DeliveryFailed: Slack answered internal_error"
    del rig.slack.refusals["chat.postMessage"]
    rig.clock.advance(job.run_after - rig.clock.now())
    await rig.runner.run_once()
    assert (await rig.card_job(record["id"])).state == "done"


async def test_a_rate_limit_waits_as_asked_without_using_up_attempts(rig: Rig) -> None:
    waits = SETTINGS.max_attempts + 2  # more 429s than the job has attempts
    rig.slack.rate_limit_next("chat.postMessage", retry_after=30, times=waits)
    record = await rig.create()
    for _ in range(waits):
        assert await rig.runner.run_once() == 1
        job = await rig.card_job(record["id"])
        assert (job.state, job.attempts) == ("queued", 0)
        assert job.run_after - rig.clock.now() == timedelta(seconds=30)  # Retry-After
        assert await rig.runner.run_once() == 0  # not before Slack said
        rig.clock.advance(seconds=30)
    assert await rig.runner.run_once() == 1
    job = await rig.card_job(record["id"])
    assert (job.state, job.attempts) == ("done", 1)
    assert rig.slack.calls_to("chat.postMessage", ok=True)
    shown = rig.metrics.render().decode()
    assert f'signoff_outbox_jobs_total{{kind="post_card",result="rate_limited"}} {waits}.0' in shown


async def test_a_destination_answering_429_forever_still_ends(rig: Rig) -> None:
    rig.slack.rate_limit_next("chat.postMessage", retry_after=60, times=1000)
    record = await rig.create()
    free = 0
    while (
        rig.clock.now() - (await rig.card_job(record["id"])).created_at < SETTINGS.rate_limited_for
    ):
        assert await rig.runner.run_once() == 1
        assert (await rig.card_job(record["id"])).attempts == 0
        free += 1
        rig.clock.advance(seconds=60)
    assert free == 10  # ten minutes of one-minute waits, none of them an attempt
    for attempt in range(1, SETTINGS.max_attempts + 1):
        assert await rig.runner.run_once() == 1
        job = await rig.card_job(record["id"])
        assert job.attempts == attempt
        rig.clock.advance(SETTINGS.backoff_max)
    assert job.state == "dead"
    assert job.last_error == "RetryLater: Slack rate limit"
    shown = rig.metrics.render().decode()
    assert 'signoff_outbox_dead_total{kind="post_card",reason="max_attempts"} 1.0' in shown
