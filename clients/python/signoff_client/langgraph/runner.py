"""Crossing between LangGraph's sync and async sides: the graph driven from the async resume
helpers whatever its checkpointer supports, and coroutines run from sync nodes."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["GraphRunner", "run_sync"]

T = TypeVar("T")


class GraphRunner:
    """The graph on one thread, through its async API, or its sync API in a worker thread when
    the checkpointer has no async side (SqliteSaver). `snapshot` is the thread's state as last
    read."""

    def __init__(self, graph: Any, config: dict[str, Any], sync: bool, snapshot: Any) -> None:
        self.graph, self.config, self.sync, self.snapshot = graph, config, sync, snapshot

    @classmethod
    async def open(cls, graph: Any, config: dict[str, Any]) -> GraphRunner:
        try:
            snapshot = await graph.aget_state(config)
            sync = False
        except NotImplementedError:
            snapshot = await asyncio.to_thread(graph.get_state, config)
            sync = True
        return cls(graph, config, sync, snapshot)

    async def refresh(self) -> Any:
        if self.sync:
            self.snapshot = await asyncio.to_thread(self.graph.get_state, self.config)
        else:
            self.snapshot = await self.graph.aget_state(self.config)
        return self.snapshot

    async def invoke(self, command: Any) -> Any:
        if self.sync:
            return await asyncio.to_thread(self.graph.invoke, command, self.config)
        return await self.graph.ainvoke(command, self.config)


def run_sync(factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to completion from sync code. LangGraph runs sync nodes in worker
    threads without an event loop, where asyncio.run works; if this thread already runs a
    loop (a sync node called from async code), run it on a thread of its own instead."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(factory())
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(factory())
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=target, name="signoff-sync")
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
