"""Fixtures of the fake Telegram's own tests (tests/fakes/test_fake_telegram_*.py): a fake
whose long polls end after 0.2 s, and the real python-telegram-bot `Bot` talking to it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from telegram import Bot

from tests.fakes.telegram import FakeTelegram


@pytest.fixture
async def tg() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram(long_poll_cap=0.2) as fake:
        yield fake


@pytest.fixture
async def bot(tg: FakeTelegram) -> AsyncIterator[Bot]:
    async with Bot(tg.token, base_url=tg.base_url) as real:
        yield real
