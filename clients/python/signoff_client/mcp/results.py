"""What the gateway answers an agent: error results in words, the upstream's results as
`complete` stores them, and a recorded result replayed instead of running a call again."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError

from signoff_client.client import ApprovalRecord
from signoff_client.errors import NotCanonical
from signoff_client.hashing import canonical_json
from signoff_client.mcp.definition import cut, json_problem
from signoff_client.telling import replaced_message

__all__ = [
    "META_KEY",
    "NO_ANSWER",
    "RESULT_LIMIT",
    "approval_meta",
    "error",
    "merge_meta",
    "no_answer",
    "own",
    "replay",
    "stored",
    "text_result",
    "upstream_failure",
]

# MCPError codes the SDK raises itself when no answer came (the connection closed, the read
# timed out): a call sent may have run, so these are never the upstream refusing it.
NO_ANSWER = frozenset({types.CONNECTION_CLOSED, types.REQUEST_TIMEOUT})
# Where results carry the approval they came from, for programs (an LLM reads the text).
META_KEY = "signoff/approval"
# `complete` keeps at most 16 KiB of canonical JSON; leave room for the envelope.
RESULT_LIMIT = 16 * 1024 - 512
# A stored result deeper than this is kept as its text only: the encoders recurse.
_STORED_DEPTH = 64


def no_answer(exc: BaseException, timeout: float | None = None) -> str:
    """Why no answer came from the upstream, as the gateway's own words (never presented as
    an error the upstream sent)."""
    if isinstance(exc, MCPError) and exc.code == types.CONNECTION_CLOSED:
        return "the gateway's connection to the upstream closed before an answer came"
    if isinstance(exc, TimeoutError) or (
        isinstance(exc, MCPError) and exc.code == types.REQUEST_TIMEOUT
    ):
        within = f" within {timeout:g} s (the gateway's call timeout)" if timeout else " in time"
        return f"no answer came from the upstream{within}"
    return f"the gateway lost the upstream ({type(exc).__name__}: {cut(str(exc), 200)})"


def upstream_failure(exc: BaseException) -> str:
    """A failure while asking the upstream something (a tools/list), in words that say whose
    failure it is: the gateway's, or an error the upstream answered."""
    if isinstance(exc, MCPError) and exc.code not in NO_ANSWER:
        return f"the upstream answered with error {exc.code}: {cut(exc.message, 200)}"
    if isinstance(exc, MCPError | TimeoutError):
        return no_answer(exc)
    return f"{type(exc).__name__}: {cut(str(exc), 200)}"


def error(text: str, *, meta: Mapping[str, Any] | None = None) -> types.CallToolResult:
    """An `isError` result in words (every refusal, wait and failure the gateway answers)."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        is_error=True,
        _meta={META_KEY: dict(meta)} if meta else None,
    )


def text_result(text: str, *, meta: Mapping[str, Any] | None = None) -> types.CallToolResult:
    """A result in words that is not an error: a person's answer instead of the tool's."""
    return _text(text, False, meta or {})


def own(result: types.CallToolResult) -> types.CallToolResult:
    """The upstream's result as the gateway's: without the upstream's `serverInfo` stamp
    (2026-07-28), which would otherwise stand in for the gateway's own."""
    if not result.meta or types.SERVER_INFO_META_KEY not in result.meta:
        return result
    meta = {k: v for k, v in result.meta.items() if k != types.SERVER_INFO_META_KEY}
    return result.model_copy(update={"meta": meta or None})


def approval_meta(record: ApprovalRecord) -> dict[str, Any]:
    """The `_meta["signoff/approval"]` of a gated answer."""
    return {
        "id": record.id,
        "state": record.state,
        "execution": record.execution,
        "hash": record.hash,
        "capability": record.capability,
        "assignee": record.assignee,
        "expires_at": record.expires_at,
        "decided_by": record.decided_by,
    }


def merge_meta(existing: Mapping[str, Any] | None, approval: Mapping[str, Any]) -> dict[str, Any]:
    return {**(existing or {}), META_KEY: dict(approval)}


def stored(result: types.CallToolResult) -> dict[str, Any]:
    """The upstream result as `complete` keeps it: content, structuredContent and isError as
    JSON; cut down to its text (with the full result's size and SHA-256) past 16 KiB, or when
    it is too deep to encode (the upstream's answer must never stop its outcome being kept)."""
    data: dict[str, Any] = {
        "content": [
            c.model_dump(by_alias=True, mode="json", exclude_none=True) for c in result.content
        ],
        "isError": result.is_error,
    }
    if result.structured_content is not None:
        data["structuredContent"] = result.structured_content
    if json_problem(data, max_depth=_STORED_DEPTH) is not None:
        full = repr(data).encode("utf-8", "replace")  # a stand-in, for its size and digest only
    else:
        try:
            full = canonical_json(data)
        except NotCanonical:
            full = json.dumps(data, sort_keys=True, ensure_ascii=False).encode()
        else:
            if len(full) <= RESULT_LIMIT:
                return data
    text = "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))
    limit = 12_000
    while True:
        shortened = {
            "truncated": True,
            "bytes": len(full),
            "sha256": hashlib.sha256(full).hexdigest(),
            "isError": result.is_error,
            "content": [{"type": "text", "text": cut(text, limit)}],
        }
        size = len(json.dumps(shortened, ensure_ascii=False).encode())
        if size <= RESULT_LIMIT or limit < 100:
            return shortened
        limit //= 2


def replay(record: ApprovalRecord, meta: dict[str, Any]) -> types.CallToolResult:
    """The recorded outcome of a call that already ran, returned instead of running it again."""
    outcome = record.raw.get("outcome") or {}
    kept = outcome.get("result")
    when = record.raw.get("executed_at") or "earlier"
    note = (
        f"[signoff-mcp] Recorded result of approval {record.id}: the approved call ran once "
        f"({when}) and was not run again."
    )
    failed = record.state == "failed"
    if isinstance(kept, dict) and "error" in kept:
        refusal = kept["error"]
        return error(
            f"The upstream refused the approved call: {refusal.get('message')} "
            f"(code {refusal.get('code')}).\n{note}",
            meta=meta,
        )
    if not isinstance(kept, dict) or not isinstance(kept.get("content"), list):
        return _text(
            f"The approved call ran once ({record.state}) but no result was recorded.\n{note}",
            failed,
            meta,
        )
    if kept.get("truncated"):
        note += f" The result was {kept.get('bytes')} bytes; only its text start was kept."
    try:
        result = types.CallToolResult.model_validate(
            {k: kept[k] for k in ("content", "structuredContent", "isError") if k in kept}
        )
    except ValueError:
        return _text(
            f"The approved call ran once; its recorded result is unreadable.\n{note}", failed, meta
        )
    content = [*result.content, types.TextContent(type="text", text=note)]
    if record.edited:
        said = replaced_message(
            str((record.tool or {}).get("name")),
            record.original_arguments,
            (record.tool or {}).get("arguments"),
            record.decided_by,
        )
        content.insert(0, types.TextContent(type="text", text=said))
    update = {
        "content": content,
        "is_error": result.is_error or failed,
        "meta": merge_meta(result.meta, meta),
    }
    return result.model_copy(update=update)


def _text(text: str, is_error: bool, meta: Mapping[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        is_error=is_error,
        _meta={META_KEY: dict(meta)},
    )
