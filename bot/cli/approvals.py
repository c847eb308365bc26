"""`signoff approvals ...`: create, list and show requests, and decide them as a principal.

Decisions name the deciding principal with `--as NAME` and go through the Operator like every
other surface (recorded as `cli:NAME`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.cli.context import with_outbox
from bot.cli.rendering import APPROVALS_HEADER, approval_row, emit_json, render_card, safe
from bot.errors import InvalidRequest, NotFound
from bot.model import State, public_record

if TYPE_CHECKING:
    from bot.cli.context import Context
    from bot.operator import Actor, Decision
    from bot.standing import GrantScope
    from store.records import Approval


def _read_file(name: str) -> bytes:
    # A CLI run serves one request; blocking on a small file read is fine.
    try:
        return sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
    except OSError as exc:
        raise InvalidRequest(f"cannot read {name}: {exc.strerror}") from None


async def cmd_request(ctx: Context, args: argparse.Namespace) -> int:
    from bot.intake import create_request, parse_request

    parsed = parse_request(_read_file(args.file), ctx.config.server.max_body_bytes)
    with_outbox()
    result = await create_request(ctx.store, ctx.directory, ctx.clock, args.tenant, parsed)
    emit_json(public_record(result.approval))
    note = "created" if result.created else "already existed (same tenant, run_id and hash)"
    print(f"approval {result.approval.id} {note}", file=sys.stderr)
    for replaced in result.superseded:
        print(f"approval {replaced.approval.id} superseded: same step, older call", file=sys.stderr)
    return 0


async def cmd_list(ctx: Context, args: argparse.Namespace) -> int:
    async with ctx.store.read() as tx:
        rows = await tx.list_approvals(tenant=args.tenant, state=args.state, limit=args.limit)
    if args.json:
        emit_json({"approvals": [public_record(a) for a in rows]})
    elif not rows:
        print("no approvals" + (f" in state {args.state}" if args.state else ""))
    else:
        print(APPROVALS_HEADER)
        for approval in rows:
            print(approval_row(approval))
    return 0


async def _get(ctx: Context, approval_id: str) -> Approval:
    async with ctx.store.read() as tx:
        approval = await tx.get_approval(approval_id)
    if approval is None:
        raise NotFound(f"no approval with id {approval_id!r}; see `signoff approvals list`")
    return approval


async def cmd_show(ctx: Context, args: argparse.Namespace) -> int:
    approval = await _get(ctx, args.id)
    if args.json:
        emit_json(public_record(approval))
    else:
        from bot.card import card_for

        # The terminal is where a human reviews before deciding: show every value in full.
        card = card_for(ctx.directory, approval, ctx.clock.now(), max_value=None)
        print(render_card(card))
    return 0


def _report(ctx: Context, args: argparse.Namespace, decision: Decision) -> int:
    approval = decision.approval
    if args.json:
        emit_json(public_record(approval))
    elif decision.event.type == "delegated":
        print(f"{approval.id} handed to {ctx.directory.describe(approval.assignee)}")
    elif approval.state == State.PENDING:
        votes = decision.event.data.get("votes", [])
        print(
            f"vote recorded for {approval.id}: {len(votes)} of {approval.required_approvals} "
            f"approvals ({', '.join(votes)}); still pending"
        )
    else:
        print(
            f"{approval.id} {approval.state} by {ctx.directory.describe(approval.decided_by or '')}"
        )
    return 0


def _actor(args: argparse.Namespace) -> Actor:
    from bot.operator import Actor

    return Actor(principal=args.as_, via="cli", break_glass=args.break_glass)


async def cmd_approve(ctx: Context, args: argparse.Namespace) -> int:
    scope = _grant_scope(args)
    if scope is not None:
        if _edits(args):
            raise InvalidRequest("approve as edited or allow the same, not both at once")
        # Read outside the decision only for its argument names: the decision checks the
        # hash, which covers the arguments, so a call changed meanwhile is refused.
        arguments = (await _get(ctx, args.id)).tool_args or {}
        scope = _bound_by_default(scope, arguments, args.allow_any or ())
        decision, grant = await ctx.operator.approve_and_allow(
            args.id, args.hash, _actor(args), scope, args.note
        )
        if not args.json:
            from bot.cli.grants import describe

            print(f"standing grant {grant.id}: {describe(grant)}")
            for line in _bounds(grant.conditions, arguments):
                print(line)
        return _report(ctx, args, decision)
    if not _edits(args):
        decision = await ctx.operator.approve_shown(args.id, args.hash, _actor(args), args.note)
        return _report(ctx, args, decision)
    if args.edited_hash is None:
        raise InvalidRequest(
            "an edited approval names the hash of the edited call: preview it with "
            f"`signoff approvals edit {args.id} ...` and pass --edited-hash"
        )
    arguments = _edited_arguments(await _get(ctx, args.id), args)
    decision = await ctx.operator.approve_edited(
        args.id, args.hash, arguments, args.edited_hash, _actor(args), args.note
    )
    return _report(ctx, args, decision)


async def cmd_edit(ctx: Context, args: argparse.Namespace) -> int:
    """The edit as its approver reviews it: every changed key and the new hash. Nothing is
    written; `approvals approve --edited-hash` approves it."""
    from bot.edits import revise

    row = await _get(ctx, args.id)
    if not _edits(args):
        raise InvalidRequest("say what to change: --set KEY=VALUE, --unset KEY or --args FILE")
    route = ctx.directory.route_of(row)
    revision = revise(row, _edited_arguments(row, args), route, ctx.directory)
    if args.json:
        emit_json(
            {
                "hash": revision.hash,
                "from_hash": row.hash,
                "arguments": revision.arguments,
                "changes": [change.record() for change in revision.changes],
            }
        )
        return 0
    print(f"Edit of {row.id} (the call shown hashes to sha256:{row.hash[:12]})")
    for change in revision.changes:
        kept = change.record()
        if change.kind == "changed":
            words = f"{_json(kept['before'])} -> {_json(kept['after'])}"
        elif change.kind == "added":
            words = f"added: {_json(kept['after'])}"
        else:
            words = f"removed (was {_json(kept['before'])})"
        print(f"  {safe(change.key)}: {safe(words)}")
    print(f"Edited hash   sha256:{revision.hash}")
    print(
        f"approve it: signoff approvals approve {row.id} --hash {row.hash} "
        f"--edited-hash {revision.hash} --as NAME {_edit_flags(args)}".rstrip()
    )
    return 0


def _grant_scope(args: argparse.Namespace) -> GrantScope | None:
    from bot.durations import parse_duration
    from bot.standing import GrantScope

    bounds = (
        args.allow_run
        or args.allow_equal
        or args.allow_at_most
        or args.allow_any
        or args.allow_uses
    )
    if args.allow_for is None:
        if bounds:
            raise InvalidRequest(
                "--allow-run, --allow-equal, --allow-at-most, --allow-any, --allow-uses "
                "bound a standing grant: give it with --allow-for DURATION"
            )
        return None
    try:
        lifetime = parse_duration(args.allow_for)
    except ValueError as exc:
        raise InvalidRequest(f"--allow-for: {exc}") from None
    return GrantScope(
        lifetime=lifetime,
        this_run=args.allow_run,
        equal=tuple(args.allow_equal or ()),
        at_most=tuple(args.allow_at_most or ()),
        max_uses=args.allow_uses,
    )


def _bound_by_default(
    scope: GrantScope, arguments: dict[str, object], free: Sequence[str]
) -> GrantScope:
    """The safe default every surface shares (the web form preselects "only this value"):
    an argument the giver did not name (--allow-at-most, or --allow-any to free it) holds
    the grant to its value on this call, so a grant never covers other arguments unasked."""
    flags = (set(scope.equal), set(scope.at_most), set(free))
    named = set().union(*flags)
    for key in sorted(named):
        if sum(key in keys for keys in flags) > 1:  # one bound each: which would it mean?
            raise InvalidRequest(
                f"{key} is named by more than one of --allow-equal, --allow-at-most, --allow-any"
            )
    for key in free:
        if key not in arguments:
            raise InvalidRequest(f"--allow-any {key!r}: the call has no argument {key!r}")
    unnamed = tuple(key for key in arguments if key not in named)
    return replace(scope, equal=scope.equal + unnamed)


def _bounds(conditions: dict[str, Any] | None, arguments: dict[str, object]) -> list[str]:
    """One line per argument of the call: what the grant holds it to, in the web form's
    words ("only", "at most", "any value")."""
    held = {part["arg"]: part for part in (conditions or {}).get("all", [])}
    if not arguments:
        return ["  (the call has no arguments)"]
    lines = []
    for key in arguments:
        part = held.get(key)
        if part is None:
            words = "any value"
        else:
            words = ("only " if part["op"] == "==" else "at most ") + _json(part["value"])
        lines.append(f"  {safe(key)}: {safe(words)}")
    return lines


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def _edits(args: argparse.Namespace) -> bool:
    return bool(args.set or args.unset or args.args)


def _edit_flags(args: argparse.Namespace) -> str:
    import shlex

    flags = [f"--set {shlex.quote(pair)}" for pair in args.set or ()]
    flags += [f"--unset {shlex.quote(key)}" for key in args.unset or ()]
    if args.args:
        flags.append(f"--args {shlex.quote(args.args)}")
    return " ".join(flags)


def _edited_arguments(row: Approval, args: argparse.Namespace) -> dict[str, object]:
    """The arguments an edit asks for: --args FILE's object (else the call's own), then each
    --set KEY=VALUE (VALUE read as JSON where it is JSON, else as a string: amount=120 is a
    number, memo=hello a string, 'id="007"' the string 007), then each --unset KEY."""
    if args.args:
        try:
            arguments = json.loads(_read_file(args.args))
        except ValueError as exc:
            raise InvalidRequest(f"--args {args.args}: not JSON ({exc})") from None
        if not isinstance(arguments, dict):
            raise InvalidRequest(f"--args {args.args}: the arguments must be a JSON object")
    else:
        arguments = dict(row.tool_args or {})
    for pair in args.set or ():
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise InvalidRequest(f"--set {pair!r}: expected KEY=VALUE")
        try:
            arguments[key] = json.loads(text)
        except ValueError:
            arguments[key] = text
    for key in args.unset or ():
        if key not in arguments:
            raise InvalidRequest(f"--unset {key!r}: the call has no argument {key!r}")
        del arguments[key]
    return arguments


async def cmd_answer(ctx: Context, args: argparse.Namespace) -> int:
    decision = await ctx.operator.answer(
        args.id, args.hash, _actor(args), text=args.text, option=args.option
    )
    return _report(ctx, args, decision)


async def cmd_reject(ctx: Context, args: argparse.Namespace) -> int:
    decision = await ctx.operator.reject_shown(args.id, args.hash, _actor(args), args.note)
    return _report(ctx, args, decision)


async def cmd_cancel(ctx: Context, args: argparse.Namespace) -> int:
    decision = await ctx.operator.cancel(args.id, _actor(args), args.note)
    return _report(ctx, args, decision)


async def cmd_hand_off(ctx: Context, args: argparse.Namespace) -> int:
    decision = await ctx.operator.delegate(args.id, _actor(args), args.to, args.note)
    return _report(ctx, args, decision)


async def cmd_bulk(ctx: Context, args: argparse.Namespace) -> int:
    """Decide every `ID HASH` line of --file, each against its own hash; say what was decided
    and what was refused and why. Exit 1 if anything was refused."""
    from bot.bulk import decide_each, read_pairs

    pairs = read_pairs(_read_file(args.file).decode("utf-8", "replace"))
    outcomes = await decide_each(ctx.operator, args.action, pairs, _actor(args), args.note)
    if args.json:
        emit_json(
            {
                "decided": [public_record(o.decision.approval) for o in outcomes if o.decision],
                "refused": [
                    {"id": o.approval_id, "code": o.refused.code, "message": o.refused.message}
                    for o in outcomes
                    if o.refused
                ],
            }
        )
    else:
        for outcome in outcomes:
            if outcome.decision is not None:
                approval = outcome.decision.approval
                print(f"{outcome.approval_id}  {approval.state}")
            else:
                assert outcome.refused is not None
                print(f"{outcome.approval_id}  refused: {safe(outcome.refused.message)}")
    refused = sum(1 for o in outcomes if not o.ok)
    print(f"{len(outcomes) - refused} decided, {refused} refused", file=sys.stderr)
    return 1 if refused else 0
