"""The person and keyboard the fake Telegram's own tests (tests/fakes/test_fake_telegram_*.py)
send and read back."""

from __future__ import annotations

from telegram import InlineKeyboardButton, InlineKeyboardMarkup

from tests.fakes.telegram import user

ALICE = user(111, "Alice", username="alice_ng")
KEYBOARD = InlineKeyboardMarkup(
    [
        [
            InlineKeyboardButton("Approve", callback_data="approve:req-1"),
            InlineKeyboardButton("Open", url="https://example.com"),
        ]
    ]
)
