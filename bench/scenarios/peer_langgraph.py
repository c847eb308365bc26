"""The peer reference for an HTTP create: LangGraph pausing a run on `interrupt(...)`, its
checkpoint saved by langgraph-checkpoint-sqlite's SqliteSaver.

Each thread is an agent run whose state holds a ~4 KB transcript (the same one
bench/load.py sends signoff in `resume`) and whose gated node calls `interrupt()` with the
same refund call, capability and presentation an agent sends signoff. Running the graph on a
new thread until it pauses is the peer's "create": when `invoke` returns, the paused run
is on disk (durability "sync": every checkpoint written before the step returns, as signoff
commits before it answers 201). N threads are paused from `--clients` concurrent callers
sharing one saver (SqliteSaver serialises them on its connection's lock; `--saver async`
uses AsyncSqliteSaver and asyncio tasks instead).

    python -m bench peer_langgraph [--n 3000] [--clients 32] [--saver sync|async] [--out FILE]

Needs bench/requirements.txt (langgraph, langgraph-checkpoint-sqlite).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from bench.load import transcript
from bench.results import Results, percentile

DESCRIPTION = "the peer LangGraph: runs paused on interrupt(), checkpointed, pauses/s"

TRANSCRIPT = transcript()


class Run(TypedDict, total=False):
    order: int
    transcript: list[dict[str, str]]
    decision: Any


def refund(run: Run) -> Run:
    """The gated node: asks a human with the call signoff would be asked about."""
    i = run["order"]
    decision = interrupt(
        {
            "capability": "payments.refund",
            "tool": {
                "name": "stripe.refunds.create",
                "arguments": {"charge": f"ch_{i}", "amount": 1000 + i, "currency": "eur"},
            },
            "presentation": {
                "title": f"Refund order {i}",
                "summary": f"Order {i} arrived damaged; the customer sent photos.",
                "fields": [
                    {"label": "Amount", "value": f"{1000 + i} cents"},
                    {"label": "Order", "value": str(i)},
                ],
            },
            "reason": "Refunds need a budget owner's approval.",
            "requested_by": "support-agent",
        }
    )
    return {"decision": decision}


def build(checkpointer: Any) -> Any:
    graph = StateGraph(Run)
    graph.add_node("refund", refund)
    graph.add_edge(START, "refund")
    graph.add_edge("refund", END)
    return graph.compile(checkpointer=checkpointer)


def paused(output: dict[str, Any]) -> None:
    if not output.get("__interrupt__"):
        raise RuntimeError(f"the run did not pause: {output!r}")


def bench_sync(path: str, n: int, clients: int) -> tuple[float, list[float]]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    latencies: list[float] = []
    lock = threading.Lock()
    with SqliteSaver.from_conn_string(path) as saver:
        graph = build(saver)

        def one(i: int) -> None:
            began = time.perf_counter()
            paused(
                graph.invoke(
                    {"order": i, "transcript": TRANSCRIPT},
                    {"configurable": {"thread_id": f"t-{i}"}},
                    durability="sync",
                )
            )
            with lock:
                latencies.append((time.perf_counter() - began) * 1000)

        one(-1)  # compile-time caches warm, the tables made: not part of the figure
        latencies.clear()
        started = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(one, range(n)))
        return n / (time.perf_counter() - started), latencies


async def bench_async(path: str, n: int, clients: int) -> tuple[float, list[float]]:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    latencies: list[float] = []
    async with AsyncSqliteSaver.from_conn_string(path) as saver:
        graph = build(saver)

        async def one(i: int) -> None:
            began = time.perf_counter()
            paused(
                await graph.ainvoke(
                    {"order": i, "transcript": TRANSCRIPT},
                    {"configurable": {"thread_id": f"t-{i}"}},
                    durability="sync",
                )
            )
            latencies.append((time.perf_counter() - began) * 1000)

        await one(-1)
        latencies.clear()
        queue = iter(range(n))

        async def worker() -> None:
            for i in queue:
                await one(i)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        return n / (time.perf_counter() - started), latencies


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--saver", choices=["sync", "async"], default="sync")


def run(args: argparse.Namespace) -> Results:
    with tempfile.TemporaryDirectory(prefix="signoff-peer-") as tmp:
        path = str(Path(tmp, "langgraph.sqlite"))
        if args.saver == "sync":
            rate, latencies = bench_sync(path, args.n, args.clients)
        else:
            rate, latencies = asyncio.run(bench_async(path, args.n, args.clients))
        size = Path(path).stat().st_size + sum(
            p.stat().st_size for p in Path(tmp).glob("langgraph.sqlite-wal")
        )
    figures = {
        "rate": rate,
        "p50_ms": percentile(latencies, 50),
        "p99_ms": percentile(latencies, 99),
        "bytes_per_run": size / (args.n + 1),
    }
    print(
        f"LangGraph interrupt + {'SqliteSaver' if args.saver == 'sync' else 'AsyncSqliteSaver'}"
        f", {args.n} runs, {args.clients} clients: {rate:,.0f} pauses/s, "
        f"p50 {figures['p50_ms']:.1f} ms, p99 {figures['p99_ms']:.1f} ms, "
        f"{figures['bytes_per_run'] / 1024:.1f} KiB per paused run"
    )
    found = Results(detail=figures)
    found.add_document(figures)
    found.add_samples("latency_ms", latencies)
    return found

