"""The operator's commands on the database that are not decisions: `db upgrade`,
`outbox list` and `outbox retry`, `audit verify`, and `web login`."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from bot.cli.context import EXIT_REFUSED
from bot.cli.rendering import emit_json, job_record, safe
from bot.errors import ConfigError, NotFound

if TYPE_CHECKING:
    from bot.cli.context import Context


async def cmd_db_upgrade(ctx: Context, args: argparse.Namespace) -> int:
    from store.migrate import upgrade

    before, after = await upgrade(ctx.store.engine)
    if before == after:
        print(f"schema already at {after}; nothing to do")
    else:
        print(f"schema upgraded from {before or 'empty'} to {after}")
    return 0


async def cmd_web_login(ctx: Context, args: argparse.Namespace) -> int:
    """A single-use sign-in link for one principal: whoever runs this vouches for them."""
    from bot.durations import parse_duration
    from bot.signin import SignInLinks

    web = ctx.config.web
    if web is None:
        raise ConfigError("the web surface is off: add a [web] table to the configuration")
    links = SignInLinks(ctx.store, ctx.directory, ctx.clock, parse_duration(web.link_ttl))
    token = await links.make(args.as_)
    print(links.url(str(ctx.config.server.public_url), token))
    print(
        f"opens one browser session as {ctx.directory.name_of(args.as_)}, once, within "
        f"{web.link_ttl}",
        file=sys.stderr,
    )
    return 0


async def cmd_audit_verify(ctx: Context, args: argparse.Namespace) -> int:
    from bot import audit

    report = await audit.verify(ctx.store, args.id)
    if report.ok:
        print(
            f"audit chain intact: {report.events_checked} events across "
            f"{report.approvals_checked} approvals"
        )
        return 0
    for broken in report.problems:
        where = f"event {broken.event_id} (#{broken.seq})" if broken.event_id else "its trail"
        print(
            f"audit chain BROKEN at approval {broken.approval_id}, {where}: {broken.problem}",
            file=sys.stderr,
        )
    print(
        f"{len(report.problems)} of {report.approvals_checked} approvals broken "
        f"({report.events_checked} events checked)",
        file=sys.stderr,
    )
    return EXIT_REFUSED


async def cmd_outbox_list(ctx: Context, args: argparse.Namespace) -> int:
    states = ["dead"] if args.dead else ["queued", "dead"]
    async with ctx.store.read() as tx:
        jobs = await tx.list_jobs(states=states, limit=args.limit)
    if args.json:
        emit_json({"jobs": [job_record(job) for job in jobs]})
        return 0
    if not jobs:
        print("no dead outbox jobs" if args.dead else "outbox is empty")
        return 0
    header = f"{'id':>6}  {'kind':<12} {'state':<7} {'tries':>5}  {'next (UTC)':<16}"
    print(f"{header}  approval / last error")
    for job in jobs:
        print(
            f"{job.id:>6}  {job.kind:<12} {job.state:<7} {job.attempts:>5}  "
            f"{job.run_after:%Y-%m-%d %H:%M}  {job.approval_id or '-'}"
        )
        if job.last_error:
            print(f"{'':>8}{safe(job.last_error)[:200]}")
    return 0


async def cmd_outbox_retry(ctx: Context, args: argparse.Namespace) -> int:
    from bot.outbox.requeue import retry_dead_job

    try:
        job = await retry_dead_job(ctx.store, ctx.clock, args.id, by="the CLI")
    except NotFound as exc:
        raise NotFound(f"{exc.message}; see `signoff outbox list --dead`") from None
    print(f"outbox job {job.id} ({job.kind}) queued again with a fresh set of attempts")
    return 0
