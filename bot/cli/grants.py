"""`signoff grants ...`: the standing grants people gave from cards, listed and revoked.

A grant is given with an approval (`signoff approvals approve ... --allow-for 8h`, or a card's
"Approve, and allow the same for ..."); bot/standing.py says what it covers.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from bot.cli.context import with_outbox
from bot.cli.rendering import emit_json, safe

if TYPE_CHECKING:
    from bot.cli.context import Context
    from store.records import StandingGrant


def describe(grant: StandingGrant) -> str:
    """One line: what it allows, for whom, until when, how often it was used."""
    from bot.grant_views import describe as described

    return safe(described(grant))


async def cmd_grants_list(ctx: Context, args: argparse.Namespace) -> int:
    from bot.standing import grant_record

    async with ctx.store.read() as tx:
        found = await tx.list_standing_grants(
            live_at=None if args.all else ctx.clock.now(), tenant=args.tenant
        )
    if args.json:
        emit_json({"grants": [grant_record(g) for g in found]})
    elif not found:
        print("no standing grants" + ("" if args.all else " live now (--all for ended ones)"))
    else:
        for grant in found:
            print(f"{grant.id}  {describe(grant)}")
    return 0


async def cmd_grants_revoke(ctx: Context, args: argparse.Namespace) -> int:
    from bot.standing import revoke

    with_outbox()
    grant = await revoke(ctx.store, ctx.directory, ctx.clock.now(), args.id, args.as_)
    print(f"standing grant {grant.id} revoked: {describe(grant)}")
    return 0
