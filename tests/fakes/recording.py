"""What every fake platform API shares: an aiohttp server on 127.0.0.1 (an ephemeral port),
run inside a test's event loop or on a loop of its own in a daemon thread, that records each
request it answers as a `Call` and lets a test wait for calls.

A subclass adds its routes (`_routes`) and answers; `_canonical` maps a method name as a test
writes it to the name calls are recorded under (Telegram's method names are case-insensitive).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Self

from aiohttp import web


@dataclass(frozen=True)
class Call:
    """One request received by a fake: the method, its arguments (decoded as the fake
    documents), the HTTP status answered, the platform's error (None when it answered ok) and
    the JSON answered, if any."""

    method: str
    args: dict[str, Any]
    status: int = 200
    error: str | None = None
    response: dict[str, Any] | None = field(default=None, repr=False)
    at: float = field(default_factory=time.monotonic, repr=False)  # when it was received

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None


CallPredicate = Callable[[Call], bool] | str


class RecordingFake:
    thread_name = "fake-api"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: list[Call] = []
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._peers: set[tuple[str, int]] = set()

    def _routes(self, app: web.Application) -> None:
        raise NotImplementedError

    @web.middleware
    async def _note_connection(self, request: web.Request, handler: Any) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        if peer is not None:
            with self._lock:
                self._peers.add((str(peer[0]), int(peer[1])))
        return await handler(request)

    @property
    def connections(self) -> int:
        """How many TCP connections requests came over (a client that keeps its connections
        open sends many requests over each)."""
        with self._lock:
            return len(self._peers)

    def _canonical(self, method: str) -> str:
        return method

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> Self:
        app = web.Application(middlewares=[self._note_connection])
        self._routes(app)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        self._runner = runner
        self._port = int(runner.addresses[0][1])
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @classmethod
    @contextlib.contextmanager
    def in_thread(cls, *args: Any, **kwargs: Any) -> Iterator[Self]:
        """Run the fake on an event loop of its own, in a daemon thread (for tests that drive
        a subprocess from plain synchronous code)."""
        fake = cls(*args, **kwargs)
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name=cls.thread_name, daemon=True)
        thread.start()
        try:
            asyncio.run_coroutine_threadsafe(fake.start(), loop).result(timeout=10)
            yield fake
        finally:
            try:
                asyncio.run_coroutine_threadsafe(fake.close(), loop).result(timeout=10)
            finally:
                loop.call_soon_threadsafe(loop.stop)
                thread.join(timeout=10)
                if not thread.is_alive():
                    loop.close()

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return self._port

    # -- what was asked ----------------------------------------------------------------------

    def _record(self, call: Call) -> None:
        with self._lock:
            self._calls.append(call)

    @property
    def calls(self) -> list[Call]:
        """A snapshot of every request received, in order (failed ones included)."""
        with self._lock:
            return list(self._calls)

    def calls_to(self, method: str, *, ok: bool | None = None) -> list[Call]:
        """The calls of one method; with ``ok=True`` only the successful ones."""
        name = self._canonical(method)
        return [c for c in self.calls if c.method == name and (ok is None or c.ok == ok)]

    async def wait_for(
        self,
        predicate: CallPredicate,
        timeout: float = 5.0,  # noqa: ASYNC109 - mirrors wait_for_sync; polls, no cancel scope
        *,
        count: int = 1,
    ) -> Call:
        """Wait until `count` calls match; return the count-th. A str matches a method name.

        Polls, so it works from any event loop, including for a fake run `in_thread`.
        Raises TimeoutError listing the calls seen.
        """
        deadline = time.monotonic() + timeout
        while (found := self._match(predicate, count)) is None:
            if time.monotonic() >= deadline:
                raise TimeoutError(self._timeout_message(predicate, count, timeout))
            await asyncio.sleep(0.01)
        return found

    def wait_for_sync(
        self, predicate: CallPredicate, timeout: float = 5.0, *, count: int = 1
    ) -> Call:
        """`wait_for` for a plain thread (not the fake's own loop)."""
        deadline = time.monotonic() + timeout
        while (found := self._match(predicate, count)) is None:
            if time.monotonic() >= deadline:
                raise TimeoutError(self._timeout_message(predicate, count, timeout))
            time.sleep(0.01)
        return found

    def _match(self, predicate: CallPredicate, count: int) -> Call | None:
        if isinstance(predicate, str):
            name = self._canonical(predicate)
            matched = [c for c in self.calls if c.method == name]
        else:
            matched = [c for c in self.calls if predicate(c)]
        return matched[count - 1] if len(matched) >= count else None

    def _timeout_message(self, predicate: CallPredicate, count: int, timeout: float) -> str:
        seen = ", ".join(f"{c.method}({c.status}, {c.error})" for c in self.calls) or "none"
        return f"no {count} call(s) matching {predicate!r} within {timeout}s; calls: {seen}"
