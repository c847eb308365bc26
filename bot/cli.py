"""The `signoff` command.

The CLI runs with direct database access: it is the operator's own authority. Decisions name
the deciding principal with `--as NAME` and go through the Operator like every other surface
(recorded as `cli:NAME`). Expected failures print one line saying what happened and what to
do, and exit 1; usage errors exit 2.

Whatever a command alone needs is imported inside that command: every run pays for the
imports at the top of this module, and `approvals list` should not wait for the HTTP server,
the chat platforms' SDKs or the migration tool to load.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import re
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot import logs, visible
from bot.clock import utc_iso
from bot.errors import ConfigError, InvalidRequest, NotFound, NotPending, SignoffError
from bot.model import State, public_record

if TYPE_CHECKING:
    from datetime import datetime

    from bot.card import Card
    from bot.clock import Clock
    from bot.config import Config, TelegramConfig
    from bot.delegations import Delegations
    from bot.operator import Actor, Decision, Operator
    from bot.routing import Directory
    from store.records import Approval, Delegation, OutboxJob
    from store.repository import Store

log = logging.getLogger("signoff.cli")

EXIT_REFUSED = 1
_HASH = re.compile(r"^(?:sha256:)?([0-9a-f]{64})$")


@dataclass
class Context:
    config: Config
    store: Store
    directory: Directory
    clock: Clock

    @property
    def operator(self) -> Operator:
        from bot.operator import Operator

        return Operator(self.store, self.directory, self.clock)

    @property
    def delegations(self) -> Delegations:
        from bot.delegations import Delegations

        return Delegations(self.store, self.directory, self.clock)


Handler = Callable[[Context, argparse.Namespace], Awaitable[int]]


# -- output ------------------------------------------------------------------------------


def _safe(text: Any) -> str:
    """One line of agent-chosen text: it must not drive the terminal (ANSI escapes, carriage
    returns) nor reorder or hide what is shown (bot/visible.py, shared by every surface)."""
    return visible.one_line(text)


def _block(text: str) -> str:
    """Multi-line agent text, continuation lines indented so none can pose as a card line."""
    return "\n    ".join(_safe(line) for line in text.splitlines() or [""])


def _emit_json(document: Any) -> None:
    text = json.dumps(document, indent=2, ensure_ascii=False, default=str)
    # These can only occur inside strings here, where a \uXXXX escape is the same JSON value
    # and inert in a terminal.
    print(visible.in_json(text))


def render_card(card: Card) -> str:
    """The plain-text card: what a human reviews before deciding from the terminal."""
    lines = [f"{_safe(card.title)}", "=" * min(len(card.title), 72)]
    if card.summary:
        lines += [_block(card.summary), ""]
    lines.append(f"capability  {card.capability}    tool  {_safe(card.tool_name)}")
    for label, value in card.fields:
        lines.append(f"  {_safe(label)}: {_safe(value)}")
    if card.arguments:
        lines.append("arguments")
        lines += [f"  {_safe(key)} = {_safe(value)}" for key, value in card.arguments]
    if card.reason:
        lines.append(f"reason (from the agent, unverified): {_block(card.reason)}")
    lines.append(f"requested by  {_safe(card.requested_by or 'unknown')}")
    lines.append(f"assigned to   {card.assignee}")
    if card.assigned_note:
        lines.append(f"              ({_safe(card.assigned_note)})")
    lines.append(f"state         {card.state}")
    if card.progress:
        lines.append(f"votes         {card.progress}")
    if card.expires_in is not None:
        lines.append(f"expires       in {card.expires_in} ({card.expires_at:%Y-%m-%d %H:%M} UTC)")
    elif card.overdue:
        lines.append(
            f"expired       at {card.expires_at:%Y-%m-%d %H:%M} UTC "
            "(recorded as expired on the next decision attempt)"
        )
    if card.decided_by:
        decided = f"{card.decided_by} at {card.decided_at:%Y-%m-%d %H:%M} UTC"
        if card.decision_note:
            decided += f": {_block(card.decision_note)}"
        lines.append(f"decided by    {decided}")
    lines.append(f"id            {card.approval_id}")
    lines.append(f"hash          sha256:{card.hash}")
    return "\n".join(lines)


def _row(approval: Approval) -> str:
    title = (
        approval.presentation.get("title", "") if isinstance(approval.presentation, dict) else ""
    )
    return (
        f"{approval.id}  {approval.state:<15} {approval.capability:<24} "
        f"{approval.assignee:<16} {approval.expires_at:%Y-%m-%d %H:%M}  {_safe(title)[:40]}"
    )


# -- commands ----------------------------------------------------------------------------


async def cmd_db_upgrade(ctx: Context, args: argparse.Namespace) -> int:
    from store.migrate import upgrade

    before, after = await upgrade(ctx.store.engine)
    if before == after:
        print(f"schema already at {after}; nothing to do")
    else:
        print(f"schema upgraded from {before or 'empty'} to {after}")
    return 0


def _read_file(name: str) -> bytes:
    # A CLI run serves one request; blocking on a small file read is fine.
    try:
        return sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
    except OSError as exc:
        raise InvalidRequest(f"cannot read {name}: {exc.strerror}") from None


async def cmd_request(ctx: Context, args: argparse.Namespace) -> int:
    from bot.intake import create_request, parse_request

    parsed = parse_request(_read_file(args.file), ctx.config.server.max_body_bytes)
    result = await create_request(ctx.store, ctx.directory, ctx.clock, args.tenant, parsed)
    _emit_json(public_record(result.approval))
    note = "created" if result.created else "already existed (same tenant, run_id and hash)"
    print(f"approval {result.approval.id} {note}", file=sys.stderr)
    for replaced in result.superseded:
        print(f"approval {replaced.approval.id} superseded: same step, older call", file=sys.stderr)
    return 0


async def cmd_list(ctx: Context, args: argparse.Namespace) -> int:
    async with ctx.store.read() as tx:
        rows = await tx.list_approvals(tenant=args.tenant, state=args.state, limit=args.limit)
    if args.json:
        _emit_json({"approvals": [public_record(a) for a in rows]})
    elif not rows:
        print("no approvals" + (f" in state {args.state}" if args.state else ""))
    else:
        print(f"{'id':<36}  {'state':<15} {'capability':<24} {'assignee':<16} expires (UTC)")
        for approval in rows:
            print(_row(approval))
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
        _emit_json(public_record(approval))
    else:
        from bot.card import card_for

        # The terminal is where a human reviews before deciding: show every value in full.
        card = await card_for(ctx.store, ctx.directory, approval, ctx.clock.now(), max_value=None)
        print(render_card(card))
    return 0


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number above 0, got {text!r}")
    return int(text)


def _hash_arg(text: str) -> str:
    match = _HASH.match(text.strip().lower())
    if not match:
        raise argparse.ArgumentTypeError(
            "expected the full 64-hex-digit hash printed by `signoff approvals show`"
        )
    return match.group(1)


def _report(ctx: Context, args: argparse.Namespace, decision: Decision) -> int:
    approval = decision.approval
    if args.json:
        _emit_json(public_record(approval))
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
    decision = await ctx.operator.approve_shown(args.id, args.hash, _actor(args), args.note)
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


def _moment(ctx: Context, text: str | None, option: str) -> datetime | None:
    if text is None:
        return None
    from bot.durations import parse_moment

    try:
        return parse_moment(text, ctx.clock.now())
    except ValueError as exc:
        raise InvalidRequest(f"{option}: {exc}") from None


def _delegation_json(delegation: Delegation) -> dict[str, Any]:
    return {
        "id": delegation.id,
        "principal": delegation.principal,
        "delegate": delegation.delegate,
        "scope": delegation.scope,
        "starts_at": utc_iso(delegation.starts_at),
        "ends_at": utc_iso(delegation.ends_at) if delegation.ends_at else None,
        "note": delegation.note,
        "created_by": delegation.created_by,
        "revoked_at": utc_iso(delegation.revoked_at) if delegation.revoked_at else None,
        "revoked_by": delegation.revoked_by,
    }


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
        _emit_json(_delegation_json(delegation))
    else:
        print(f"delegation {delegation.id}: {ctx.delegations.describe(delegation)}")
    return 0


async def cmd_delegations_list(ctx: Context, args: argparse.Namespace) -> int:
    found = await ctx.delegations.list(include_past=args.all)
    if args.json:
        _emit_json([_delegation_json(d) for d in found])
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
        _emit_json({"jobs": [_job_record(job) for job in jobs]})
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
            print(f"{'':>8}{_safe(job.last_error)[:200]}")
    return 0


def _job_record(job: OutboxJob) -> dict[str, Any]:
    return {
        "id": job.id,
        "kind": job.kind,
        "approval_id": job.approval_id,
        "state": job.state,
        "attempts": job.attempts,
        "run_after": utc_iso(job.run_after),
        "locked_by": job.locked_by,
        "last_error": job.last_error,
        "delivery_id": job.payload.get("delivery_id"),
    }


async def cmd_outbox_retry(ctx: Context, args: argparse.Namespace) -> int:
    async with ctx.store.write() as tx:
        job = await tx.requeue_job(args.id, now=ctx.clock.now())
        current = None if job else await tx.get_job(args.id)
    if job is None:
        if current is None:
            raise NotFound(f"no outbox job with id {args.id}; see `signoff outbox list --dead`")
        raise NotPending(
            f"outbox job {args.id} is {current.state}, not dead; only dead jobs are retried",
            state=current.state,
        )
    print(f"outbox job {job.id} ({job.kind}) queued again with a fresh set of attempts")
    return 0


class _Counter(logging.Handler):
    """Counts the warnings logged while the checks run (they are printed as they come)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


