"""What a model is told when a person did something other than approve its call as asked:
approved it as edited (the call was replaced: which arguments changed, were added or
removed), or answered instead of running it (their words, and that the tool did not run).
The adapters put these words in the tool's result, the one place a model reads them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from signoff_client.client import ApprovalRecord
from signoff_client.hashing import canonical_json

__all__ = ["Change", "answered_message", "changes", "replaced_message"]

_MISSING: Any = object()
_SHOWN = 200  # characters of one value in the words a model reads


@dataclass(frozen=True, slots=True)
class Change:
    """One top-level argument an approver changed, added (`before` missing) or removed
    (`after` missing), as the server describes an edit."""

    key: str
    before: Any = _MISSING
    after: Any = _MISSING

    @property
    def kind(self) -> str:
        if self.before is _MISSING:
            return "added"
        return "removed" if self.after is _MISSING else "changed"

    def words(self) -> str:
        if self.kind == "added":
            return f"{self.key}: added {_shown(self.after)}"
        if self.kind == "removed":
            return f"{self.key}: removed (was {_shown(self.before)})"
        return f"{self.key}: {_shown(self.before)} -> {_shown(self.after)}"


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def _same(a: Any, b: Any) -> bool:
    """Equal as the hash sees it (1 and 1.0 are one JSON number; true and 1 are not)."""
    try:
        return canonical_json(a) == canonical_json(b)
    except Exception:  # not canonical: compare as Python does
        return bool(a == b)


def changes(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> list[Change]:
    """Every top-level key whose value differs between the asked and the approved arguments,
    in key order."""
    before, after = before or {}, after or {}
    found = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key, _MISSING), after.get(key, _MISSING)
        if old is _MISSING or new is _MISSING or not _same(old, new):
            found.append(Change(key, old, new))
    return found


def replaced_message(
    name: str,
    asked: Mapping[str, Any] | None,
    approved: Mapping[str, Any] | None,
    decided_by: str | None = None,
) -> str:
    """The note for a model whose call an approver edited before approving: the call that
    ran is not the one it asked for, and how it differs."""
    listed = "; ".join(c.words() for c in changes(asked, approved)) or "no argument changed"
    who = decided_by or "the approver"
    return (
        f"[signoff] Your call to {name} was replaced: {who} changed its arguments before "
        f"approving it ({listed}). The tool ran once with the changed arguments, "
        f"{_shown(dict(approved or {}))}, not with the ones you asked for."
    )


def answered_message(record: ApprovalRecord) -> str:
    """The tool's result for a call a person answered instead of approving: their words,
    and that the tool did not run. For a question, the answer alone."""
    who = record.decided_by or "a person"
    answer = record.answer_text or ""
    if record.kind == "question":
        return answer
    name = (record.tool or {}).get("name") or "the tool"
    return (
        f"[signoff] The tool {name} did NOT run: {who} answered instead of approving the "
        f"call. Their answer: {answer}"
    )
