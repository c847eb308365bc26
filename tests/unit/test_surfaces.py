"""The surface registry (bot/surfaces.py): every surface the core serves is declared there,
and a new one plugs in without a change to the core.

Proves: a notify target naming no registered surface is refused with the message that names
every valid form; a surface registered by a test (memo, made up, declared here and nowhere
else) gets its config table, its notify targets, its principals' accounts (validated and
refused as it says, one account proving one person), the lookup by account, its channel
built by its own factory, started and stopped with the server and serving its own route, and
cards posted to it, personal ones included; and no core module in bot/ names Slack or
Telegram outside the registry's list of declaration modules and the command line's own
Telegram commands.
"""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import aiohttp
import pytest
from aiohttp import web
from pydantic import Field

from bot import surfaces
from bot.app import build_app
from bot.bootstrap import bootstrap
from bot.card import Card
from bot.clock import FakeClock
from bot.config import EnvVar, Strict, parse_config
from bot.errors import ConfigError
from bot.intake import create_request, validate_request
from bot.outbox import jobs
from bot.outbox.jobs import JobKind
from bot.server import check_channels
from bot.surfaces import StartupCheck, Surface
from bot.target import Target
from channels.base import Channel, MessageRef
from store.repository import Store

ROOT = Path(__file__).resolve().parents[2]

# A deployment of its own (no shared sample): its words are what these tests check.
CONFIG: dict[str, Any] = {
    "tenants": [{"name": "acme"}],
    "principals": {
        "alice": {"name": "Alice Ng", "slack": "U0ALICE", "telegram": 111},
        "bob": {"name": "Bob Stone", "slack": "U0BOB"},
        "carol": {"name": "Carol Diaz"},
        "sam": {"name": "Sam Requester"},
    },
    "groups": {"finance": {"members": ["alice", "bob", "sam"]}},
    "routes": [{"tenant": "acme", "capability": "payments.*", "approvers": ["group:finance"]}],
}
REFUND = {
    "run_id": "run-1",
    "capability": "payments.refund",
    "tool": {"name": "stripe.refunds.create", "arguments": {"charge": "ch_1", "amount": 12000}},
    "presentation": {"title": "Refund €120.00"},
    "requested_by": "sam",
}

TODAYS_FORMS = (
    "slack:CHANNEL, slack:dm, telegram:CHAT_ID, telegram:CHAT_ID/TOPIC_ID, telegram:dm, web, "
    "email:dm or email:NAME"
)


class MemoConfig(Strict):
    sender: str = "signoff@example.com"
    password_env: EnvVar = "MEMO_PASSWORD"


class FakeMemo:
    """A memo channel that keeps what it was asked to send."""

    name = "memo"

    def __init__(self, table: MemoConfig) -> None:
        self.table = table
        self.cards: list[tuple[str, str]] = []  # (target, approval id)
        self.running = False

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/memo/bounces", self.bounces)

    async def bounces(self, request: web.Request) -> web.Response:
        return web.Response(text=f"bounces for {self.table.sender}")

    async def start(self) -> None:
        self.running = True

    async def stop(self) -> None:
        self.running = False

    async def post_card(self, card: Card, target: Target) -> MessageRef:
        self.cards.append((str(target), card.approval_id))
        return MessageRef("memo", target.where, f"<{len(self.cards)}@example.com>")

    async def update_card(self, ref: MessageRef, card: Card) -> None:
        return None

    async def send_notice(self, target: Target, text: str) -> None:
        return None

    async def send_reply(self, ref: MessageRef, text: str) -> None:
        return None


def _refused(address: str) -> str | None:
    if address.startswith("noreply@"):
        return f"{address} is nobody's mailbox; use the person's own address"
    return None


def _check(table: MemoConfig | None, options: StartupCheck) -> None:
    if table is not None and table.sender.endswith(".invalid"):
        raise ConfigError("[memo] sender: mail from a .invalid domain is never delivered")


MEMO = Surface(
    name="memo",
    config=MemoConfig,
    factory=lambda services: FakeMemo(services.table),
    target_forms=("memo:LIST", "memo:dm"),
    target_pattern=r"dm|[a-z][a-z0-9-]*",
    account=Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+$")],
    refuse_account=_refused,
    check=_check,
)


@pytest.fixture
def memo() -> Iterator[Surface]:
    with surfaces.registering(MEMO) as surface:
        yield surface