async def cmd_config_check(config: Config, args: argparse.Namespace) -> int:
    """Every check `serve` makes when it starts, through the very functions it calls: a
    refusal there is a refusal here (exit 1); its warnings are printed on stderr."""
    from bot.api import tenant_keys
    from bot.app import check_config, prepare_schema
    from store.repository import Store

    logs.setup("text", logging.WARNING)
    counter = _Counter()
    logging.getLogger().addHandler(counter)
    check_config(config)
    tenant_keys(config.directory())  # serve reads the API keys when it builds the app
    store = Store.from_url(config.database_url)
    try:
        await prepare_schema(store, dry_run=True)
    finally:
        await store.close()
    await _check_telegram_chats(config)
    _emit_json(config.masked())
    warned = f", {counter.count} warning(s) above" if counter.count else ""
    print(f"config OK: serve would start{warned}", file=sys.stderr)
    return 0


async def _check_telegram_chats(config: Config) -> None:
    """Warn about a `telegram:CHAT_ID` notify target whose group Telegram has upgraded to a
    supergroup (asking Telegram; serve only finds out when a card is refused)."""
    if config.telegram is None:
        return
    from channels.telegram_setup import migrated_chats  # only Telegram deployments load PTB

    chats = sorted(
        {
            int(target.chat)
            for route in config.directory().routes
            for target in route.notify
            if target.surface == "telegram" and target.chat.lstrip("-").isdigit()
        }
    )
    if not chats:
        return
    try:
        moved = await migrated_chats(config.telegram, chats)
    except SignoffError as exc:
        log.warning("could not ask Telegram about the configured chats: %s", exc.message)
        return
    for old, new in moved.items():
        log.warning(
            "notify target telegram:%s is stale: that group became the supergroup %s; cards "
            "follow it, but write telegram:%s in the config",
            old,
            new,
            new,
        )


