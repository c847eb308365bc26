"""The embedded approval in Chromium, framed by a partner's page on another origin.

A real `signoff serve` (on SQLite, and on PostgreSQL) allows one parent origin,
`http://localhost:PORT`, a tiny page server on loopback (tests/support/parent_page.py); its
page frames `/embed/<token>` from the signoff server at `http://127.0.0.1:PORT2` and keeps
every message it receives. The person approves inside the frame: the decision is recorded as
`embed:<person>`, and the parent hears `loaded`, then `decided` with the hash it was shown,
from signoff's origin. The same page served as `http://127.0.0.1:PORT`, another origin,
cannot frame a token made for the first: the frame is blocked (Chromium reports the
frame-ancestors violation) and nothing is said to it. A token reused after the decision is
refused in the frame, which tells the parent the code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from tests.support.cli import sqlite_url
from tests.support.embed_rig import audit_events, postgres_database
from tests.support.parent_page import ParentPages, parent_pages_in_thread
from tests.support.samples import request_body
from tests.support.service import Fleet, WebhookReceiver, write_config
from tests.support.web_service import WAIT_MS, WEB_SECRET, WebService, shoot, web_config

Contexts = Callable[..., BrowserContext]


@dataclass
class Embedding:
    service: WebService
    parents: ParentPages
    database_url: str

    def events(self, approval_id: str) -> list[tuple[str, str | None]]:
        """The approval's audit events, oldest first: (type, actor)."""
        return audit_events(self.database_url, approval_id)


@pytest.fixture(params=["sqlite", "postgresql"])
def embedding(
    request: pytest.FixtureRequest, tmp_path: Path, sqlite_template: Path
) -> Iterator[Embedding]:
    """`signoff serve` with [web] allowing the parent page's `localhost` origin only, on a
    SQLite copy of the migrated template or a new PostgreSQL database."""
    with ExitStack() as stack:
        parents = stack.enter_context(parent_pages_in_thread())
        db_path = tmp_path / "signoff.db"
        if request.param == "sqlite":
            db_path.write_bytes(sqlite_template.read_bytes())
            database_url = sqlite_url(db_path)
        else:
            database_url = stack.enter_context(postgres_database())
        hooks = stack.enter_context(WebhookReceiver())
        env = {"SIGNOFF_WEB_SECRET": WEB_SECRET}
        config = web_config(database_url, hooks.url)
        config["web"]["embed_origins"] = [parents.allowed]
        config_path = write_config(tmp_path / "signoff.toml", config)
        fleet = stack.enter_context(Fleet(config_path, tmp_path, env))
        service = WebService(fleet.start(), config_path, db_path, tmp_path, hooks, env)
        yield Embedding(service, parents, database_url)


def _create(service: WebService, run_id: str) -> dict[str, Any]:
    created = service.api().post("/v1/approvals", request_body(run_id=run_id))
    assert created.status == 201, created
    body: dict[str, Any] = created.body
    return body


def _embed_url(service: WebService, approval_id: str, parent: str) -> str:
    """A fresh token's page for alice, framed by `parent`, pointed at this server (the
    config's public_url names a fixed port; the test server took a free one)."""
    minted = service.api().post(
        f"/v1/approvals/{approval_id}/embed", {"person": "alice", "parent_origin": parent}
    )
    assert minted.status == 201, minted
    return service.url + urlsplit(minted.body["url"]).path


def _open(page: Page, parent: str, src: str) -> None:
    """The partner's page at `parent`, framing `src`; returns once the frame has loaded
    (whatever it holds: the approval, or the browser's error page for a blocked frame)."""
    page.goto(f"{parent}/parent?src={quote(src, safe='')}")
    page.wait_for_function("window.frameLoads > 0", timeout=WAIT_MS)


def _messages(page: Page) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = page.evaluate("window.messages")
    return messages


def _types(page: Page) -> list[str]:
    return [m["data"]["type"] for m in _messages(page) if m["data"].get("type") != "resize"]


