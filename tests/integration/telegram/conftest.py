"""The Telegram tests' rig (tests/support/telegram_rig.py): `start` starts signoff servers
wired to one fake Bot API (`await start(store, notify, **options)`, see
telegram_rig.starting), `rig` is one of them on the test's store, its cards to the group. A
module whose tests need another config or a TelegramRig with helpers of its own overrides
`rig` with `start(store, kind=..., configure=...)`."""

from __future__ import annotations

import pytest

from store.repository import Store
from tests.support.telegram_rig import Start, TelegramRig


@pytest.fixture
def start(start_telegram: Start) -> Start:
    return start_telegram


@pytest.fixture
async def rig(start: Start, store: Store) -> TelegramRig:
    return await start(store)
