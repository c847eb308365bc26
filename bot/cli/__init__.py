"""The `signoff` command.

The CLI runs with direct database access: it is the operator's own authority. Decisions name
the deciding principal with `--as NAME` and go through the Operator like every other surface
(recorded as `cli:NAME`). Expected failures print one line saying what happened and what to
do, and exit 1; usage errors exit 2.

Whatever a command alone needs is imported inside that command: every run pays for the
imports at the top of this package's modules, and `approvals list` should not wait for the
HTTP server, the chat platforms' SDKs or the migration tool to load
(tests/acceptance/test_cli_startup.py holds it to that).

    run.py          main: parse, load the config, dispatch, exit statuses
    parser.py       every command and flag, and which function runs it
    context.py      what a command with a database session is handed
    rendering.py    the plain-text card, list rows, JSON
    approvals.py    approvals request, list, show, approve, reject, cancel, delegate
    delegations.py  delegate, delegations list and revoke
    operations.py   db upgrade, outbox list and retry, audit verify, web login
    retention.py    db archive, backup and restore, audit export, audit verify --archive
    deployment.py   config check, telegram set-webhook and delete-webhook, webhook-secret
    processes.py    serve, worker, demo
"""

import signal


def _stopped_while_starting(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


# First, before the imports below: a container's PID 1 ignores a signal it has no handler
# for, so `podman stop` / `docker stop` of a `signoff serve` still importing or migrating
# would wait out its timeout and SIGKILL. Until a command installs its own handler (serve,
# once it listens), SIGTERM ends it at once, as it would any other process.
signal.signal(signal.SIGTERM, _stopped_while_starting)

from bot.cli.run import main  # noqa: E402

__all__ = ["main"]
