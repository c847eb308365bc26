"""`signoff-mcp`: check a gateway policy, or serve the gateway.

    signoff-mcp check POLICY [--signoff-url URL] [--api-key-env VAR]
    signoff-mcp serve --policy POLICY [options] -- COMMAND [ARG...]     upstream on stdio
    signoff-mcp serve --policy POLICY [options] --upstream-command COMMAND [--upstream-arg ARG]...
    signoff-mcp serve --policy POLICY [options] --upstream-url URL      upstream over HTTP

The upstream command may also follow the options without `--` (some MCP hosts, such as the
MCP Inspector, drop `--` from the arguments they pass); `--upstream-command` with one
`--upstream-arg` per argument survives any host (write `--upstream-arg=-y` for an argument
that starts with `-`).

Options of `serve`:
    --transport stdio|streamable-http   how the gateway itself is served (default stdio)
    --host HOST --port PORT --path PATH  for streamable-http (127.0.0.1, 8765, /mcp)
    --server-name NAME                  overrides [gateway] server
    --signoff-url URL                   else $SIGNOFF_URL, else [gateway] signoff_url
    --api-key-env VAR                   else [gateway] api_key_env, else SIGNOFF_API_KEY
    --run-scope TEXT                    part of every run id: a new scope asks afresh for
                                        calls that were already decided (default: none)
    --wait SECONDS                      hold an `ask` call up to this long for a quick
                                        decision before answering "waiting" (default 0)
    --web-url URL                       else [gateway] web_url, else the signoff URL: the
                                        web inbox an `ask = "elicit"` call links
    --elicit-wait SECONDS               else [gateway] elicit_wait, else 600: how long a
                                        call offered to the host's user waits for a decision
    --lease DURATION                    claim lease for an approved call (server default)
    --call-timeout SECONDS              how long a forwarded call may wait for the upstream's
                                        answer (default 300); then its outcome is unknown
    --list-timeout SECONDS              how long one tools/list may take, every page
                                        (default 60)
    --log-level LEVEL                   stderr logging (default info)

Exit status: 0 fine, 1 a policy that does not validate (check) or a gateway that stopped on
an error (serve: the upstream could not be started or reached, ...), 2 a usage or setup error.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections.abc import Sequence

from signoff_client.mcp.policy import Policy, PolicyError, load_policy

__all__ = ["main"]

# The gateway's defaults (gateway.py), repeated here: `check` must work without the MCP SDK.
CALL_TIMEOUT = 300.0
LIST_TIMEOUT = 60.0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="signoff-mcp",
        description="An MCP gateway that asks signoff before gated upstream tools run.",
        epilog="Upstream on stdio: put its command after `--` (or after the options), or "
        "give it as --upstream-command with --upstream-arg.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="{check,serve}")
    check = commands.add_parser(
        "check",
        help="validate a policy file and print what it says; with a signoff URL and API key, "
        "also whether signoff has a route for each capability it asks for",
    )
    check.add_argument("policy", help="the policy file (TOML)")
    check.add_argument("--signoff-url", help="else $SIGNOFF_URL, else [gateway] signoff_url")
    check.add_argument("--api-key-env", help="else [gateway] api_key_env, else SIGNOFF_API_KEY")

    serve = commands.add_parser(
        "serve",
        help="serve the gateway in front of one upstream MCP server",
        usage="signoff-mcp serve --policy POLICY [options] (--upstream-url URL | "
        "--upstream-command COMMAND [--upstream-arg ARG]... | [--] COMMAND ...)",
    )
    serve.add_argument("--policy", required=True, help="the policy file (TOML)")
    serve.add_argument("--upstream-url", help="the upstream's streamable HTTP endpoint")
    serve.add_argument("--upstream-command", help="the upstream's program, speaking MCP on stdio")
    serve.add_argument(
        "--upstream-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one argument of --upstream-command (repeat, in order; --upstream-arg=-y for one "
        "starting with -)",
    )
    serve.add_argument(
        "command_words",
        nargs=argparse.REMAINDER,
        metavar="COMMAND",
        help="the upstream's command and arguments, after `--` or after the options",
    )
    serve.add_argument("--transport", choices=["stdio", "streamable-http"], default="stdio")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8765)
    serve.add_argument("--path", default="/mcp")
    serve.add_argument("--server-name")
    serve.add_argument("--signoff-url")
    serve.add_argument("--api-key-env")
    serve.add_argument("--run-scope")
    serve.add_argument("--wait", type=float, default=0.0)
    serve.add_argument("--web-url")
    serve.add_argument("--elicit-wait", type=float)
    serve.add_argument("--lease")
    serve.add_argument("--call-timeout", type=float, default=CALL_TIMEOUT)
    serve.add_argument("--list-timeout", type=float, default=LIST_TIMEOUT)
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `signoff-mcp` console script; returns the exit status."""
    args_in = list(sys.argv[1:] if argv is None else argv)
    upstream_command: list[str] = []
    if "--" in args_in:
        split = args_in.index("--")
        args_in, upstream_command = args_in[:split], args_in[split + 1 :]
    parser = _parser()
    args = parser.parse_args(args_in)

    if args.command == "check":
        if upstream_command:
            parser.error("check takes no upstream command")
        try:
            policy = load_policy(args.policy).with_overrides(api_key_env=args.api_key_env)
        except PolicyError as exc:
            print(f"signoff-mcp: {exc}", file=sys.stderr)
            return 1
        print(policy.summary())
        _check_routes(policy, args.signoff_url)
        return 0
    return _serve(parser, args, _upstream_command(parser, args, upstream_command))


