"""Turn 1: the middleware's pending reviews in a paused thread (`reviews_of`), each action
filed as one signoff request (`file_reviews`), and reading back what was filed."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from signoff_client.client import ApprovalRecord, SignoffClient
from signoff_client.langgraph.interrupt import json_schema_of
from signoff_client.langgraph.runner import GraphRunner
from signoff_client.lifecycle import resume_meta

__all__ = ["FORMAT", "MARKER", "Action", "Review", "file_reviews", "filed_meta", "reviews_of"]

# The key under `resume` that marks a request as filed by this adapter.
MARKER = "langchain_hitl"
FORMAT = 1
_RESERVED = frozenset({"run_id", "capability", "tool", "presentation", "resume", "kind", "step"})

Capability = str | Mapping[str, str] | Callable[[str], str]


@dataclass(frozen=True)
class Action:
    """One action a review asks about: the call, what the reviewer is told, which decisions
    the middleware accepts for it, and the model's tool call id (None in batched mode,
    where the request does not carry it)."""

    index: int
    name: str
    args: dict[str, Any]
    description: str
    allowed: tuple[str, ...]
    tool_call_id: str | None = None

    @property
    def tool(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.args}


@dataclass(frozen=True)
class Review:
    """One pending interrupt of the middleware: `batched` (an `HITLRequest`) or `per_call`
    (a `ToolApprovalRequest`), and its actions in order."""

    interrupt_id: str
    mode: str
    actions: tuple[Action, ...]


def _review(interrupt: Any, allowed_for: Mapping[str, Sequence[str]]) -> Review | None:
    value = getattr(interrupt, "value", None)
    if not isinstance(value, Mapping):
        return None
    if isinstance(value.get("action_requests"), list) and isinstance(
        value.get("review_configs"), list
    ):
        configs = {
            c.get("action_name"): tuple(c.get("allowed_decisions") or ())
            for c in value["review_configs"]
            if isinstance(c, Mapping)
        }
        actions = tuple(
            Action(
                i,
                str(a["name"]),
                dict(a.get("args") or {}),
                str(a.get("description", "")),
                configs.get(a["name"], ()),
            )
            for i, a in enumerate(value["action_requests"])
        )
        return Review(str(interrupt.id), "batched", actions)
    if value.get("type") == "tool_approval":
        name = str(value["name"])
        # The per-call request names no decisions (they are in its response schema): the
        # caller says them, else all four.
        allowed = tuple(allowed_for.get(name) or ("approve", "edit", "reject", "respond"))
        action = Action(
            0,
            name,
            dict(value.get("args") or {}),
            str(value.get("description", "")),
            allowed,
            str(value["tool_call_id"]),
        )
        return Review(str(interrupt.id), "per_call", (action,))
    return None


def reviews_of(
    snapshot: Any, allowed_for: Mapping[str, Sequence[str]] | None = None
) -> list[Review]:
    """The middleware's pending reviews in a thread's state snapshot."""
    found = [_review(i, allowed_for or {}) for i in getattr(snapshot, "interrupts", ()) or ()]
    return [r for r in found if r is not None]


def _field(value: Any) -> Any:
    if value is None or isinstance(value, str | bool | int | float):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def presentation_of(review: Review, action: Action) -> dict[str, Any]:
    """`Run <tool>`, one field per argument, the middleware's description, and which review
    this is: the review makes each request its own (signoff hands back an existing request
    for the same run and hash)."""
    fields = [
        {"label": (str(k) or "(empty)")[:200], "value": _field(v)} for k, v in action.args.items()
    ]
    if action.description:
        fields.append({"label": "Description", "value": action.description[:4000]})
    fields.append({"label": "Review", "value": f"{review.interrupt_id}#{action.index}"})
    return {"title": f"Run {action.name}"[:300], "fields": fields}


def run_id_of(thread_id: str, review: Review) -> str:
    return f"langchain:{thread_id}:{review.interrupt_id}"[:256]


def filed_meta(record: ApprovalRecord) -> Mapping[str, Any] | None:
    meta = resume_meta(record.raw, MARKER)
    return meta if meta is not None and meta.get("format") == FORMAT else None


def _capability(capability: Capability, name: str) -> str:
    if isinstance(capability, str):
        return capability
    if isinstance(capability, Mapping):
        if name not in capability:
            raise ValueError(
                f"no capability for tool {name!r}: the mapping names {sorted(capability)}"
            )
        return capability[name]
    return str(capability(name))


async def file_reviews(
    client: SignoffClient,
    agent: Any,
    config: Mapping[str, Any],
    *,
    capability: Capability,
    tools: Sequence[Any] = (),
    allowed_decisions: Mapping[str, Sequence[str]] | None = None,
    requested_by: str | None = None,
    **request_fields: Any,
) -> list[ApprovalRecord]:
    """File one signoff request per action of every review the thread `config` names is
    paused on, and return them in order. `capability`: one for every tool, a mapping tool
    name -> capability, or a callable(name). `tools`: the agent's tools, whose argument
    schemas go with the requests as `input_schema` (signoff checks an edit against it).
    `allowed_decisions`: per tool, for `per_call` mode (whose interrupt does not list
    them). `request_fields` go into the create body as they are. Safe to call again:
    signoff hands back the same requests. Then end the turn."""
    clash = _RESERVED & set(request_fields)
    if clash:
        raise ValueError(f"{sorted(clash)} are set by the adapter")
    thread_id = (config.get("configurable") or {}).get("thread_id")
    if thread_id is None:
        raise ValueError('config needs {"configurable": {"thread_id": ...}}')
    runner = await GraphRunner.open(agent, dict(config))
    schemas = {getattr(t, "name", None): json_schema_of(t) for t in tools}
    records = []
    for review in reviews_of(runner.snapshot, allowed_decisions):
        for action in review.actions:
            meta = {
                "format": FORMAT,
                "thread_id": str(thread_id),
                "interrupt_id": review.interrupt_id,
                "mode": review.mode,
                "index": action.index,
                "count": len(review.actions),
                "allowed": list(action.allowed),
                "tool_call_id": action.tool_call_id,
            }
            body: dict[str, Any] = {
                "run_id": run_id_of(str(thread_id), review),
                "capability": _capability(capability, action.name),
                "tool": action.tool,
                "presentation": presentation_of(review, action),
                "resume": {MARKER: meta},
                **request_fields,
            }
            if schemas.get(action.name) is not None:
                body["input_schema"] = schemas[action.name]
            if requested_by is not None:
                body["requested_by"] = requested_by
            records.append(await client.request(**body))
    return records
