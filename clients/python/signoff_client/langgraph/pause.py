"""Which pause a `signoff_interrupt` call is, as the default run id of its request: the same
for every retry of that pause in its thread, different for every other pause.

A pause is the thread, where the node sits (its subgraph path, and for a `Send` which
packet), the superstep, and which `signoff_interrupt` of that execution of the node it is.
LangGraph's task id is not used: it is derived from the checkpoint id, which is new when an
attempt failed before its checkpoint was saved (a checkpointer error, a process killed), so
each retry of such a run filed a new request for the same pause.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

__all__ = ["pause_run_id"]

# LangGraph's separators in a checkpoint namespace: "parent:<task id>|child:<task id>".
_NS_SEP, _NS_END = "|", ":"
# Where LangGraph keeps a node execution's own state (its interrupt counter among it). A new
# one is made for each execution and each retry attempt, which is what the index below counts
# by; without it (another LangGraph) every call of an execution counts as the first.
_SCRATCHPAD = "__pregel_scratchpad"
_RUN_ID_LIMIT = 256

# id(scratchpad) -> (the scratchpad, how many signoff_interrupt calls it has seen). The entry
# holds its scratchpad so that the id is not reused while it is remembered; only the newest
# executions are remembered (a node execution that makes its calls is among them).
_SEEN: OrderedDict[int, tuple[Any, int]] = OrderedDict()
_SEEN_LIMIT = 1024
_SEEN_LOCK = threading.Lock()


def pause_run_id(
    thread_id: str, configurable: Mapping[str, Any], metadata: Mapping[str, Any]
) -> str:
    """The run id of the pause this call is, counting the call as made."""
    namespace = str(configurable.get("checkpoint_ns") or "")
    parts = [part for part in namespace.split(_NS_SEP) if part] or [""]
    # The node's own segment loses its task id; the enclosing graphs' segments keep theirs,
    # since a subgraph's supersteps count again from zero on each visit of its parent node.
    node = parts[-1].split(_NS_END)[0] or str(metadata.get("langgraph_node") or "")
    where = _NS_SEP.join([*parts[:-1], node + _packet(metadata.get("langgraph_path"))])
    step = metadata.get("langgraph_step")
    index = _call_index(configurable.get(_SCRATCHPAD))
    run_id = f"langgraph:{thread_id}:{where}:{step}:{index}"
    if len(run_id) > _RUN_ID_LIMIT:
        digest = hashlib.sha256(f"{thread_id}\n{where}\n{step}\n{index}".encode()).hexdigest()
        run_id = f"langgraph:sha256:{digest}"
    return run_id


def _packet(path: Any) -> str:
    """Which task of the node at this step: nothing for the node's own (pull) task; for a task
    from `Send` (or the functional API), its packet's place, which is the same on a retry."""
    if not isinstance(path, (list, tuple)) or not path or path[0] == "__pregel_pull":
        return ""
    if len(path) >= 2 and isinstance(path[1], int) and not isinstance(path[1], bool):
        return f"#send{path[1]}"
    text = json.dumps(path, default=str, separators=(",", ":"))
    return "#" + hashlib.sha256(text.encode()).hexdigest()[:16]


def _call_index(scratchpad: Any) -> int:
    """0 for the first signoff_interrupt of this execution of the node, 1 for the second..."""
    if scratchpad is None:
        return 0
    with _SEEN_LOCK:
        key = id(scratchpad)
        seen = _SEEN.get(key)
        index = seen[1] if seen is not None and seen[0] is scratchpad else 0
        _SEEN[key] = (scratchpad, index + 1)
        _SEEN.move_to_end(key)
        while len(_SEEN) > _SEEN_LIMIT:
            _SEEN.popitem(last=False)
    return index