def _serve(config: Config, args: argparse.Namespace) -> int:
    from bot.workers import default_workers, serve

    if args.workers is not None:
        workers = args.workers
    else:  # polling runs in one process; otherwise one worker per core
        workers = 1 if args.telegram_polling else default_workers()
    return serve(config, args.listen, workers=workers, telegram_polling=args.telegram_polling)


def _telegram(config: Config) -> TelegramConfig:
    if config.telegram is None:
        raise ConfigError(
            "the config has no [telegram] table; add one (docs/channels.md shows how)"
        )
    return config.telegram


async def cmd_telegram_set_webhook(config: Config, args: argparse.Namespace) -> int:
    from channels.telegram_setup import set_webhook  # only Telegram commands load PTB

    url = args.url or f"{config.server.public_url.rstrip('/')}/telegram/webhook"
    if not url.startswith("https://"):
        print(
            f"signoff: warning: Telegram only delivers to https:// URLs; {url} will be "
            "refused unless a local Bot API server is in between",
            file=sys.stderr,
        )
    bot = await set_webhook(_telegram(config), url, drop_pending=args.drop_pending_updates)
    print(f"Telegram delivers updates for @{bot} to {url} (with the secret token)")
    return 0


async def cmd_telegram_delete_webhook(config: Config, args: argparse.Namespace) -> int:
    from channels.telegram_setup import delete_webhook

    bot = await delete_webhook(_telegram(config))
    print(f"Telegram no longer delivers updates for @{bot} to a webhook")
    return 0