def test_a_partner_page_frames_the_approval_and_hears_the_decision(
    embedding: Embedding, contexts: Contexts
) -> None:
    service, parents = embedding.service, embedding.parents
    approval = _create(service, "run-embed")
    src = _embed_url(service, approval["id"], parents.allowed)
    page = contexts(viewport={"width": 800, "height": 900}).new_page()
    _open(page, parents.allowed, src)
    page.wait_for_function("window.messages.some(m => m.data.type === 'loaded')", timeout=WAIT_MS)
    frame = page.frame_locator("#approval")
    expect(frame.get_by_role("heading", name=approval["presentation"]["title"])).to_be_visible()
    expect(frame.get_by_text("Deciding as Alice Ng.")).to_be_visible()
    # The frame asks to be as tall as its page.
    page.wait_for_function(
        "window.messages.some(m => m.data.type === 'resize' && m.data.height > 200)",
        timeout=WAIT_MS,
    )
    shoot(page, "embed-parent-before")
    assert service.api().get(f"/v1/approvals/{approval['id']}").body["state"] == "pending"

    frame.get_by_role("button", name="Approve").click()
    page.wait_for_function("window.messages.some(m => m.data.type === 'decided')", timeout=WAIT_MS)
    expect(frame.get_by_role("status")).to_contain_text("Approved.")
    shoot(page, "embed-parent-decided")
    assert _types(page) == ["loaded", "decided"]
    messages = [m for m in _messages(page) if m["data"]["type"] != "resize"]
    # Every message came from signoff's origin, to this page.
    assert {m["origin"] for m in _messages(page)} == {service.url}
    loaded, decided = (m["data"] for m in messages)
    assert loaded["hash"] == approval["hash"] and loaded["source"] == "signoff"
    assert decided == {
        "source": "signoff",
        "type": "decided",
        "approval_id": approval["id"],
        "decision": "approve",
        "state": "approved",
        "hash": approval["hash"],
    }
    got = service.api().get(f"/v1/approvals/{approval['id']}").body
    assert (got["state"], got["decided_by"]) == ("approved", "alice")
    events = embedding.events(approval["id"])
    assert ("embed_issued", "agent:acme") in events
    assert events[-1] == ("approved", "embed:alice")

    # The same token again, in the same partner page: refused in the frame, and said.
    again = contexts().new_page()
    _open(again, parents.allowed, src)
    again.wait_for_function("window.messages.some(m => m.data.type === 'error')", timeout=WAIT_MS)
    [error] = [m["data"] for m in _messages(again) if m["data"]["type"] == "error"]
    assert error["code"] == "embed_token_used"
    retry = again.frame_locator("#approval")
    expect(retry.get_by_role("alert")).to_contain_text("already used")
    expect(retry.get_by_role("button", name="Approve")).to_have_count(0)
    assert embedding.events(approval["id"]) == events


def test_a_page_on_another_origin_cannot_frame_it(embedding: Embedding, contexts: Contexts) -> None:
    service, parents = embedding.service, embedding.parents
    approval = _create(service, "run-embed-blocked")
    # A token for the allowed origin, framed by the same page served from another origin.
    src = _embed_url(service, approval["id"], parents.allowed)
    assert parents.elsewhere != parents.allowed
    page = contexts().new_page()
    console: list[str] = []
    page.on("console", lambda message: console.append(message.text))
    _open(page, parents.elsewhere, src)
    # The frame's document is not signoff's page: Chromium put its error page there.
    [child] = [f for f in page.frames if f != page.main_frame]
    assert not child.url.startswith(service.url), child.url
    expect(page.frame_locator("#approval").get_by_role("button", name="Approve")).to_have_count(0)
    # A moment for any message to arrive (none can: the page's script never ran).
    page.wait_for_timeout(300)
    assert _messages(page) == []
    assert any("frame-ancestors" in text for text in console), console
    shoot(page, "embed-blocked")
    # Nothing was decided, and the token is still good for its own origin.
    assert service.api().get(f"/v1/approvals/{approval['id']}").body["state"] == "pending"
    allowed = contexts().new_page()
    _open(allowed, parents.allowed, src)
    allowed.wait_for_function(
        "window.messages.some(m => m.data.type === 'loaded')", timeout=WAIT_MS
    )
