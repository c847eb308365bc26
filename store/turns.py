"""Writer ordering: the turns in which `Store.write` lets this process's SQLite writers
take the database's one write lock, those someone waits on first."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class WriteTurns:
    """This process's SQLite writers, one at a time: a waiting foreground writer goes before
    every waiting background one, except that a background writer passed over
    `_PASSED_OVER` times in a row goes next, so the outbox is slowed, never starved."""

    _PASSED_OVER = 8

    def __init__(self) -> None:
        self._busy = False
        self._foreground: deque[asyncio.Future[None]] = deque()
        self._background: deque[asyncio.Future[None]] = deque()
        self._passed_over = 0

    @asynccontextmanager
    async def turn(self, background: bool = False) -> AsyncIterator[None]:
        if self._busy or self._foreground or self._background:
            waiter = asyncio.get_running_loop().create_future()
            queue = self._background if background else self._foreground
            queue.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._next()  # the turn was handed to us as we were cancelled: pass it on
                else:
                    queue.remove(waiter)
                raise
        else:
            self._busy = True
        try:
            yield
        finally:
            self._next()

    def _next(self) -> None:
        """Hand the turn to the next waiter, or mark it free."""
        if self._background and (not self._foreground or self._passed_over >= self._PASSED_OVER):
            queue = self._background
            self._passed_over = 0
        elif self._foreground:
            queue = self._foreground
            self._passed_over += 1 if self._background else 0
        else:
            self._busy = False
            return
        queue.popleft().set_result(None)
