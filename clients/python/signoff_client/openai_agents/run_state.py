"""Where a paused run's serialised `RunState` lives between the turn that filed its approvals
and the process that resumes it: in signoff's `resume` field, or in a `StateStore`, always
with its SHA-256, so a state that is not the one filed is refused."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from signoff_client.openai_agents.errors import ResumeRefused

__all__ = ["FileStateStore", "StateStore", "load_state", "save_state"]


class StateStore(Protocol):
    """Where serialised run states live when they should not travel in signoff's `resume`
    field (large conversations: a request body is capped at 256 KiB by default). Keys are the
    SHA-256 of the state; signoff keeps the key and the digest, and a loaded state that does
    not match the digest is refused."""

    async def save(self, key: str, state: str) -> None: ...

    async def load(self, key: str) -> str: ...


class FileStateStore:
    """A StateStore in a directory (one file per state, written atomically). Every process
    that resumes needs to see the same directory."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def _path(self, key: str) -> Path:
        if not key or not all(c in "0123456789abcdef" for c in key):
            raise ValueError(f"not a state key: {key!r}")
        return self.directory / f"{key}.json"

    async def save(self, key: str, state: str) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".state-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(state)
            os.replace(tmp, self._path(key))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    async def load(self, key: str) -> str:
        return self._path(key).read_text("utf-8")


async def save_state(
    result: Any,
    state_store: StateStore | None,
    context_serializer: Callable[[Any], Mapping[str, Any]] | None = None,
) -> dict[str, str]:
    """Serialise the state `result` paused in, as compact JSON; put it in `state_store` if
    there is one. Returns what the approvals carry of it: its SHA-256, and the state itself
    (`run_state`) or its key in the store (`state_key`)."""
    state_json = result.to_state().to_json(context_serializer=context_serializer)
    state = json.dumps(state_json, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(state.encode()).hexdigest()
    if state_store is None:
        return {"state_sha256": digest, "run_state": state}
    await state_store.save(digest, state)
    return {"state_sha256": digest, "state_key": digest}


async def load_state(
    meta: Mapping[str, Any], state_store: StateStore | None, approval_id: str
) -> str:
    """The serialised state an approval's `resume` field points to, checked against the
    digest filed with it (ResumeRefused if it is not that state)."""
    if "run_state" in meta:
        state = meta["run_state"]
    elif "state_key" in meta:
        if state_store is None:
            raise ValueError(
                f"approval {approval_id} keeps its run state in a state store: pass state_store"
            )
        state = await state_store.load(str(meta["state_key"]))
    else:
        raise ResumeRefused(f"approval {approval_id} carries no run state")
    if not isinstance(state, str) or hashlib.sha256(state.encode()).hexdigest() != meta.get(
        "state_sha256"
    ):
        raise ResumeRefused(
            f"approval {approval_id}: the stored run state is not the one that was filed"
        )
    return state
