"""The approval page's edit: an editor per argument, the difference reviewed, approved as edited.

`GET /web/approvals/{id}/edit` shows each argument in a field that keeps its JSON type (text
for a string, a number field, true/false, JSON for objects, arrays and null), the keys the
route does not let anyone change shown but not editable. `POST` of that form makes the
revision (bot/edits.py judges it: route, schema, something changed) and shows the review:
every changed, added and removed key against the agent's call, and the new short hash, with
one button, "Approve as edited", whose form carries the full hash of the call shown, the
arguments and the revision's hash. Only that POST (`/approve-edited`) decides, through the
Operator, like every surface; a page older than the request never does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from aiohttp import web

from bot.card import card_for
from bot.edits import Revision, revise
from bot.errors import InvalidRequest, NotFound, SignoffError
from bot.model import Kind, State
from channels.conversation import refusal_text
from store.records import Approval

if TYPE_CHECKING:
    from channels.web.site import Site, Visitor

# The JSON type each field keeps (the form's `type.KEY`).
_TYPES = ("string", "number", "boolean", "json")
NEW_KEY, NEW_VALUE = "new_key", "new_value"


def add_routes(app: web.Application, channel: Site) -> None:
    pages = EditPages(channel)
    app.router.add_get("/web/approvals/{id}/edit", pages.editor)
    app.router.add_post("/web/approvals/{id}/edit", pages.review)
    app.router.add_post("/web/approvals/{id}/approve-edited", pages.approve)


def field_type(value: Any) -> str:
    """How the editor shows a value so that posting it back keeps its JSON type."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "string" if isinstance(value, str) else "json"


def field_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(
        value, ensure_ascii=False, indent=2 if isinstance(value, dict | list) else None
    )


def edited_arguments(original: Mapping[str, Any], form: Mapping[str, str]) -> dict[str, Any]:
    """The arguments the editor posted: each field read back as its type, removed keys left
    out, an added key's value read as JSON where it is JSON (else as a string). A key the
    form did not post (one it showed as not editable) keeps its value."""
    arguments: dict[str, Any] = {}
    for key, value in original.items():
        if form.get(f"remove.{key}"):
            continue
        if f"arg.{key}" not in form:
            arguments[key] = value
            continue
        arguments[key] = _read(key, form.get(f"type.{key}", field_type(value)), form[f"arg.{key}"])
    new_key = form.get(NEW_KEY, "").strip()
    if new_key:
        if new_key in arguments or new_key in original:
            raise InvalidRequest(f"{new_key!r} is already an argument: change it in its own field")
        text = form.get(NEW_VALUE, "")
        try:
            arguments[new_key] = json.loads(text)
        except ValueError:
            arguments[new_key] = text
    return arguments


def _read(key: str, kind: str, text: str) -> Any:
    if kind not in _TYPES:
        raise InvalidRequest(f"{key}: unknown field type {kind!r}")
    if kind == "string":
        return text
    if kind == "boolean":
        if text not in ("true", "false"):
            raise InvalidRequest(f"{key}: expected true or false")
        return text == "true"
    try:
        value = json.loads(text)
    except ValueError:
        expected = "a number" if kind == "number" else "JSON"
        raise InvalidRequest(f"{key}: expected {expected}, got {text[:40]!r}") from None
    if kind == "number" and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise InvalidRequest(f"{key}: expected a number, got {text[:40]!r}")
    return value