def _check_routes(policy: Policy, signoff_url: str | None) -> None:
    """Ask signoff whether each capability the policy asks for has a route, when a URL and
    the API key are at hand; what has none is a warning (the policy itself is valid)."""
    url = signoff_url or os.environ.get("SIGNOFF_URL") or policy.signoff_url
    key = os.environ.get(policy.api_key_env)
    if not url or not key:
        print(
            "  routes: not checked (give --signoff-url or $SIGNOFF_URL, and set "
            f"${policy.api_key_env}, to ask signoff whether each capability has a route)"
        )
        return
    import asyncio

    from signoff_client.client import SignoffClient
    from signoff_client.mcp.routes import check_routes

    async def ask() -> list[str]:
        async with SignoffClient(url, key) as signoff:
            return await check_routes(policy, signoff)

    try:
        lines = asyncio.run(ask())
    except Exception as exc:  # unreachable, a refused key, an older server: only a warning
        print(f"signoff-mcp: warning: could not ask {url} about routes: {exc}", file=sys.stderr)
        return
    print(f"  routes at {url}:")
    for line in lines:
        if line.startswith("warning: "):
            print(f"signoff-mcp: {line}", file=sys.stderr)
        else:
            print(f"    {line}")


def _upstream_command(
    parser: argparse.ArgumentParser, args: argparse.Namespace, after_dashes: list[str]
) -> list[str]:
    """The stdio upstream's command, from whichever one form gave it: after `--`, after the
    options (a host dropped the `--`), or --upstream-command with its --upstream-arg."""
    if args.upstream_arg and not args.upstream_command:
        parser.error("--upstream-arg needs --upstream-command")
    given = [
        form
        for form in (
            after_dashes,
            args.command_words,
            [args.upstream_command, *args.upstream_arg] if args.upstream_command else [],
        )
        if form
    ]
    if len(given) > 1:
        parser.error(
            "give the upstream command once: after `--`, or as --upstream-command with "
            "--upstream-arg"
        )
    return given[0] if given else []


def _serve(parser: argparse.ArgumentParser, args: argparse.Namespace, command: list[str]) -> int:
    if bool(command) == bool(args.upstream_url):
        parser.error(
            "give the upstream as `--upstream-url URL`, as `--upstream-command COMMAND "
            "[--upstream-arg ARG]...`, or as `-- COMMAND ...`, one of them"
        )
    if args.wait < 0:
        parser.error("--wait must be zero or more seconds")
    if args.elicit_wait is not None and not 0 < args.elicit_wait < float("inf"):
        parser.error("--elicit-wait must be a number of seconds above 0")
    if args.web_url is not None and not re.match(r"https?://[^\s/]+", args.web_url):
        parser.error("--web-url must be an http(s) URL")
    for option in ("call_timeout", "list_timeout"):
        if not 0 < getattr(args, option) < float("inf"):
            parser.error(f"--{option.replace('_', '-')} must be a number of seconds above 0")
    if args.run_scope is not None and not re.fullmatch(r"[!-~]{1,64}", args.run_scope):
        parser.error("--run-scope must be 1-64 printable ASCII characters without spaces")
    logging.basicConfig(
        stream=sys.stderr,  # stdout may be the MCP channel itself
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        policy: Policy = load_policy(args.policy).with_overrides(
            server=args.server_name,
            api_key_env=args.api_key_env,
            web_url=args.web_url,
            elicit_wait=args.elicit_wait,
        )
    except PolicyError as exc:
        print(f"signoff-mcp: {exc}", file=sys.stderr)
        return 2
    signoff_url = args.signoff_url or os.environ.get("SIGNOFF_URL") or policy.signoff_url
    if not signoff_url:
        print(
            "signoff-mcp: no signoff URL: pass --signoff-url, set $SIGNOFF_URL, or set "
            "[gateway] signoff_url in the policy",
            file=sys.stderr,
        )
        return 2
    api_key = os.environ.get(policy.api_key_env)
    if not api_key:
        print(
            f"signoff-mcp: ${policy.api_key_env} is not set: it must hold the tenant's signoff "
            "API key",
            file=sys.stderr,
        )
        return 2

    try:
        import anyio

        from signoff_client.mcp.serve import Upstream, serve, upstream_environment
    except ImportError as exc:
        print(
            f"signoff-mcp: the MCP SDK is missing ({exc}); pip install 'signoff-client[mcp]'",
            file=sys.stderr,
        )
        return 2
    upstream = (
        Upstream(url=args.upstream_url)
        if args.upstream_url
        else Upstream(command=command, env=upstream_environment(policy))
    )

    async def run() -> None:
        await serve(
            policy,
            upstream,
            signoff_url=signoff_url,
            api_key=api_key,
            transport=args.transport,
            host=args.host,
            port=args.port,
            path=args.path,
            run_scope=args.run_scope,
            wait=args.wait,
            lease=args.lease,
            call_timeout=args.call_timeout,
            list_timeout=args.list_timeout,
        )

    try:
        anyio.run(run)
    except KeyboardInterrupt:
        return 0
    except Exception as exc:  # one line, not a trace of task groups; --log-level debug has it
        cause = _leaf(exc)
        logging.getLogger("signoff_client.mcp").debug("the gateway stopped", exc_info=exc)
        print(
            f"signoff-mcp: stopped: {type(cause).__name__}: {cause} "
            f"(upstream: {upstream.describe()})",
            file=sys.stderr,
        )
        return 1
    return 0


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside anyio's exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


if __name__ == "__main__":
    sys.exit(main())
