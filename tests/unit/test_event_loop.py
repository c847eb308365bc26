"""The loop `serve` and `worker` run on (bot.server.run_loop): uvloop where it is installed
(a dependency on Linux), asyncio's own where it is not."""

from __future__ import annotations

import asyncio
import sys

import pytest

from bot import server


async def _loop_kind() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_the_server_runs_on_uvloop_where_it_is_installed() -> None:
    pytest.importorskip("uvloop")
    assert server.event_loop() == "uvloop"
    assert server.run_loop(_loop_kind()).startswith("uvloop")


def test_without_uvloop_the_server_runs_on_asyncios_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` raises ImportError
    assert server.event_loop() == "asyncio"
    assert server.run_loop(_loop_kind()).startswith("asyncio")