class EditPages:
    def __init__(self, channel: Site) -> None:
        self.channel = channel
        self.directory = channel.directory
        self.operator = channel.operator
        self.conversation = channel.conversation

    async def _row(self, approval_id: str) -> Approval:
        async with self.channel.store.read() as tx:
            row = await tx.get_approval(approval_id)
        if row is None:
            raise NotFound(f"There is no request with id {approval_id}.")
        return row

    async def _may_edit(self, visitor: Visitor, row: Approval) -> None:
        """The editor is for who may approve this request now, on a route that allows edits
        (advisory, as the page's forms are: the approval judges again)."""
        if row.kind != Kind.TOOL_CALL or row.state != State.PENDING:
            raise InvalidRequest("Only a pending tool call can be edited.")
        route = self.directory.route_of(row)
        if route.edits == "none":
            raise InvalidRequest(route.edit_refusal(()) or "This request cannot be edited.")
        actor = self.conversation.actor(visitor.principal)
        await self.operator.precheck(row.id, row.hash, actor, "approve")

    async def editor(self, request: web.Request) -> web.StreamResponse:
        visitor = await self.channel.visitor(request)
        if isinstance(visitor, web.StreamResponse):
            return visitor
        return await self._editor(request, visitor, request.match_info["id"], {})

    async def _editor(
        self,
        request: web.Request,
        visitor: Visitor,
        approval_id: str,
        form: Mapping[str, str],
        *,
        alert: str | None = None,
        status: int = 200,
    ) -> web.StreamResponse:
        try:
            row = await self._row(approval_id)
            await self._may_edit(visitor, row)
        except SignoffError as error:
            return self._refused(request, visitor, approval_id, error)
        route = self.directory.route_of(row)
        fields = []
        for key, value in (row.tool_args or {}).items():
            fields.append(
                {
                    "key": key,
                    "type": form.get(f"type.{key}", field_type(value)),
                    "text": form.get(f"arg.{key}", field_text(value)),
                    "editable": route.edit_refusal([key]) is None,
                    "removed": bool(form.get(f"remove.{key}")),
                }
            )
        context = {
            "card": card_for(self.directory, row, self.channel.clock.now(), max_value=None),
            "fields": fields,
            "adds": route.edits == "any" or bool(set(route.edits) - set(row.tool_args or {})),
            "new_key": form.get(NEW_KEY, ""),
            "new_value": form.get(NEW_VALUE, ""),
            "alert": alert,
        }
        return self.channel.page(request, visitor, "edit.html", context, status=status)

    async def review(self, request: web.Request) -> web.StreamResponse:
        posted = await self.channel.form(request)
        if isinstance(posted, web.StreamResponse):
            return posted
        visitor, form = posted
        approval_id = request.match_info["id"]
        try:
            row = await self._row(approval_id)
            await self._may_edit(visitor, row)
            if form.get("hash", "").strip() != row.hash:
                raise InvalidRequest(
                    "The request changed since the editor was opened; here it is as it is now."
                )
            route = self.directory.route_of(row)
            revision = revise(
                row, edited_arguments(row.tool_args or {}, form), route, self.directory
            )
        except NotFound as error:
            return self._refused(request, visitor, approval_id, error)
        except SignoffError as error:
            words = refusal_text(error, self.directory)
            return await self._editor(
                request, visitor, approval_id, form, alert=words, status=error.http_status
            )
        return self._review(request, visitor, row, revision)

    def _review(
        self, request: web.Request, visitor: Visitor, row: Approval, revision: Revision
    ) -> web.StreamResponse:
        changes = []
        for change in revision.changes:
            kept = change.record()
            changes.append(
                {
                    "key": change.key,
                    "kind": change.kind,
                    "before": field_text(kept["before"]) if "before" in kept else None,
                    "after": field_text(kept["after"]) if "after" in kept else None,
                }
            )
        context = {
            "card": card_for(self.directory, row, self.channel.clock.now(), max_value=None),
            "changes": changes,
            "revision": revision,
            "arguments": json.dumps(revision.arguments, ensure_ascii=False),
        }
        return self.channel.page(request, visitor, "edit_review.html", context)

    async def approve(self, request: web.Request) -> web.StreamResponse:
        posted = await self.channel.form(request)
        if isinstance(posted, web.StreamResponse):
            return posted
        visitor, form = posted
        approval_id = request.match_info["id"]
        actor = self.conversation.actor(visitor.principal)
        try:
            try:
                arguments = json.loads(form.get("arguments", ""))
            except ValueError:
                raise InvalidRequest("The edited arguments did not arrive; edit again.") from None
            decision = await self.operator.approve_edited(
                approval_id,
                form.get("hash", "").strip(),
                arguments,
                form.get("edited_hash", "").strip(),
                actor,
                form.get("note", "").strip() or None,
            )
        except NotFound as error:
            return self._refused(request, visitor, approval_id, error)
        except SignoffError as error:
            said = await self.conversation.recorded(approval_id, actor.label, "approve", error)
            return self.channel.refusal(
                request, visitor, error.http_status, said, title="Not approved"
            )
        location = f"/web/approvals/{approval_id}?done={decision.event.seq}"
        return web.Response(status=303, headers={"Location": location})

    def _refused(
        self, request: web.Request, visitor: Visitor, approval_id: str, error: SignoffError
    ) -> web.StreamResponse:
        status = 404 if isinstance(error, NotFound) else error.http_status
        words = str(error) if isinstance(error, NotFound) else refusal_text(error, self.directory)
        return self.channel.refusal(request, visitor, status, words, title="Cannot edit")
