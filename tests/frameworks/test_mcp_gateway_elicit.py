"""signoff-mcp offering a gated call's approval page inside the MCP host (URL-mode
elicitation), end to end: the official `mcp` client as the host, the real gateway launched by
it on stdio, a scripted upstream (mcp_upstream.py, which writes down every call it runs), a
real `signoff serve` with its web inbox on, and Chromium as the person's browser.

The host's elicitation callback is what a host does with a URL: it records what it was
shown, answers, and (on accept) the person opens the link in Chromium, already signed in
with a link from `signoff web login`, and decides there while the call waits. Both protocol
revisions: on 2025-11-25 the gateway sends `elicitation/create` during the call; on
2026-07-28 its first answer asks for input and the client calls again with the answer.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from playwright.async_api import Browser, Page, async_playwright, expect

from signoff_client import SignoffClient
from tests.support import prefork
from tests.support.agent_deployment import Deployment, deployment_config
from tests.support.cli import Cli, sqlite_url
from tests.support.mcp_gateway import Gateway as GatewayProcess
from tests.support.service import Fleet, WebhookReceiver, write_config
from tests.support.web_service import ARTIFACTS, CHROMIUM, WAIT_MS, WEB_SECRET

UPSTREAM = str(Path(__file__).with_name("mcp_upstream.py"))
META = "signoff/approval"
CALL = {"to": "zoe@example.com", "subject": "Your refund", "body": "It is on its way."}

POLICY = """\
[gateway]
server = "mail"
requested_by = "agent"
{gateway}

