"""The event loop's lateness probe (bot.admission.LoopLag): idle, it probes ten times less
often (each probe is CPU an idle server would spend for nothing), and the first late probe
brings it back to every 10 ms. Driven on a loop whose clock the test moves, so the machine's
own load cannot decide the outcome (tests/integration/test_outbox_in_flight.py measures a
real loop)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

from bot.admission import LoopLag


class SteppedLoop:
    """What LoopLag uses of a loop: its clock, moved by the test, and call_later, which
    records the next probe instead of scheduling it."""

    def __init__(self) -> None:
        self.now = 100.0
        self.delays: list[float] = []
        self._next: tuple[Callable[..., None], tuple[Any, ...]] | None = None

    def time(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Callable[..., None], *args: Any) -> Any:
        self.delays.append(delay)
        self._next = (callback, args)
        return self

    def cancel(self) -> None:
        self._next = None

    def probe(self, late: float = 0.0) -> None:
        """Run the scheduled probe `late` seconds after it was due."""
        assert self._next is not None
        self.now += self.delays[-1] + late
        callback, args = self._next
        callback(*args)


def test_a_quiet_loop_is_probed_every_100_ms_and_a_late_probe_brings_back_10_ms() -> None:
    loop = SteppedLoop()
    probe = LoopLag(cast(asyncio.AbstractEventLoop, loop))
    for _ in range(99):
        loop.probe()
    assert set(loop.delays) == {0.01}  # under a second on time: still every 10 ms
    loop.probe()
    assert loop.delays[-1] == 0.1  # a second on time: every 100 ms
    for _ in range(5):
        loop.probe()
    assert loop.delays[-1] == 0.1 and probe.late == 0.0
    loop.probe(late=0.05)  # requests held the loop for 50 ms
    assert loop.delays[-1] == 0.01
    assert probe.late > 0.01
