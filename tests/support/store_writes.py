"""Counting the write transactions a store opens: `Store.write` and `Store.write_alone`
(a claim of outbox jobs is one, and on PostgreSQL it opens no transaction of its own)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from store.repository import Store


def count_writes(
    store: Store,
    monkeypatch: pytest.MonkeyPatch,
    then: Callable[[list[bool]], None] | None = None,
) -> list[bool]:
    """Every write `store` opens from now on, as its `background` flag; `then(writes)`
    after each is counted."""
    opened: list[bool] = []

    def counting(open_write: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*, background: bool = False) -> Any:
            opened.append(background)
            if then is not None:
                then(opened)
            return open_write(background=background)

        return counted

    monkeypatch.setattr(store, "write", counting(store.write))
    monkeypatch.setattr(store, "write_alone", counting(store.write_alone))
    return opened