[tools]
read_note = "allow"
send_email = {send_email}
"""


def policy(send_email: str = '"ask"', gateway: str = "") -> str:
    return POLICY.format(send_email=send_email, gateway=gateway)


# -- the deployment: signoff serve with the web inbox ---------------------------------------


def _deploy(tmp_path: Path, database_url: str) -> Iterator[Deployment]:
    with WebhookReceiver() as hooks:
        config = deployment_config(database_url, hooks.url, web={})
        path = write_config(tmp_path / "signoff.toml", config)
        with Fleet(path, tmp_path, {"SIGNOFF_WEB_SECRET": WEB_SECRET}) as fleet:
            yield Deployment(fleet, hooks, fleet.start())


@pytest.fixture
def web_deployment(tmp_path: Path, sqlite_template: Path) -> Iterator[Deployment]:
    """signoff serve with `[web]` on a fresh SQLite file."""
    path = tmp_path / "signoff.db"
    path.write_bytes(sqlite_template.read_bytes())
    yield from _deploy(tmp_path, sqlite_url(path))


@pytest.fixture
def web_deployment_on(tmp_path: Path, db_url: str) -> Iterator[Deployment]:
    """signoff serve with `[web]` on each database."""
    yield from _deploy(tmp_path, db_url)


def login_link(deployment: Deployment, who: str) -> str:
    """A sign-in link from `signoff web login --as WHO`, pointed at the test server (the
    config's public_url names a fixed port; the server took a free one)."""
    env = {**deployment.env, "SIGNOFF_WEB_SECRET": WEB_SECRET}
    result = Cli(cwd=deployment.fleet.cwd, env=env).run("web", "login", "--as", who)
    assert result.returncode == 0, str(result)
    [link] = [word for word in result.stdout.split() if "/web/login/" in word]
    return deployment.url + urlsplit(link).path


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    if not CHROMIUM.is_file():
        message = f"Chromium not found at {CHROMIUM}: apt-get install chromium"
        if os.environ.get("CI") == "true":
            pytest.fail(message + " (CI=true: browser tests must not skip)")
        pytest.skip(message)
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        yield chromium
        await chromium.close()


async def signed_in(browser: Browser, deployment: Deployment, who: str) -> Page:
    """A page in a fresh browser context (cookie jar), signed in as `who`: the link lands on
    the inbox."""
    context = await browser.new_context()
    context.set_default_timeout(WAIT_MS)
    page = await context.new_page()
    link = await asyncio.to_thread(login_link, deployment, who)
    await page.goto(link)
    await page.wait_for_url(f"{deployment.url}/web/inbox")
    return page


async def shoot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


# -- the host -----------------------------------------------------------------------------------

Person = Callable[[str], Awaitable[None]]


class Host:
    """The MCP host's elicitation callback: records each request, answers `action`, and on
    accept hands the URL to `person` (who opens it in the browser and decides) in the
    background, as a host returns once its user agreed to open the page."""

    def __init__(self, action: str = "accept", person: Person | None = None) -> None:
        self.action = action
        self.person = person
        self.asked: list[types.ElicitRequestURLParams] = []
        self.visits: list[asyncio.Task[None]] = []

    async def __call__(self, context: Any, params: Any) -> types.ElicitResult:
        assert params.mode == "url", params
        self.asked.append(params)
        if self.action == "accept" and self.person is not None:
            self.visits.append(asyncio.create_task(self.person(params.url)))
        return types.ElicitResult(action=self.action)

    async def visited(self) -> None:
        """The person's visits, finished (a failure in the browser fails the test)."""
        await asyncio.gather(*self.visits)


def gateway_client(
    deployment: Deployment,
    tmp_path: Path,
    policy_text: str,
    mode: str,
    host: Host | None = None,
) -> Client:
    """The official client launching `signoff-mcp serve --policy P -- <upstream>` on stdio:
    `legacy` speaks 2025-11-25, `auto` 2026-07-28. With `host`, it declares elicitation."""
    (tmp_path / "policy.toml").write_text(policy_text, "utf-8")
    params = StdioServerParameters(
        command=prefork.python(),
        args=[
            "-m", "signoff_client.mcp.cli", "serve", "--policy", "policy.toml",
            "--", prefork.python(), UPSTREAM, str(tmp_path / "calls.jsonl"),
        ],
        env={
            **deployment.env,
            "SIGNOFF_URL": deployment.url,
            "SIGNOFF_API_KEY": deployment.api_key,
        },
        cwd=tmp_path,
    )  # fmt: skip
    return Client(params, mode=mode, elicitation_callback=host)


def executed(tmp_path: Path) -> list[dict[str, Any]]:
    calls = tmp_path / "calls.jsonl"
    if not calls.exists():
        return []
    return [json.loads(line) for line in calls.read_text("utf-8").splitlines()]


async def record(deployment: Deployment, approval_id: str) -> Any:
    async with SignoffClient(deployment.url, deployment.api_key) as signoff:
        return await signoff.get(approval_id)


def text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def decides(page: Page, button: str, note: str | None = None) -> Person:
    """The person at `page`: opens the elicited link, checks the card is that request's,
    and presses `button` (with `note` as the reason)."""

    async def visit(url: str) -> None:
        await page.goto(url)
        form = page.locator(f"form.decide.{button.lower()}").first
        await expect(form.locator('input[name="hash"]')).to_have_count(1)
        press = page.get_by_role("button", name=button, exact=True)
        if note is not None:  # the reason's form is folded under the plain buttons
            await page.get_by_text("Give a reason and reject…").click()
            await page.get_by_label("Your reason for rejecting").fill(note)
            press = page.get_by_role("button", name="Reject with this reason")
        async with page.expect_navigation():
            await press.click()
        said = {"Approve": "Approved.", "Reject": "Rejected."}[button]
        await expect(page.get_by_role("status")).to_have_text(said)
        await shoot(page, f"mcp-elicit-{button.lower()}")

    return visit


# -- approved and rejected in the browser ---------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "auto"], ids=["2025-11-25", "2026-07-28"])
async def test_approved_on_the_elicited_page_runs_once_and_says_so(
    web_deployment_on: Deployment, tmp_path: Path, browser: Browser, mode: str
) -> None:
    deployment = web_deployment_on
    page = await signed_in(browser, deployment, "alice")
    host = Host("accept", decides(page, "Approve"))
    async with gateway_client(deployment, tmp_path, policy(), mode, host) as agent:
        result = await agent.call_tool("send_email", CALL)
        await host.visited()
        again = await agent.call_tool("send_email", CALL)

    [asked] = host.asked
    approval = result.meta[META]
    assert asked.url == f"{deployment.url}/web/approvals/{approval['id']}"
    assert page.url.startswith(asked.url)  # the person decided on exactly that page
    assert "send_email" in asked.message and approval["hash"][:12] in asked.message
    assert "Who decides: " in asked.message and approval["id"] in asked.message
    # 2025-11-25 names each elicitation; 2026-07-28 has no such id.
    assert (asked.elicitation_id is not None) == (mode == "legacy")

    assert not result.is_error, text(result)
    assert text(result).startswith(f"[signoff] Approved by alice (approval {approval['id']})")
    assert "sent to zoe@example.com: Your refund" in text(result)
    assert (approval["state"], approval["decided_by"]) == ("executed", "alice")
    assert executed(tmp_path) == [{"tool": "send_email", "arguments": CALL}]
    decided = await record(deployment, approval["id"])
    assert (decided.state, decided.decided_by) == ("executed", "alice")

    # Asked again: the recorded result, nothing runs, nothing is elicited.
    assert not again.is_error and "sent to zoe@example.com" in text(again)
    assert len(host.asked) == 1
    assert executed(tmp_path) == [{"tool": "send_email", "arguments": CALL}]


@pytest.mark.parametrize("mode", ["legacy", "auto"], ids=["2025-11-25", "2026-07-28"])
async def test_rejected_on_the_elicited_page_is_the_answer_and_nothing_runs(
    web_deployment_on: Deployment, tmp_path: Path, browser: Browser, mode: str
) -> None:
    deployment = web_deployment_on
    page = await signed_in(browser, deployment, "bob")
    host = Host("accept", decides(page, "Reject", note="Not to this customer"))
    async with gateway_client(deployment, tmp_path, policy(), mode, host) as agent:
        result = await agent.call_tool("send_email", CALL)
        await host.visited()

    assert result.is_error
    assert text(result) == "Rejected by bob: Not to this customer. The call was not executed."
    assert result.meta[META]["state"] == "rejected"
    assert executed(tmp_path) == []


# -- the host's user says no, the host cannot ask, the policy says route -------------------------


@pytest.mark.parametrize("action", ["decline", "cancel"])
@pytest.mark.parametrize("mode", ["legacy", "auto"], ids=["2025-11-25", "2026-07-28"])
async def test_a_declined_page_leaves_the_request_to_its_approvers(
    web_deployment: Deployment, tmp_path: Path, mode: str, action: str
) -> None:
    """Declining (or dismissing) the page is not a rejection: the host's user may not be an
    approver, and the host is the agent's. The request stays pending; an approver decides it
    later elsewhere, and the same call then runs once."""
    deployment = web_deployment
    host = Host(action)
    async with gateway_client(deployment, tmp_path, policy(), mode, host) as agent:
        waiting = await agent.call_tool("send_email", CALL)
        approval = waiting.meta[META]
        assert waiting.is_error and approval["state"] == "pending"
        assert text(waiting).startswith("Waiting for human approval")
        how = "declined" if action == "decline" else "dismissed"
        assert f"The MCP host's user {how} opening the approval page" in text(waiting)
        assert (await record(deployment, approval["id"])).state == "pending"
        assert executed(tmp_path) == []

        await deployment.approve_async(approval["id"], approval["hash"])
        ran = await agent.call_tool("send_email", CALL)
    assert not ran.is_error and "sent to zoe@example.com" in text(ran)
    assert len(host.asked) == 1  # approved by then: nothing more to offer
    assert executed(tmp_path) == [{"tool": "send_email", "arguments": CALL}]


@pytest.mark.parametrize("mode", ["legacy", "auto"], ids=["2025-11-25", "2026-07-28"])
async def test_a_host_without_elicitation_gets_the_waiting_answer(
    web_deployment: Deployment, tmp_path: Path, mode: str
) -> None:
    deployment = web_deployment
    async with gateway_client(deployment, tmp_path, policy(), mode) as agent:
        waiting = await agent.call_tool("send_email", CALL)
        approval = waiting.meta[META]
        assert waiting.is_error and approval["state"] == "pending"
        assert "approval page" not in text(waiting)
        await deployment.approve_async(approval["id"], approval["hash"])
        ran = await agent.call_tool("send_email", CALL)
    assert not ran.is_error and not text(ran).startswith("[signoff]")
    assert executed(tmp_path) == [{"tool": "send_email", "arguments": CALL}]


@pytest.mark.parametrize(
    "rules",
    [
        ('{ action = "ask", ask = "route" }', ""),
        ('"ask"', 'ask = "route"'),
        ('{ action = "ask", ask = "route" }', 'ask = "elicit"'),
    ],
    ids=["the rule says route", "the gateway says route", "the rule's route wins"],
)
async def test_ask_route_never_elicits(
    web_deployment: Deployment, tmp_path: Path, rules: tuple[str, str]
) -> None:
    deployment = web_deployment
    host = Host("accept")
    text_ = policy(*rules)
    async with gateway_client(deployment, tmp_path, text_, "legacy", host) as agent:
        waiting = await agent.call_tool("send_email", CALL)
    assert waiting.is_error and waiting.meta[META]["state"] == "pending"
    assert host.asked == []
    assert executed(tmp_path) == []


async def test_no_decision_within_elicit_wait_answers_waiting(
    web_deployment: Deployment, tmp_path: Path
) -> None:
    """The host's user opened the page but nobody decided within `elicit_wait`: the call
    answers "waiting" (saying so), and the request stays open."""
    deployment = web_deployment
    host = Host("accept")
    text_ = policy(gateway='elicit_wait = "1s"\nweb_url = "https://signoff.example.com/"')
    async with gateway_client(deployment, tmp_path, text_, "legacy", host) as agent:
        waiting = await agent.call_tool("send_email", CALL)
    approval = waiting.meta[META]
    [asked] = host.asked
    assert asked.url == f"https://signoff.example.com/web/approvals/{approval['id']}"
    assert "The call waits up to 1 s for the decision" in asked.message
    assert waiting.is_error and approval["state"] == "pending"
    assert (
        "The approval page was opened in the MCP host, but no decision came within 1 s; the "
        "request stays open." in text(waiting)
    )
    assert executed(tmp_path) == []


async def test_a_waiting_call_reports_progress_to_a_caller_that_asked(
    web_deployment: Deployment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some hosts keep a call alive only while it reports progress: a caller that asked for
    progress hears, while the call waits for the decision, who it waits for. The gateway runs
    in process here (`Gateway.server()`), to make the beat quick."""
    from signoff_client.mcp import Gateway, parse_policy
    from signoff_client.mcp import elicit as elicit_module

    monkeypatch.setattr(elicit_module, "PROGRESS_EVERY", 0.2)
    deployment = web_deployment
    progress: list[tuple[float, str | None]] = []
    beats = asyncio.Event()

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, message))
        if len(progress) == 2:
            beats.set()

    async def approve_after_beats() -> None:
        await beats.wait()
        [found] = (await api.list(state="pending"))[0]
        await deployment.approve_async(found.id, found.hash)

    upstream = Client(
        StdioServerParameters(
            command=prefork.python(), args=[UPSTREAM, str(tmp_path / "calls.jsonl")]
        )
    )
    host = Host("accept")
    async with (
        SignoffClient(deployment.url, deployment.api_key) as api,
        upstream,
    ):
        gateway = Gateway(parse_policy(policy()), api, upstream)
        async with Client(gateway.server(), mode="legacy", elicitation_callback=host) as agent:
            approving = asyncio.create_task(approve_after_beats())
            result = await agent.call_tool("send_email", CALL, progress_callback=on_progress)
            await approving
    approval = result.meta[META]
    assert not result.is_error and approval["state"] == "executed", text(result)
    assert progress[:2] == [
        (1, f"waiting for alice to decide {approval['id']}"),
        (2, f"waiting for alice to decide {approval['id']}"),
    ]
    assert executed(tmp_path) == [{"tool": "send_email", "arguments": CALL}]


def test_a_host_that_declared_form_elicitation_only_is_not_offered_a_url() -> None:
    from signoff_client.mcp.elicit import Host as Asked

    class Session:
        def __init__(self, elicitation: types.ElicitationCapability | None) -> None:
            self.client_capabilities = types.ClientCapabilities(elicitation=elicitation)

    form = types.ElicitationCapability(form=types.FormElicitationCapability())
    url = types.ElicitationCapability(url=types.UrlElicitationCapability())
    bare = types.ElicitationCapability()  # `elicitation: {}`, from before modes: form only
    assert [Asked(Session(c)).can_open_url for c in (None, form, bare, url)] == [
        False,
        False,
        False,
        True,
    ]


@pytest.mark.parametrize("mode", ["legacy", "auto"], ids=["2025-11-25", "2026-07-28"])
async def test_over_streamable_http_the_page_is_offered_too(
    web_deployment: Deployment, tmp_path: Path, browser: Browser, mode: str
) -> None:
    """The gateway served over streamable HTTP (upstream over HTTP too): on 2025-11-25 the
    elicitation rides the call's own response stream, on 2026-07-28 the retried call."""
    deployment = web_deployment
    (tmp_path / "policy.toml").write_text(policy(), "utf-8")
    env = {**deployment.env, "SIGNOFF_URL": deployment.url, "SIGNOFF_API_KEY": deployment.api_key}
    served = GatewayProcess("streamable-http", tmp_path, env, tmp_path / "calls.jsonl")
    served.start()
    try:
        page = await signed_in(browser, deployment, "alice")
        host = Host("accept", decides(page, "Approve"))
        assert served.url is not None
        async with Client(served.url, mode=mode, elicitation_callback=host) as agent:
            assert agent.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
            result = await agent.call_tool("send_email", CALL)
            await host.visited()
    finally:
        served.stop()
    assert len(host.asked) == 1
    assert not result.is_error, text(result)
    assert text(result).startswith("[signoff] Approved by alice")
    assert executed(tmp_path) == [{"tool": "send_email", "arguments": CALL}]
