"""The event loop's lateness probe (bot.admission.LoopLag), on a real loop: idle, it probes
ten times less often (each probe is CPU an idle server would spend for nothing), and it still
sees the loop fall behind as soon as requests hold it up."""

from __future__ import annotations

import asyncio
import time

import pytest

from bot.admission import LoopLag


@pytest.mark.alone  # it blocks the loop and reads how late it ran
async def test_after_a_quiet_second_the_probe_slows_down_and_still_sees_the_loop_fall_behind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = asyncio.get_running_loop()
    probes: list[float] = []
    probe = LoopLag.acquire()
    measure = probe._probe

    def counted(due: float) -> None:
        probes.append(loop.time())
        measure(due)

    monkeypatch.setattr(probe, "_probe", counted)
    try:
        await asyncio.sleep(1.5)  # on time throughout
        recent = [t for t in probes if t > probes[-1] - 0.3]
        assert len(recent) <= 5  # every 100 ms now (30 in 0.3 s before the first quiet second)
        time.sleep(0.2)  # noqa: ASYNC251 - a request holding the loop is the point
        async with asyncio.timeout(1):
            while probe.late < 0.02:  # noqa: ASYNC110 - the probe's figure is polled
                await asyncio.sleep(0.005)
    finally:
        probe.release()
