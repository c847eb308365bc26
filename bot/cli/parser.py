"""The `signoff` command line: every command, its flags and its help, and which function
runs it.

A command sets one of four defaults, which say what it needs (`bot/cli/run.py` dispatches
on them): `handler` (a database session: `Context`), `process` (a long-running process with
its logging set up), `offline` (the configuration, no database session) or `standalone`
(nothing, not even the configuration).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from bot.cli.approvals import (
    cmd_answer,
    cmd_approve,
    cmd_bulk,
    cmd_cancel,
    cmd_edit,
    cmd_hand_off,
    cmd_list,
    cmd_reject,
    cmd_request,
    cmd_show,
)
from bot.cli.delegations import cmd_delegate, cmd_delegations_list, cmd_delegations_revoke
from bot.cli.deployment import (
    cmd_config_check,
    cmd_telegram_delete_webhook,
    cmd_telegram_set_webhook,
    cmd_webhook_secret,
)
from bot.cli.grants import cmd_grants_list, cmd_grants_revoke
from bot.cli.operations import (
    cmd_audit_verify,
    cmd_db_upgrade,
    cmd_outbox_list,
    cmd_outbox_retry,
    cmd_web_login,
)
from bot.cli.processes import cmd_demo, cmd_serve, cmd_worker
from bot.cli.retention import ArchiveFile
from bot.cli.retention import register as register_retention
from bot.model import State

_HASH = re.compile(r"^(?:sha256:)?([0-9a-f]{64})$")


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


def _edit_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="change or add an argument (VALUE is JSON where it parses: 120 is a number, "
        "hello a string, '\"120\"' the string 120)",
    )
    p.add_argument("--unset", action="append", metavar="KEY", help="remove an argument")
    p.add_argument(
        "--args", metavar="FILE", help="the edited arguments as a JSON object; - = stdin"
    )


def _grant_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--allow-for",
        metavar="DURATION",
        help="also allow the same call for this long (a standing grant; at most the route's "
        "max_grant_lifetime); every argument not named below must equal its value here",
    )
    p.add_argument("--allow-run", action="store_true", help="the grant: only in this run")
    p.add_argument(
        "--allow-equal",
        action="append",
        metavar="KEY",
        help="the grant: only where this argument equals its value here (the default)",
    )
    p.add_argument(
        "--allow-at-most",
        action="append",
        metavar="KEY",
        help="the grant: only where this number is at most its value here",
    )
    p.add_argument(
        "--allow-any",
        action="append",
        metavar="KEY",
        help="the grant: any value of this argument (unnamed ones must equal their value here)",
    )
    p.add_argument("--allow-uses", type=_positive, metavar="N", help="the grant: at most N uses")


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
        ("serve", cmd_serve, "HTTP API + outbox runner + sweeper"),
        ("worker", cmd_worker, "outbox runner + sweeper only"),
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
                "(default: 1; see docs/operations.md before adding more)",
            )
            p.add_argument(
                "--background-process",
                action=argparse.BooleanOptionalAction,
                help="run the outbox (cards, webhooks) and the sweeper in one process of "
                "their own beside the server processes, which then only serve requests "
                "(default: on PostgreSQL with two cores or more, not on SQLite)",
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
        ("approve", cmd_approve, "--hash", "approve as a principal (as edited: --set, --args)"),
        ("reject", cmd_reject, "--hash", "reject as a principal"),
        ("answer", cmd_answer, "--hash", "answer instead of deciding (the call does not run)"),
        ("cancel", cmd_cancel, None, "cancel as a principal"),
        ("delegate", cmd_hand_off, "--to", "hand one pending request to another principal"),
    ):
        p = approvals.add_parser(name, parents=[common], help=help_text)
        p.add_argument("id", help="the approval's id")
        if takes == "--hash":
            p.add_argument("--hash", required=True, type=_hash_arg, help="the hash you reviewed")
        elif takes == "--to":
            p.add_argument("--to", required=True, metavar="NAME", help="who takes it over")
        if name == "approve":
            _edit_arguments(p)
            _grant_arguments(p)
            p.add_argument(
                "--edited-hash",
                type=_hash_arg,
                help="the edited call's hash, as `signoff approvals edit` printed it",
            )
        if name == "answer":
            given = p.add_mutually_exclusive_group(required=True)
            given.add_argument("--text", help="your reply, for the agent to read")
            given.add_argument("--option", help="one of the question's options")
        p.add_argument("--as", dest="as_", required=True, metavar="NAME", help="your principal")
        if name != "answer":
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

    p = approvals.add_parser(
        "bulk", parents=[common], help="approve or reject many, each against its own hash"
    )
    p.add_argument("action", choices=["approve", "reject"], help="what to do with each")
    p.add_argument("--file", required=True, help="one 'ID HASH' per line; - = stdin")
    p.add_argument("--as", dest="as_", required=True, metavar="NAME", help="your principal")
    p.add_argument("--note", help="recorded with each decision")
    p.add_argument("--json", action="store_true", help=_JSON_HELP)
    p.set_defaults(handler=cmd_bulk, break_glass=False)

    p = approvals.add_parser(
        "edit", parents=[common], help="preview an edit: every change and the edited hash"
    )
    p.add_argument("id", help="the approval's id")
    _edit_arguments(p)
    p.add_argument("--json", action="store_true", help=_JSON_HELP)
    p.set_defaults(handler=cmd_edit)

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

    grant_cmds = commands.add_parser(
        "grants", help="standing grants given from cards"
    ).add_subparsers(dest="grants_command", required=True, metavar="COMMAND")
    p = grant_cmds.add_parser("list", parents=[common], help="live ones, newest first")
    p.add_argument("--all", action="store_true", help="also revoked, used up and ended ones")
    p.add_argument("--tenant", help="only this tenant")
    p.add_argument("--json", action="store_true", help=_JSON_HELP)
    p.set_defaults(handler=cmd_grants_list)
    p = grant_cmds.add_parser("revoke", parents=[common], help="end one now")
    p.add_argument("id", help="the grant's id")
    p.add_argument(
        "--as", dest="as_", required=True, metavar="NAME", help="who gave it, or an operator"
    )
    p.set_defaults(handler=cmd_grants_revoke)

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
    p.add_argument(
        "--archive",
        metavar="FILE",
        action=ArchiveFile,
        help="verify an archive or export file instead, offline (no database)",
    )
    p.set_defaults(handler=cmd_audit_verify)
    register_retention(db, audit_cmds, common)

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
    check = config_cmds.add_parser(
        "check",
        parents=[common],
        help="run every check serve runs at start (environment, database, schema)",
    )
    check.add_argument(
        "--show",
        action="store_true",
        help="also print the config as understood, as JSON, secrets masked",
    )
    check.set_defaults(offline=cmd_config_check)
    return parser
