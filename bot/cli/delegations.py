"""`signoff delegate` and `signoff delegations ...`: let someone decide for a principal for a
while, list those windows, end one."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from bot.cli.rendering import delegation_record, emit_json
from bot.errors import InvalidRequest

if TYPE_CHECKING:
    from datetime import datetime

    from bot.cli.context import Context


def _moment(ctx: Context, text: str | None, option: str) -> datetime | None:
    if text is None:
        return None
    from bot.durations import parse_moment

    try:
        return parse_moment(text, ctx.clock.now())
    except ValueError as exc:
        raise InvalidRequest(f"{option}: {exc}") from None


async def cmd_delegate(ctx: Context, args: argparse.Namespace) -> int:
    delegation = await ctx.delegations.create(
        args.principal,
        args.to,
        created_by="cli",
        starts_at=_moment(ctx, args.from_, "--from"),
        ends_at=_moment(ctx, args.until, "--until"),
        scope=args.scope,
        note=args.note,
    )
    if args.json:
        emit_json(delegation_record(delegation))
    else:
        print(f"delegation {delegation.id}: {ctx.delegations.describe(delegation)}")
    return 0


async def cmd_delegations_list(ctx: Context, args: argparse.Namespace) -> int:
    found = await ctx.delegations.list(include_past=args.all)
    if args.json:
        emit_json([delegation_record(d) for d in found])
        return 0
    now = ctx.clock.now()
    for delegation in found:
        if delegation.revoked_at is not None:
            status = "revoked"
        elif delegation.ended_by(now):
            status = "ended"
        else:
            status = "active" if delegation.active_at(now) else "scheduled"
        print(
            f"{delegation.id}  {status:<9} {delegation.starts_at:%Y-%m-%d %H:%M}  "
            f"{ctx.delegations.describe(delegation)}"
        )
    if not found:
        print("no delegations" + ("" if args.all else " active or scheduled (--all for past)"))
    return 0


async def cmd_delegations_revoke(ctx: Context, args: argparse.Namespace) -> int:
    delegation = await ctx.delegations.revoke(args.id, by="cli")
    print(f"delegation {delegation.id} revoked: {ctx.delegations.describe(delegation)}")
    return 0
