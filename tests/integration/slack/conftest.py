"""The Slack tests' rig (tests/support/slack_rig.py): `start` starts signoff servers wired to
one fake Slack (`await start(store, **options)`, see slack_rig.starting), `rig` is one of them
on the test's store. A module whose tests need another config or a SlackRig with helpers of
its own overrides `rig` with `start(store, kind=..., configure=...)`."""

from __future__ import annotations

import pytest

from store.repository import Store
from tests.support.slack_rig import SlackRig, Start


@pytest.fixture
def start(start_slack: Start) -> Start:
    return start_slack


@pytest.fixture
async def rig(start: Start, store: Store) -> SlackRig:
    return await start(store)
