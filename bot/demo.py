"""`signoff demo`: the real server on the embedded SQLite default, a few realistic requests
filed through the HTTP API by a scripted agent, and sign-in links to look at them.

Nothing here is a mock. The server is assembled exactly as `signoff serve` assembles it
(bot.server's checks and schema, bot.bootstrap's core, bot.app's application) from the demo
config shipped in the package (bot/demo.toml); the agents speak the public HTTP API with
bearer keys; the human decisions the script makes for its story go through the core's
Operator, as `signoff approvals approve` does; the `interrupted_side_effect` request is
raised by signoff's own sweeper when an approved call's execution lease lapses without a
report, because the agent "crashed" after claiming it.

The scripted agent (bot/demo_agent.py) also receives the decision webhooks (verified to
Standard Webhooks) and runs what is approved: claim, "execute", report the outcome. So a
decision made in the browser shows up in the terminal a moment later. The `sandbox` tenant
has no webhook: its key is printed for the user's own agent, whose requests the scripted
agent never claims.

Secrets the config names (`*_env`) that are unset are made up for this run. The database and
the config copy live in a new temporary directory, deleted when the demo stops, unless
`--dir` names a directory to keep them in.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from importlib import resources
from pathlib import Path
from typing import Any, TextIO

from aiohttp import web

from bot.app import build_app
from bot.bootstrap import Core, bootstrap
from bot.config import Config, parse_config
from bot.demo_agent import Agent, DemoFailed
from bot.demo_mailbox import MAILBOX_PATH, Mailbox
from bot.durations import parse_duration
from bot.errors import ConfigError
from bot.operator import Actor
from bot.routing import Directory
from bot.server import check_channels, prepare_schema
from bot.signin import SignInLinks
from store.repository import Store

log = logging.getLogger("signoff.demo")

DEMO_CONFIG = "demo.toml"
DATABASE = "signoff-demo.db"
CONFIG_COPY = "signoff-demo.toml"
AGENT_PATH = "/webhooks/signoff"
# The approver and the operator the demo prints sign-in links for.
APPROVER = "bob"
OPERATOR = "alice"
OPERATOR_LANDING = "?next=/dashboard"
# The claim the "crashing" agent takes: short, so the lapse shows up within seconds.
CRASH_LEASE = "2s"
FOLLOW_UP_TIMEOUT = 30.0


# -- the requests the scripted agents file -------------------------------------------------------
#
# As data, in demo_requests.json beside this module: the story's wording is edited there.


def demo_requests() -> dict[str, dict[str, Any]]:
    """The request bodies the scripted agents file, by name."""
    text = resources.files("bot").joinpath("demo_requests.json").read_text("utf-8")
    requests: dict[str, dict[str, Any]] = json.loads(text)
    return requests


# -- configuration and secrets -------------------------------------------------------------------


def shipped_config_text() -> str:
    """The demo config as shipped in the package."""
    return resources.files("bot").joinpath(DEMO_CONFIG).read_text("utf-8")


def _replace(text: str, key: str, value: str) -> str:
    """Set every `key = "..."` line of the shipped config to `value`."""
    pattern = re.compile(rf'^({re.escape(key)} = )"[^"\n]*"', re.MULTILINE)
    new, count = pattern.subn(lambda m: m.group(1) + json.dumps(value), text)
    if count == 0:
        raise DemoFailed(f"the demo config has no {key} line; is bot/{DEMO_CONFIG} intact?")
    return new


def demo_config_text(
    *,
    listen: str,
    public_url: str,
    database_path: Path,
    agent_url: str,
    mail_port: int | None = None,
) -> str:
    """The shipped demo config with this run's addresses and database filled in."""
    text = shipped_config_text()
    if mail_port is not None:
        text, count = re.subn(r"^port = [0-9]+$", f"port = {mail_port}", text, flags=re.M)
        if count != 1:
            raise DemoFailed(
                f"the demo config has no [email] port line; is bot/{DEMO_CONFIG} intact?"
            )
    text = _replace(text, "listen", listen)
    text = _replace(text, "public_url", public_url)
    text = _replace(text, "url", f"sqlite+aiosqlite:///{database_path}")
    return _replace(text, "webhook_url", agent_url)