def cmd_webhook_secret() -> int:
    """32 random bytes in the `whsec_<base64>` form every Standard Webhooks library reads."""
    import base64
    import secrets

    print("whsec_" + base64.b64encode(secrets.token_bytes(32)).decode())
    return 0


async def _work(config: Config, args: argparse.Namespace) -> None:
    from bot.app import run_worker

    await run_worker(config)


async def cmd_demo(config: Config, args: argparse.Namespace) -> None:
    """`signoff demo`: the real server on its own shipped config (bot/demo.toml) and a
    database of its own; the `config` of --config or $SIGNOFF_CONFIG is not used."""
    from bot.demo import run_demo  # only the demo reads its config and story

    if not args.verbose:
        # The links and the story are the output; the server's log would bury them.
        logging.getLogger().setLevel(logging.WARNING)
    await run_demo(args.listen, args.dir)


# -- wiring ------------------------------------------------------------------------------


def installed_version() -> str:
    """The version of the installed `signoff` distribution (what pip reports)."""
    from importlib import metadata

    try:
        return metadata.version("signoff")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


_JSON_HELP = "print JSON instead of text"
_LOG_HELP = "log lines as text (default) or one JSON object per line"


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config", default=argparse.SUPPRESS, help="config file (default: $SIGNOFF_CONFIG)"
    )
    parser = argparse.ArgumentParser(
        prog="signoff", description="Durable human approvals for AI agent tool calls."
    )
    parser.add_argument("--config", help="config file (default: $SIGNOFF_CONFIG)")
    parser.add_argument(
        "--version",
        action="version",
        version=f"signoff {installed_version()}",
        help="print the installed version and exit",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    db = commands.add_parser("db", help="database schema").add_subparsers(
        dest="db_command", required=True, metavar="COMMAND"
    )
    db.add_parser("upgrade", parents=[common], help="run migrations").set_defaults(
        handler=cmd_db_upgrade, check_schema=False
    )

    for name, process, help_text in (
        ("serve", _serve, "HTTP API + outbox runner + sweeper"),
        ("worker", _work, "outbox runner + sweeper only"),
    ):
        p = commands.add_parser(name, parents=[common], help=help_text)
        if name == "serve":
            p.add_argument("--listen", metavar="HOST:PORT", help="default: [server] listen")
            p.add_argument(
                "--telegram-polling",
                action="store_true",
                help="fetch Telegram updates instead of serving the webhook "
                "(development, one process, SQLite only)",
            )
            p.add_argument(
                "--workers",
                type=int,
                metavar="N",
                help="server processes sharing the port, each with its own database pool "
                "(default: one per core; one with --telegram-polling)",
            )
        p.add_argument("--log-format", choices=["text", "json"], default="text", help=_LOG_HELP)
        p.set_defaults(process=process)

    p = commands.add_parser(
        "demo",
        help="try it: the server on SQLite with sample requests, and sign-in links to them",
    )
    p.add_argument(
        "--listen",
        default="127.0.0.1:8700",
        metavar="HOST:PORT",
        help="default 127.0.0.1:8700; port 0 takes any free port",
    )
    p.add_argument(
        "--dir",
        type=Path,
        metavar="DIR",
        help="keep the demo database and config here (default: a temporary directory, "
        "deleted when the demo stops)",
    )
    p.add_argument("--verbose", action="store_true", help="also print the server's log")
    p.add_argument("--log-format", choices=["text", "json"], default="text", help=_LOG_HELP)
    p.set_defaults(process=cmd_demo)

    approvals = commands.add_parser("approvals", help="approval requests").add_subparsers(
        dest="approvals_command", required=True, metavar="COMMAND"
    )
    p = approvals.add_parser("request", parents=[common], help="create from a JSON file")
    p.add_argument("--tenant", required=True, help="the tenant asking (as configured)")
    p.add_argument("--file", required=True, help="request JSON (the API's create body); - = stdin")
    p.set_defaults(handler=cmd_request)

    p = approvals.add_parser("list", parents=[common], help="newest first")
    p.add_argument("--state", choices=[s.value for s in State], help="only this state")
    p.add_argument("--tenant", help="only this tenant")
    p.add_argument("--limit", type=_positive, default=100, help="at most N (default 100)")
    p.add_argument("--json", action="store_true", help=_JSON_HELP)
    p.set_defaults(handler=cmd_list)

    p = approvals.add_parser("show", parents=[common], help="print the card and the full hash")
    p.add_argument("id", help="the approval's id")
    p.add_argument("--json", action="store_true", help="print the record as JSON")
    p.set_defaults(handler=cmd_show)

    for name, handler, takes, help_text in (
        ("approve", cmd_approve, "--hash", "approve as a principal"),
        ("reject", cmd_reject, "--hash", "reject as a principal"),
        ("cancel", cmd_cancel, None, "cancel as a principal"),
        ("delegate", cmd_hand_off, "--to", "hand one pending request to another principal"),
    ):
        p = approvals.add_parser(name, parents=[common], help=help_text)
        p.add_argument("id", help="the approval's id")
        if takes == "--hash":
            p.add_argument("--hash", required=True, type=_hash_arg, help="the hash you reviewed")
        elif takes == "--to":
            p.add_argument("--to", required=True, metavar="NAME", help="who takes it over")
        p.add_argument("--as", dest="as_", required=True, metavar="NAME", help="your principal")
        p.add_argument("--note", help="why (recorded in the audit trail)")
        p.add_argument(
            "--break-glass",
            action="store_true",
            help="act without being an entitled approver (recorded in the audit trail)",
        )
        p.add_argument("--json", action="store_true", help="print the record as JSON")
        p.add_argument(
            "--log-format",
            choices=["text", "json"],
            default=None,
            help="also log the decision to stderr, as the server logs its own (json: one "
            "object per line, for the same log pipeline); default: no log line",
        )
        p.set_defaults(handler=handler)

    p = commands.add_parser(
        "delegate", parents=[common], help="let someone decide for a principal for a while"
    )
    p.add_argument("principal", metavar="NAME", help="the principal who is away")
    p.add_argument("--to", required=True, metavar="NAME", help="who decides in their place")
    p.add_argument(
        "--from", dest="from_", metavar="T", help="start (date, date and time, or 2d); default now"
    )
    p.add_argument("--until", metavar="T", help="end (same forms); default until revoked")
    p.add_argument("--scope", default="*", metavar="GLOB", help="capabilities, e.g. 'payments.*'")
    p.add_argument("--note", help="shown with the delegation")
    p.add_argument("--json", action="store_true", help=_JSON_HELP)
    p.set_defaults(handler=cmd_delegate)

    delegation_cmds = commands.add_parser("delegations", help="delegations").add_subparsers(
        dest="delegations_command", required=True, metavar="COMMAND"
    )
    p = delegation_cmds.add_parser("list", parents=[common], help="active and scheduled")
    p.add_argument("--all", action="store_true", help="also ended and revoked ones")
    p.add_argument("--json", action="store_true", help=_JSON_HELP)
    p.set_defaults(handler=cmd_delegations_list)
    p = delegation_cmds.add_parser("revoke", parents=[common], help="end one now")
    p.add_argument("id", help="the delegation's id")
    p.set_defaults(handler=cmd_delegations_revoke)

    outbox_cmds = commands.add_parser("outbox", help="webhook and card jobs").add_subparsers(
        dest="outbox_command", required=True, metavar="COMMAND"
    )
    p = outbox_cmds.add_parser("list", parents=[common], help="jobs not yet done, oldest first")
    p.add_argument("--dead", action="store_true", help="only jobs that used up their attempts")
    p.add_argument("--limit", type=_positive, default=100, help="at most N (default 100)")
    p.add_argument("--json", action="store_true", help=_JSON_HELP)
    p.set_defaults(handler=cmd_outbox_list)
    p = outbox_cmds.add_parser("retry", parents=[common], help="requeue a dead job")
    p.add_argument("id", type=_positive, help="the job's id (from `signoff outbox list`)")
    p.set_defaults(handler=cmd_outbox_retry)

    audit_cmds = commands.add_parser("audit", help="audit trail").add_subparsers(
        dest="audit_command", required=True, metavar="COMMAND"
    )
    p = audit_cmds.add_parser("verify", parents=[common], help="recompute the hash chains")
    p.add_argument("id", nargs="?", help="only this approval's chain (default: every one)")
    p.set_defaults(handler=cmd_audit_verify)

    telegram_cmds = commands.add_parser("telegram", help="Telegram bot setup").add_subparsers(
        dest="telegram_command", required=True, metavar="COMMAND"
    )
    p = telegram_cmds.add_parser(
        "set-webhook", parents=[common], help="deliver updates to [server] public_url"
    )
    p.add_argument("--url", help="default: [server] public_url + /telegram/webhook")
    p.add_argument(
        "--drop-pending-updates", action="store_true", help="discard updates waiting at Telegram"
    )
    p.set_defaults(offline=cmd_telegram_set_webhook)
    p = telegram_cmds.add_parser("delete-webhook", parents=[common], help="stop webhook delivery")
    p.set_defaults(offline=cmd_telegram_delete_webhook)

    web_cmds = commands.add_parser("web", help="the browser surface").add_subparsers(
        dest="web_command", required=True, metavar="COMMAND"
    )
    p = web_cmds.add_parser("login", parents=[common], help="print a single-use sign-in link")
    p.add_argument("--as", dest="as_", required=True, metavar="NAME", help="the principal")
    p.set_defaults(handler=cmd_web_login)

    commands.add_parser(
        "webhook-secret",
        help="print a new Standard Webhooks secret (whsec_...) for a tenant's webhook_secret_env",
    ).set_defaults(standalone=cmd_webhook_secret)

    config_cmds = commands.add_parser("config", help="configuration").add_subparsers(
        dest="config_command", required=True, metavar="COMMAND"
    )
    config_cmds.add_parser(
        "check",
        parents=[common],
        help="run every check serve runs at start (environment, database, schema); "
        "print the config, secrets masked",
    ).set_defaults(offline=cmd_config_check)
    return parser


async def _run(config: Config, args: argparse.Namespace) -> int:
    from bot.clock import SystemClock
    from store.migrate import ensure_current
    from store.repository import Store

    store = Store.from_url(config.database_url)
    try:
        if getattr(args, "check_schema", True):
            await ensure_current(store.engine)
        ctx = Context(config, store, config.directory(), SystemClock())
        handler: Handler = args.handler
        return await handler(ctx, args)
    finally:
        await store.close()


def main(argv: Sequence[str] | None = None) -> int:
    try:
        try:
            return _main(argv)
        finally:
            # Flushed here, inside the try: when the reader has gone (`| head -1`) this is the
            # write that fails, not the interpreter's own flush at exit, which cannot be caught.
            sys.stdout.flush()
    except BrokenPipeError:
        # As Python's docs advise (signal module, "Note on SIGPIPE"): point stdout at
        # /dev/null so nothing tries to write to the closed pipe again, and end quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_REFUSED


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "standalone", None) is not None:  # needs no configuration
        return int(args.standalone())
    try:
        # Loading the config loads SQLAlchemy and pydantic: thousands of long-lived objects,
        # which the collector would otherwise scan over and over while they are made (about
        # 20 ms of `approvals list`). It is back on before any command starts.
        gc.disable()
        try:
            from bot.config import load_config

            config = load_config(args.config)
        finally:
            gc.enable()
        if getattr(args, "process", None) is not None:
            logs.setup(args.log_format)
            if args.process is _serve:  # runs its own event loop, one per worker process
                return _serve(config, args)
            asyncio.run(args.process(config, args))
            return 0
        if getattr(args, "offline", None) is not None:  # needs no database
            return asyncio.run(args.offline(config, args))
        if getattr(args, "log_format", None) is not None:
            # A decision made here is logged like the server's, for monitoring to see.
            logs.setup(args.log_format)
        return asyncio.run(_run(config, args))
    except SignoffError as exc:
        # Messages quote input (unknown keys, bad values): never let it drive the terminal.
        print(f"signoff: {_safe(exc.message)}", file=sys.stderr)
        return EXIT_REFUSED
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
