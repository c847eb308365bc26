"""Approve as edited: an approver's change to a call's arguments, judged and described.

An edit makes a new revision of the call: the same kind, capability, presentation and tool,
other arguments, and so another hash. The approver approves that hash, having seen the
difference against what the agent asked for; the agent then runs exactly the revision.
What may change is the route's to say (`edits`: "none", "any", or a list of top-level
argument keys), and the request's own `input_schema` (JSON Schema), if it sent one, must
accept the result. Refusals say which key and which rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bot.canonical import MAX_DEPTH, approval_hash, canonical_json, check_canonical
from bot.errors import EditRefused, InvalidRequest, NoRoute
from bot.model import Kind
from bot.routing import Directory, Route
from store.records import Approval

# jsonschema is imported where a schema is checked: most requests carry none, and every
# surface that shows a card imports this module.

# The webhook carries the arguments one level deeper than the request did; the revision's
# must fit it as the request's did (bot/intake.py, WEBHOOK_ENVELOPE).
_ENVELOPE = 1
_MISSING = object()


def check_schema(schema: dict[str, Any]) -> None:
    """InvalidRequest unless `schema` is a JSON Schema (of the draft it names, else 2020-12)."""
    from jsonschema import exceptions as schema_errors
    from jsonschema import validators

    try:
        validators.validator_for(schema, default=validators.Draft202012Validator).check_schema(
            schema
        )
    except schema_errors.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(top)"
        message = f"not a valid JSON Schema at {where}: {exc.message}"
        raise InvalidRequest(
            f"invalid request: input_schema: {message}",
            fields=[{"field": "input_schema", "message": message}],
        ) from None


@dataclass(frozen=True, slots=True)
class Change:
    """One top-level argument the edit changed, added (`before` missing) or removed (`after`
    missing)."""

    key: str
    before: Any = _MISSING
    after: Any = _MISSING

    @property
    def kind(self) -> str:
        if self.before is _MISSING:
            return "added"
        return "removed" if self.after is _MISSING else "changed"

    def record(self) -> dict[str, Any]:
        """As the audit trail and the record keep it."""
        shown: dict[str, Any] = {"key": self.key, "change": self.kind}
        if self.before is not _MISSING:
            shown["before"] = self.before
        if self.after is not _MISSING:
            shown["after"] = self.after
        return shown


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[Change]:
    """Every top-level key whose value differs as the hash sees it (1 and 1.0 are the same
    JSON number; true and 1 are not), in key order."""
    changes = []
    for key in sorted(before.keys() | after.keys()):
        old, new = before.get(key, _MISSING), after.get(key, _MISSING)
        if old is _MISSING or new is _MISSING or canonical_json(old) != canonical_json(new):
            changes.append(Change(key, old, new))
    return changes


@dataclass(frozen=True, slots=True)
class Revision:
    """The call as an approver edited it: its arguments, their hash, what changed."""

    arguments: dict[str, Any]
    hash: str
    changes: tuple[Change, ...]

    @property
    def keys(self) -> list[str]:
        return [change.key for change in self.changes]


def revise(
    row: Approval, arguments: Any, route: Route, directory: Directory | None = None
) -> Revision:
    """The revision of `row`'s call with these arguments, judged: a tool call still pending
    review, arguments that are a JSON object signoff can hash, something changed, the route
    allows changing those keys, the request's input_schema accepts them."""
    if row.kind != Kind.TOOL_CALL:
        what = "a question has no call" if row.kind == Kind.QUESTION else "this request's call"
        raise InvalidRequest(f"{what} cannot be edited")
    if not isinstance(arguments, dict):
        raise InvalidRequest(
            "the edited arguments must be a JSON object",
            fields=[{"field": "arguments", "message": "expected an object"}],
        )
    check_canonical(arguments, max_depth=MAX_DEPTH - _ENVELOPE - 2)
    changes = differences(row.tool_args or {}, arguments)
    if not changes:
        raise InvalidRequest("the edit changes nothing: approve the request as it is instead")
    refused = route.edit_refusal(c.key for c in changes)
    if refused is not None:
        raise EditRefused(refused)
    if row.input_schema is not None:
        _check_against(row.input_schema, arguments)
    if _moves(directory, row, arguments, route):
        raise EditRefused(
            "the edited call would take another route than the request's (a route's `when` "
            "judges the arguments): ask the agent for that call instead"
        )
    digest = approval_hash(row.kind, row.capability, row.presentation, row.tool_name, arguments)
    return Revision(arguments, digest, tuple(changes))


def _moves(
    directory: Directory | None, row: Approval, arguments: dict[str, Any], route: Route
) -> bool:
    """Whether today's routes send the edited call elsewhere than the request's route: an
    edit must not lift a call out of the route whose approvers decide it."""
    if directory is None:
        return False
    try:
        return directory.route_for(row.tenant, row.capability, arguments) != route
    except NoRoute:
        return True


def _check_against(schema: dict[str, Any], arguments: dict[str, Any]) -> None:
    from jsonschema import validators

    validator_class = validators.validator_for(schema, default=validators.Draft202012Validator)
    found = sorted(
        validator_class(schema).iter_errors(arguments), key=lambda e: list(e.absolute_path)
    )
    if not found:
        return
    fields = []
    for error in found[:10]:
        where = ".".join(str(p) for p in error.absolute_path) or "(arguments)"
        fields.append({"field": where, "message": f"{error.message} (rule: {error.validator})"})
    summary = "; ".join(f"{f['field']}: {f['message']}" for f in fields[:3])
    raise InvalidRequest(
        f"the edited arguments do not match the tool's input_schema: {summary}", fields=fields
    )