def made_up_secrets(config: Config, environ: Any = os.environ) -> dict[str, str]:
    """A value for every secret the demo config names that is unset in `environ`, set there
    too (the server reads them from the environment); the ones it made up, by variable."""
    made: dict[str, str] = {}

    def need(variable: str | None, value: str) -> None:
        if variable and not environ.get(variable) and variable not in made:
            made[variable] = value
            environ[variable] = value

    if config.web is not None:
        need(config.web.secret_env, secrets.token_urlsafe(32))
    for tenant in config.tenants:
        need(tenant.api_key_env, f"demo-{tenant.name}-{secrets.token_urlsafe(12)}")
        variables = tenant.webhook_secret_env
        for variable in [variables] if isinstance(variables, str) else variables or []:
            need(variable, "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode())
    return made


def _bind(listen: str) -> socket.socket:
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    try:
        return socket.create_server((host, int(port)))
    except OSError as exc:
        raise DemoFailed(
            f"cannot listen on {listen}: {exc.strerror}. Is another signoff running there? "
            "Pass --listen 127.0.0.1:0 to take any free port."
        ) from None


def _address(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# -- the story -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Filed:
    tenant: str
    record: dict[str, Any]
    note: str

    @property
    def title(self) -> str:
        return str(self.record["presentation"]["title"])


async def _wait_follow_up(agent: Agent, tenant: str, approval_id: str) -> dict[str, Any]:
    """Poll the agent API until the sweeper has raised the lapsed call's follow-up."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + FOLLOW_UP_TIMEOUT
    while True:
        record = await agent.get(tenant, approval_id)
        if record.get("follow_up_id"):
            return await agent.get(tenant, record["follow_up_id"])
        if loop.time() > deadline:
            raise DemoFailed(
                f"the sweeper did not raise the interrupted_side_effect request within "
                f"{FOLLOW_UP_TIMEOUT:.0f} s (approval {approval_id} is {record['state']})"
            )
        await asyncio.sleep(0.2)


async def file_requests(agent: Agent, core: Core) -> list[Filed]:
    """What happened this morning, replayed: the requests waiting in the inboxes now."""
    now = core.clock.now()
    # Carol is at a conference this week: Bob decides her contracts meanwhile.
    await core.delegations.create(
        "carol",
        "bob",
        created_by="cli",
        ends_at=now + timedelta(days=5),
        scope="contracts.*",
        note="Carol is at a conference this week",
    )
    operator = core.operator
    alice = Actor(principal="alice", via="cli")
    bob = Actor(principal="bob", via="cli")
    requests = demo_requests()
    filed: list[Filed] = []

    refund = await agent.file("support", requests["refund"])
    filed.append(Filed("support", refund, "for group finance (Alice or Bob)"))

    question = await agent.file("support", requests["question"])
    filed.append(Filed("support", question, "a question for group finance: pick an answer"))

    contract = await agent.file("ops", requests["contract_cancellation"])
    filed.append(Filed("ops", contract, "for Carol, who is away: delegated to Bob"))

    migration = await agent.file("ops", requests["migration"])
    await operator.approve_shown(migration["id"], migration["hash"], alice, "Dry run was clean")
    filed.append(Filed("ops", migration, "2 of 3 needed: Alice approved, one more to go"))

    credit = await agent.file("support", requests["store_credit"])
    await operator.reject_shown(
        credit["id"], credit["hash"], bob, "Duplicate of the refund in order 8790"
    )
    filed.append(Filed("support", credit, "Bob rejected it at the CLI"))

    # Alice approves a payout; the agent claims it with a short lease and "crashes" before
    # reporting. When the lease lapses, signoff's sweeper records outcome_unknown and raises
    # an interrupted_side_effect request: did the transfer happen? should it run again?
    invoice = await agent.file("support", requests["invoice"])
    agent.crashing.add(invoice["id"])
    await operator.approve_shown(invoice["id"], invoice["hash"], alice, "Matches the PO")
    await agent.claim("support", invoice["id"], lease=CRASH_LEASE)
    filed.append(
        Filed(
            "support",
            invoice,
            f"Alice approved it; the agent claimed it ({CRASH_LEASE} lease) "
            "and crashed before reporting",
        )
    )
    follow_up = await _wait_follow_up(agent, "support", invoice["id"])
    filed.append(
        Filed("support", follow_up, "raised by signoff when that lease lapsed: run it again?")
    )
    return filed


# -- running it ----------------------------------------------------------------------------------


@contextlib.contextmanager
def _workdir(keep: Path | None) -> Iterator[tuple[Path, bool]]:
    """Where the database and the config copy go, and whether it is a temporary directory
    (deleted when the demo stops)."""
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        if (keep / DATABASE).exists():
            raise DemoFailed(
                f"{keep / DATABASE} exists from an earlier demo; remove it or pass another --dir"
            )
        yield keep.resolve(), False
        return
    path = Path(tempfile.mkdtemp(prefix="signoff-demo-"))
    try:
        yield path, True
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _stop_on_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)


async def run_demo(
    listen: str = "127.0.0.1:8700", keep: Path | None = None, out: TextIO = sys.stdout
) -> None:
    """Run the demo until SIGINT or SIGTERM (Ctrl-C)."""
    stop = asyncio.Event()
    _stop_on_signals(stop)
    # $SIGNOFF_DATABASE_URL would override the demo's own database: the demo never touches
    # a database it did not create.
    os.environ.pop("SIGNOFF_DATABASE_URL", None)
    with (
        _workdir(keep) as (workdir, temporary),
        _bind(listen) as server_sock,
        _bind(f"{listen.rpartition(':')[0]}:0") as agent_sock,
        _bind(f"{listen.rpartition(':')[0]}:0") as mail_sock,
    ):
        address = _address(server_sock)
        public_url = f"http://{address}"
        text = demo_config_text(
            listen=address,
            public_url=public_url,
            database_path=workdir / DATABASE,
            agent_url=f"http://{_address(agent_sock)}{AGENT_PATH}",
            mail_port=mail_sock.getsockname()[1],
        )
        config_path = workdir / CONFIG_COPY
        config_path.write_text(text, "utf-8")
        config = parse_config(tomllib.loads(text), str(config_path))
        made = made_up_secrets(config)
        # The list wears the web pages' stylesheet, as the server serves it (its static path
        # is the web surface's, channels/web/site.py).
        mailbox = Mailbox(stylesheet=f"{public_url}/web/static/signoff.css")
        await mailbox.start(mail_sock)
        try:
            await _serve(
                config,
                config_path,
                temporary,
                (server_sock, agent_sock),
                public_url,
                made,
                stop,
                out,
                mailbox,
            )
        finally:
            await mailbox.close()


async def _serve(
    config: Config,
    config_path: Path,
    temporary: bool,
    socks: tuple[socket.socket, socket.socket],
    public_url: str,
    made: dict[str, str],
    stop: asyncio.Event,
    out: TextIO,
    mailbox: Mailbox,
) -> None:
    server_sock, agent_sock = socks
    web_table = config.surface_table("web")
    if web_table is None:
        raise ConfigError(f"{config_path}: the demo needs the [web] table")
    check_channels(config)
    store = Store.from_url(config.database_url)
    runners: list[web.AppRunner] = []
    agent = Agent(
        public_url,
        keys={t.name: os.environ[t.api_key_env] for t in config.tenants if t.api_key_env},
        webhook_secrets={
            t.name: os.environ[str(t.webhook_secret_env)]
            for t in config.tenants
            if isinstance(t.webhook_secret_env, str)
        },
        out=out,
    )
    await agent.start()
    try:
        await prepare_schema(store)
        # The server, as `signoff serve` builds it (bot.server.run_server), on the bound socket.
        core = bootstrap(config, store)
        app = build_app(config, store, core=core)
        server = web.AppRunner(app, access_log=None, shutdown_timeout=5.0)
        await server.setup()
        runners.append(server)
        await web.SockSite(server, server_sock).start()
        log.info("signoff listening on %s", public_url)
        hooks = web.Application()
        hooks.router.add_post(AGENT_PATH, agent.webhook)
        mailbox.add_routes(hooks)
        agent_runner = web.AppRunner(hooks, access_log=None, shutdown_timeout=1.0)
        await agent_runner.setup()
        runners.insert(0, agent_runner)
        await web.SockSite(agent_runner, agent_sock).start()

        mail = f"http://{_address(agent_sock)}{MAILBOX_PATH}"
        _print_header(out, public_url, config, config_path, temporary, made, mail)
        directory, clock = core.directory, core.clock
        story = asyncio.create_task(file_requests(agent, core))
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({story, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not story.done():
            story.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await story
            return
        stopping.cancel()
        # As they stand now, after the story's decisions and the lease's lapse.
        filed = [
            Filed(f.tenant, await agent.get(f.tenant, f.record["id"]), f.note)
            for f in story.result()
        ]
        link_ttl = parse_duration(web_table.link_ttl)  # type: ignore[attr-defined]
        links = SignInLinks(store, directory, clock, link_ttl)
        approver = links.url(public_url, await links.make(APPROVER))
        # The operator's link lands on her dashboard (the web surface honours `?next=`).
        operator = links.url(public_url, await links.make(OPERATOR)) + OPERATOR_LANDING
        _print_story(out, filed, directory)
        _print_links(out, directory, config, config_path, approver, operator, public_url, made)
        await stop.wait()
    finally:
        for runner in runners:
            await runner.cleanup()
        await agent.close()
        await store.close()
    print("\nsignoff demo stopped", file=out, flush=True)


def _print_header(
    out: TextIO,
    public_url: str,
    config: Config,
    config_path: Path,
    temporary: bool,
    made: dict[str, str],
    mailbox_url: str,
) -> None:
    lines = [
        "signoff demo",
        f"  server    {public_url}   (the same server `signoff serve` runs)",
        f"  database  {config.database_url.removeprefix('sqlite+aiosqlite:///')}"
        + ("   (deleted when the demo stops; --dir DIR keeps it)" if temporary else ""),
        f"  config    {config_path}",
        f"  mailbox   {mailbox_url}   (the cards finance gets by mail)",
    ]
    if made:
        lines.append(f"  made-up secrets for this run: {', '.join(sorted(made))}")
    lines += ["", "The scripted agents file their requests through the HTTP API..."]
    print("\n".join(lines), file=out, flush=True)


def signoff_command() -> str:
    """How to run this very `signoff` from another terminal: the script beside the running
    interpreter (`.venv/bin/signoff` when the venv is under the working directory), so the
    line works without an activated virtualenv; plain `signoff` when there is no such
    script (run as `python -m bot.cli`)."""
    script = Path(sys.executable).parent / "signoff"
    if not script.is_file():
        return "signoff"
    with contextlib.suppress(ValueError):
        return str(script.relative_to(Path.cwd()))
    return str(script)


def _print_story(out: TextIO, filed: list[Filed], directory: Directory) -> None:
    for item in filed:
        record = item.record
        # The kind as the API names it; a plain tool call goes unlabelled.
        kind = f"{record['kind']}, " if record["kind"] != "tool_call" else ""
        print(f"  {item.tenant:<8} {item.title}", file=out)
        print(f"  {'':<8} {kind}{record['state']}: {item.note}", file=out)
    print(file=out, flush=True)


def _print_links(
    out: TextIO,
    directory: Directory,
    config: Config,
    config_path: Path,
    approver: str,
    operator: str,
    public_url: str,
    made: dict[str, str],
) -> None:
    assert config.web is not None
    # The tenant without a webhook is the user's: the demo's agent never claims its requests.
    yours = next(t for t in config.tenants if t.webhook_url is None)
    variable = yours.api_key_env or ""
    # A key made up for this run is shown; one the user set stays in their environment.
    key = made.get(variable, f"${variable}")
    lines = [
        f"Sign in (each link opens one browser session, once, within {config.web.link_ttl}):",
        f"  approver  {directory.name_of(APPROVER):<10} {approver}",
        f"  operator  {directory.name_of(OPERATOR):<10} {operator}   (opens the dashboard)",
        "",
        "More links, from another terminal:",
        f"  SIGNOFF_CONFIG={config_path} {signoff_command()} web login --as carol",
        f"Your own agent, as tenant {yours.name!r} (the demo's agent leaves its requests alone:",
        "once one is approved, you claim and run it):",
        f"  curl -H 'Authorization: Bearer {key}' {public_url}/v1/approvals",
        "",
        "Decide in the browser: the demo agent prints what it does with each decision.",
        "Ctrl-C stops the demo.",
        "",
    ]
    print("\n".join(lines), file=out, flush=True)