def _error(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    return info.value.message


def _memo_config(**principal_accounts: str) -> dict[str, Any]:
    data = copy.deepcopy(CONFIG)
    data["memo"] = {"sender": "approvals@example.com"}
    for key, address in principal_accounts.items():
        data["principals"][key]["memo"] = address
    data["routes"][0]["notify"] = ["memo:dm", "memo:finance-desk"]
    return data


# -- what the built-in surfaces keep saying ----------------------------------------------------


def test_a_target_on_an_unregistered_surface_is_refused_naming_every_valid_form() -> None:
    data = copy.deepcopy(CONFIG)
    data["routes"][0]["notify"] = ["slack:dm", "memo:x"]
    assert _error(data) == f"config: routes.0: notify target 'memo:x': expected {TODAYS_FORMS}"


def test_the_built_in_surfaces_are_slack_telegram_web_and_email() -> None:
    assert [s.name for s in surfaces.registered()] == ["slack", "telegram", "web", "email"]
    assert [s.name for s in surfaces.personal()] == ["slack", "telegram", "email"]
    assert surfaces.target_forms() == TODAYS_FORMS


@pytest.mark.parametrize(
    "target", ["web:inbox", "slack:", "slack", "telegram:dm/1", "slack:c0lower", "Web"]
)
def test_a_malformed_target_on_a_known_surface_is_refused(target: str) -> None:
    data = copy.deepcopy(CONFIG)
    data["routes"][0]["notify"] = [target]
    assert f"notify target {target!r}: expected {TODAYS_FORMS}" in _error(data)


def test_a_principal_may_not_have_an_account_on_a_surface_without_accounts() -> None:
    data = copy.deepcopy(CONFIG)
    data["principals"]["alice"]["web"] = "alice"
    assert _error(data) == "config: principals.alice.web: unknown key"


# -- a surface added by registering it, and nothing else -----------------------------------


def test_a_registered_surface_has_its_table_targets_and_accounts(memo: Surface) -> None:
    config = parse_config(_memo_config(alice="alice@example.com", bob="bob@example.com"))
    table = config.surface_table("memo")
    assert isinstance(table, MemoConfig) and table.sender == "approvals@example.com"
    directory = config.directory()
    assert [str(t) for t in directory.routes[0].notify] == ["memo:dm", "memo:finance-desk"]
    alice = directory.principal("alice")
    assert directory.principal_for("memo", "alice@example.com") == alice
    assert alice.accounts == {"slack": "U0ALICE", "telegram": 111, "memo": "alice@example.com"}
    # One lookup by (surface, account): an address is no Slack id, nor anyone unconfigured.
    assert directory.principal_for("slack", "alice@example.com") is None
    assert directory.principal_for("memo", "mallory@example.com") is None
    assert directory.reaches("bob", "memo") and not directory.reaches("sam", "memo")
    # Every valid form is named, the new surface's included.
    assert surfaces.target_forms().endswith("web, email:dm, email:NAME, memo:LIST or memo:dm")


def test_a_registered_surface_validates_and_refuses_accounts_as_it_declares(
    memo: Surface,
) -> None:
    assert "principals.alice.memo: String should match pattern" in _error(
        _memo_config(alice="not an address")
    )
    assert _error(_memo_config(alice="noreply@example.com")) == (
        "config: principals.alice.memo: noreply@example.com is nobody's mailbox; use the "
        "person's own address"
    )
    assert _error(_memo_config(alice="desk@example.com", bob="desk@example.com")) == (
        "config: principals.bob.memo: 'desk@example.com' is also principals.alice.memo"
    )
    assert _error({**_memo_config(), "memo": {"sendr": "x@example.com"}}) == (
        "config: memo.sendr: unknown key, did you mean sender?"
    )
    data = _memo_config()
    data["routes"][0]["notify"] = ["memo:Finance"]
    assert "notify target 'memo:Finance': expected" in _error(data)


def test_without_the_registration_its_table_and_accounts_are_unknown_keys() -> None:
    assert _error({**copy.deepcopy(CONFIG), "memo": {}}) == "config: memo: unknown key"
    data = copy.deepcopy(CONFIG)
    data["principals"]["alice"]["memo"] = "alice@example.com"
    assert _error(data) == "config: principals.alice.memo: unknown key"


def test_a_registered_surface_checks_its_own_credentials(memo: Surface) -> None:
    config = parse_config({**_memo_config(), "memo": {"sender": "x@mail.invalid"}})
    with pytest.raises(ConfigError) as info:
        check_channels(config)
    assert info.value.message == "[memo] sender: mail from a .invalid domain is never delivered"


async def test_a_registered_surface_gets_its_channel_and_its_cards(
    memo: Surface, store: Store, clock: FakeClock
) -> None:
    config = parse_config(_memo_config(alice="alice@example.com", carol="carol@example.com"))
    core = bootstrap(config, store, clock=clock)
    channel = core.channels["memo"]
    assert isinstance(channel, FakeMemo) and isinstance(channel, Channel)
    assert list(core.channels) == ["memo"]  # no other surface has a table here

    created = await create_request(store, core.directory, clock, "acme", validate_request(REFUND))
    approval = created.approval
    runner = core.outbox_runner(core.handlers(kinds=[JobKind.POST_CARD]))
    while await runner.run_once():
        pass
    # `memo:dm`: each approver of group finance with an address (sam has none); and the list.
    assert sorted(channel.cards) == [
        ("memo:@alice", approval.id),
        ("memo:finance-desk", approval.id),
    ]
    # Handed to carol (say, an escalation): her personal card goes out on memo too.
    async with store.write() as tx:
        await jobs.enqueue_personal_cards(tx, core.directory, approval, "carol", clock.now())
    while await runner.run_once():
        pass
    assert ("memo:@carol", approval.id) in channel.cards

    # The server adds its route and runs its lifecycle, as it does every channel's.
    app = build_app(config, store, core=core, background=False)
    site = web.AppRunner(app, access_log=None)
    await site.setup()
    try:
        assert channel.running
        await web.TCPSite(site, "127.0.0.1", 0).start()
        url = f"http://127.0.0.1:{site.addresses[0][1]}/memo/bounces"
        async with aiohttp.ClientSession() as http, http.get(url) as response:
            assert await response.text() == "bounces for approvals@example.com"
    finally:
        await site.cleanup()
    assert not channel.running


def test_a_surface_may_not_be_registered_twice_nor_shadow_a_config_key() -> None:
    with pytest.raises(ValueError, match="registered already"):
        with surfaces.registering(Surface("slack", MemoConfig, FakeMemo, ("slack:X",))):
            pass
    with surfaces.registering(Surface("routes", MemoConfig, FakeMemo, ("routes",))):
        with pytest.raises(ValueError, match="shadow"):
            parse_config(copy.deepcopy(CONFIG))


# -- the core names no surface ------------------------------------------------------------------

# The command line's own Telegram commands (`signoff telegram set-webhook`, the
# `--telegram-polling` flag of serve and the check that refuses it with several workers) keep
# their names; everything else in bot/ reaches a surface through the registry.
_NAMING_ALLOWED = {
    "bot/surfaces.py",  # BUILT_IN: the declaration modules, by import path
    "bot/cli/parser.py",
    "bot/cli/deployment.py",
    "bot/cli/processes.py",
    "bot/server_processes.py",
}
_SURFACE_WORD = re.compile(r"slack|telegram", re.IGNORECASE)


def _names_in(path: Path) -> list[str]:
    """Where a module's code (not its docstrings or comments) says Slack or Telegram: string
    literals, and the names it defines, imports or uses."""
    tree = ast.parse(path.read_text("utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        words: list[str] = []
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            words = [] if id(node) in docstrings else [node.value]
        elif isinstance(node, ast.Name):
            words = [node.id]
        elif isinstance(node, ast.Attribute):
            words = [node.attr]
        elif isinstance(node, ast.arg | ast.keyword):
            words = [node.arg or ""]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            words = [node.name]
        elif isinstance(node, ast.alias):
            words = [node.name, node.asname or ""]
        found += [f"{path}:{node.lineno}: {w!r}" for w in words if _SURFACE_WORD.search(w)]
    return found


def test_no_core_module_names_a_chat_surface() -> None:
    named = [
        where
        for path in sorted((ROOT / "bot").rglob("*.py"))
        if path.relative_to(ROOT).as_posix() not in _NAMING_ALLOWED
        for where in _names_in(path)
    ]
    assert named == []


def test_the_guard_sees_a_name_in_code_and_not_in_a_docstring(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('"""Slack and Telegram."""\n\n# telegram\nx = {"slack": 1}\n', "utf-8")
    assert _names_in(module) == [f"{module}:4: 'slack'"]
