"""Approve as edited, answer instead of running, and questions, over real HTTP on SQLite and
PostgreSQL with a FakeClock.

The real application (bot.app.build_app with [web]) on a loopback port; the agent creates and
claims through the API, approvers decide on the web page or through the Operator (as a chat
click does). Proves that an edit is a new revision with its own hash, approved by its editor
after seeing every change; that the route and the request's input_schema bound it; that a
quorum counts again after it; that the record, the webhook and the claim carry the edited
call; that `audit verify` holds the revisions to their hashes; that an answer ends a request
without running anything; and that a question is routed, answered and expires like an
approval.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bot import audit
from bot.canonical import approval_hash
from bot.clock import FakeClock
from bot.config import parse_config
from bot.durations import parse_duration
from bot.errors import ApprovalChanged, EditRefused, InvalidRequest, NotAnApprover, NotPending
from bot.operator import Actor, Operator
from bot.signin import SignInLinks
from store.repository import Store
from tests.support.chat_server import ChatServer, serve
from tests.support.samples import TEST_CONFIG, request_body, tamper
from tests.support.web_browser import Browser, Page

API_KEY = "acme-edits-key"
SECRET = "edits-answers-test-secret-0123456789abcdef"
START = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
SCHEMA = {
    "type": "object",
    "properties": {
        "charge": {"type": "string"},
        "amount": {"type": "integer", "minimum": 1, "maximum": 20000},
    },
    "required": ["charge", "amount"],
}


class Rig(ChatServer):
    async def api(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        async with self.http.request(
            method,
            f"{self.url}/v1{path}",
            headers={"Authorization": f"Bearer {self.api_key}"},
            **kwargs,
        ) as response:
            return response.status, await response.json()

    async def webhook_bodies(self, approval_id: str) -> list[dict[str, Any]]:
        async with self.store.read() as tx:
            jobs = await tx.outbox_jobs()
        return [
            j.payload["body"] for j in jobs if j.kind == "webhook" and j.approval_id == approval_id
        ]


@pytest.fixture
async def world(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Rig, SignInLinks]]:
    monkeypatch.setenv("SIGNOFF_WEB_SECRET", SECRET)
    monkeypatch.setenv("EDITS_TEST_API_KEY", API_KEY)
    raw = copy.deepcopy(TEST_CONFIG)
    raw["web"] = {}
    raw["tenants"][0]["api_key_env"] = "EDITS_TEST_API_KEY"
    routes = raw["routes"]
    routes[0]["edits"] = ["amount", "memo"]  # payments.*: the amount and a memo, not the charge
    routes[2]["edits"] = "any"  # quorum.*: 2 of alice, bob, carol
    config = parse_config(raw)
    clock.set(START)
    cleanup: list[Callable[[], Awaitable[None]]] = []
    links = SignInLinks(store, config.directory(), clock, parse_duration("15m"))
    rig = await serve(Rig, config, store, clock, API_KEY, cleanup)
    yield rig, links
    for close in reversed(cleanup):
        await close()


def _operator(rig: Rig) -> Operator:
    return Operator(rig.store, rig.directory, rig.clock)


async def _browser(rig: Rig, links: SignInLinks, principal: str) -> Browser:
    browser = Browser(rig.url)
    page = await browser.sign_in(links.url(rig.url, await links.make(principal)))
    assert page.status == 200, page.html
    return browser


async def _submit(browser: Browser, form: Any, extra: dict[str, str] | None = None) -> Page:
    """Post a form as a browser does (its hidden inputs, and what the person filled in), and
    follow the redirect of a decision to the page it names."""
    data = {
        node.attrs["name"]: node.attrs.get("value") or ""
        for node in form.find_all("input")
        if node.attrs.get("type") == "hidden"
    }
    done = await browser.post(form.attrs["action"], {**data, **(extra or {})})
    assert done.status == 303, done.html
    return await browser.get(done.url)


def _revised(record: dict[str, Any], arguments: dict[str, Any]) -> str:
    """The edited call's hash worked out from the record alone, as an agent would."""
    return approval_hash(
        "tool_call",
        record["capability"],
        record["presentation"],
        record["tool"]["name"],
        arguments,
    )


# -- approve as edited -------------------------------------------------------------------------


async def test_an_edit_on_the_web_page_is_reviewed_then_approved_and_the_agent_runs_it(
    world: tuple[Rig, SignInLinks],
) -> None:
    rig, links = world
    record = await rig.create()
    alice = await _browser(rig, links, "alice")
    try:
        page = await alice.get(f"/web/approvals/{record['id']}")
        assert "Edit, then approve…" in page.html
        editor = await alice.get(f"/web/approvals/{record['id']}/edit")
        assert editor.status == 200, editor.html
        # The charge may not change here: shown, not a field.
        assert 'name="arg.amount"' in editor.html and 'name="arg.charge"' not in editor.html
        review = await alice.post(
            f"/web/approvals/{record['id']}/edit",
            {
                "csrf": editor.doc.find("form", classes="editor").field("csrf"),
                "hash": record["hash"],
                "type.amount": "number",
                "arg.amount": "9000",
                "new_key": "memo",
                "new_value": "partial refund",
            },
        )
        assert review.status == 200, review.html
        edited = {"charge": "ch_1", "amount": 9000, "memo": "partial refund"}
        new_hash = _revised(record, edited)
        text = review.doc.text
        assert "amount changed" in text and "12000" in text and "9000" in text
        assert "memo added" in text and "partial refund" in text
        assert f"sha256:{new_hash[:12]}" in text
        form = review.doc.find("form", classes="decide approve")
        done = await _submit(alice, form)
        assert done.doc.find(role="status").text == "Approved as edited."
    finally:
        await alice.http.close()

    status, got = await rig.api("GET", f"/approvals/{record['id']}")
    assert status == 200
    assert got["state"] == "approved" and got["edited"] is True
    assert got["hash"] == new_hash and got["tool"]["arguments"] == edited
    assert got["original_hash"] == record["hash"]
    assert got["original_arguments"] == record["tool"]["arguments"]
    # The decision webhook carries the edited call.
    [hook] = await rig.webhook_bodies(record["id"])
    assert hook["event"] == "approved" and hook["approval"]["tool"]["arguments"] == edited
    assert hook["approval"]["edited"] is True
    # The claim hands out exactly the edited call, once.
    status, claimed = await rig.api("POST", f"/approvals/{record['id']}/claim", json={})
    assert status == 200, claimed
    assert claimed["tool"] == {"name": "stripe.refunds.create", "arguments": edited}
    assert claimed["edited"] is True and claimed["original_hash"] == record["hash"]
    status, again = await rig.api("POST", f"/approvals/{record['id']}/claim", json={})
    assert status == 409, again
    # The trail names the editor, the change and both hashes; it verifies.
    events = await rig.events(record["id"])
    [edit] = [e for e in events if e.type == "edited"]
    assert edit.actor == "web:alice" and edit.data["from_hash"] == record["hash"]
    assert edit.data["hash"] == new_hash and edit.data["keys"] == ["amount", "memo"]
    report = await audit.verify(rig.store, record["id"])
    assert report.ok, report.problems


async def test_the_route_and_the_input_schema_bound_what_an_edit_may_change(
    world: tuple[Rig, SignInLinks],
) -> None:
    rig, _ = world
    operator = _operator(rig)
    record = await rig.create(input_schema=SCHEMA)
    alice = Actor("alice", "slack")

    async def edit(arguments: dict[str, Any]) -> Any:
        return await operator.approve_edited(
            record["id"], record["hash"], arguments, _revised(record, arguments), alice
        )

    with pytest.raises(EditRefused, match="charge may not be changed"):
        await edit({"charge": "ch_2", "amount": 12000})
    with pytest.raises(InvalidRequest) as over:
        await edit({"charge": "ch_1", "amount": 50000})
    assert over.value.fields == [
        {"field": "amount", "message": "50000 is greater than the maximum of 20000 (rule: maximum)"}
    ]
    with pytest.raises(InvalidRequest, match="'amount' is a required property"):
        await edit({"charge": "ch_1"})
    with pytest.raises(InvalidRequest, match="changes nothing"):
        await edit(dict(record["tool"]["arguments"]))
    # The hash confirmed must be the revision's: a stale review approves nothing.
    with pytest.raises(ApprovalChanged, match="review the edit again"):
        await operator.approve_edited(
            record["id"], record["hash"], {"charge": "ch_1", "amount": 100}, "ab" * 32, alice
        )
    assert (await rig.state(record["id"])).state == "pending"
    # A route without `edits` allows none (contracts.*).
    contract = await rig.create(capability="contracts.cancel", run_id="run-2")
    with pytest.raises(EditRefused, match="allows no edits"):
        await operator.approve_edited(
            contract["id"],
            contract["hash"],
            {"charge": "ch_1", "amount": 1},
            _revised(contract, {"charge": "ch_1", "amount": 1}),
            alice,
        )
    # Refusals changed nothing; every one is in the trail.
    assert [e.type for e in await rig.events(record["id"])] == ["requested"]


async def test_an_edit_on_a_quorum_starts_the_count_again(world: tuple[Rig, SignInLinks]) -> None:
    rig, _ = world
    operator = _operator(rig)
    record = await rig.create(capability="quorum.move")
    await operator.approve_shown(record["id"], record["hash"], Actor("alice", "web"))
    edited = {"charge": "ch_1", "amount": 500}
    new_hash = _revised(record, edited)
    decision = await operator.approve_edited(
        record["id"], record["hash"], edited, new_hash, Actor("bob", "slack")
    )
    row = decision.approval
    # Alice approved the old call: her vote is gone, Bob's edit is his vote for the new one.
    assert row.state == "pending" and [v.principal for v in row.votes] == ["bob"]
    with pytest.raises(ApprovalChanged):
        await operator.approve_shown(record["id"], record["hash"], Actor("alice", "web"))
    done = await operator.approve_shown(record["id"], new_hash, Actor("alice", "web"))
    assert done.approval.state == "approved" and done.approval.hash == new_hash
    status, claimed = await rig.api("POST", f"/approvals/{record['id']}/claim", json={})
    assert status == 200, claimed
    assert claimed["tool"]["arguments"] == edited
    assert (await audit.verify(rig.store, record["id"])).ok


async def test_the_agent_asking_again_for_its_original_call_gets_the_edited_request(
    world: tuple[Rig, SignInLinks],
) -> None:
    rig, _ = world
    record = await rig.create()
    edited = {"charge": "ch_1", "amount": 100}
    await _operator(rig).approve_edited(
        record["id"], record["hash"], edited, _revised(record, edited), Actor("alice", "web")
    )
    # A retry of the same create (a restarted agent): the same request, not a second one.
    status, again = await rig.api("POST", "/approvals", json=request_body())
    assert status == 200, again
    assert again["id"] == record["id"] and again["tool"]["arguments"] == edited
    status, listed = await rig.api("GET", "/approvals")
    assert [a["id"] for a in listed["approvals"]] == [record["id"]]


async def test_an_edit_into_another_request_of_the_same_run_is_refused_in_words(
    world: tuple[Rig, SignInLinks],
) -> None:
    rig, _ = world
    record = await rig.create()
    other = {"charge": "ch_1", "amount": 100}
    twin = await rig.create(tool={"name": "stripe.refunds.create", "arguments": other})
    with pytest.raises(InvalidRequest, match=f"exactly request {twin['id']} of the same run"):
        await _operator(rig).approve_edited(
            record["id"], record["hash"], other, _revised(record, other), Actor("alice", "web")
        )
    assert (await rig.state(record["id"])).hash == record["hash"]


async def test_audit_verify_finds_a_revision_altered_behind_signoffs_back(
    world: tuple[Rig, SignInLinks],
) -> None:
    rig, _ = world
    record = await rig.create()
    edited = {"charge": "ch_1", "amount": 100}
    await _operator(rig).approve_edited(
        record["id"], record["hash"], edited, _revised(record, edited), Actor("alice", "web")
    )
    assert (await audit.verify(rig.store, record["id"])).ok
    # Someone rewrites what the agent asked for, to hide how far the approver changed it.
    await tamper(
        rig.store,
        "UPDATE approvals SET original_args = :args WHERE id = :id",
        args='{"charge": "ch_1", "amount": 150}',
        id=record["id"],
    )
    report = await audit.verify(rig.store, record["id"])
    assert not report.ok
    assert "the call as first requested (before its edit)" in report.problems[0].problem


# -- answers -----------------------------------------------------------------------------------


async def test_an_answer_ends_a_tool_call_without_running_it(
    world: tuple[Rig, SignInLinks],
) -> None:
    rig, links = world
    record = await rig.create()
    bob = await _browser(rig, links, "bob")
    try:
        page = await bob.get(f"/web/approvals/{record['id']}")
        form = page.doc.find("form", classes="decide answer")
        done = await _submit(bob, form, {"answer": "Refund only €60: the rest was store credit."})
        assert done.doc.find(role="status").text == "Answered."
        assert "Answered instead of running by Bob Stone (bob)" in done.doc.text
        assert "Answer: Refund only €60" in done.doc.text
    finally:
        await bob.http.close()
    status, got = await rig.api("GET", f"/approvals/{record['id']}")
    assert got["state"] == "answered" and got["decided_by"] == "bob"
    assert got["answer"] == {"text": "Refund only €60: the rest was store credit."}
    [hook] = await rig.webhook_bodies(record["id"])
    assert hook["event"] == "answered" and hook["approval"]["answer"] == got["answer"]
    status, refused = await rig.api("POST", f"/approvals/{record['id']}/claim", json={})
    assert status == 409 and refused["error"]["code"] == "not_pending", refused
    with pytest.raises(NotPending):
        await _operator(rig).approve_shown(record["id"], record["hash"], Actor("alice", "web"))


async def test_an_answer_must_say_something_and_only_an_approver_may_give_it(
    world: tuple[Rig, SignInLinks],
) -> None:
    rig, _ = world
    operator = _operator(rig)
    record = await rig.create()
    with pytest.raises(InvalidRequest, match="empty"):
        await operator.answer(record["id"], record["hash"], Actor("alice", "web"), text="  ")
    with pytest.raises(InvalidRequest, match="either a text or one of"):
        await operator.answer(record["id"], record["hash"], Actor("alice", "web"))
    with pytest.raises(InvalidRequest, match="not one of this request's options"):
        await operator.answer(record["id"], record["hash"], Actor("alice", "web"), option="yes")
    with pytest.raises(NotAnApprover):  # dave approves only for globex
        await operator.answer(record["id"], record["hash"], Actor("dave", "web"), text="no")
    assert (await rig.state(record["id"])).state == "pending"


# -- questions ---------------------------------------------------------------------------------


def _question(**overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "kind": "question",
        "capability": "payments.question",
        "question": {"options": ["Refund in full", "Store credit", "Ask the customer"]},
        "presentation": {"title": "How should we settle Zoë's complaint?"},
    }
    body = request_body(**{**fields, **overrides})
    del body["tool"]
    return body


async def test_a_question_is_answered_with_one_of_its_options(
    world: tuple[Rig, SignInLinks],
) -> None:
    rig, links = world
    status, record = await rig.api("POST", "/approvals", json=_question())
    assert status == 201, record
    assert record["kind"] == "question" and record["tool"] is None
    assert record["assignee"] == "group:finance"  # routed like any request
    assert record["hash"] == approval_hash(
        "question",
        "payments.question",
        {"title": "How should we settle Zoë's complaint?"},
        "",
        {},
        {"options": ["Refund in full", "Store credit", "Ask the customer"]},
    )
    with pytest.raises(InvalidRequest, match="answered, not approved"):
        await _operator(rig).approve_shown(record["id"], record["hash"], Actor("alice", "web"))
    alice = await _browser(rig, links, "alice")
    try:
        page = await alice.get(f"/web/approvals/{record['id']}")
        assert page.forms() == ["answer", "reject", "reject-with-reason", "delegate"]  # no Approve
        form = page.doc.find("form", classes="decide answer")
        buttons = [b.text for b in form.find_all("button")]
        assert buttons == ["Refund in full", "Store credit", "Ask the customer"]
        done = await _submit(alice, form, {"option": "Store credit"})
        assert done.doc.find(role="status").text == "Answered."
        assert "Answer: Store credit" in done.doc.text
    finally:
        await alice.http.close()
    status, got = await rig.api("GET", f"/approvals/{record['id']}")
    assert got["state"] == "answered" and got["answer"] == {"option": "Store credit"}
    [hook] = await rig.webhook_bodies(record["id"])
    assert hook["approval"]["answer"] == {"option": "Store credit"}
    assert (await audit.verify(rig.store, record["id"])).ok


async def test_a_free_text_question_expires_unanswered_like_an_approval(
    world: tuple[Rig, SignInLinks],
) -> None:
    rig, _ = world
    body = _question(question={}, approval_ttl="1h")
    status, record = await rig.api("POST", "/approvals", json=body)
    assert status == 201, record
    with pytest.raises(InvalidRequest, match="answer in words"):
        await _operator(rig).answer(
            record["id"], record["hash"], Actor("alice", "web"), option="Yes"
        )
    rig.clock.advance(timedelta(hours=2))
    with pytest.raises(NotPending):
        await _operator(rig).answer(
            record["id"], record["hash"], Actor("alice", "web"), text="too late"
        )
    status, got = await rig.api("GET", f"/approvals/{record['id']}")
    assert got["state"] == "expired" and got["answer"] is None


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"question": None}, "question", "needs `question`"),
        ({"tool": {"name": "t", "arguments": {}}}, "tool", "has no call"),
        ({"input_schema": SCHEMA}, "input_schema", "has no call"),
        ({"required_approvals": 2}, "required_approvals", "answered by one person"),
        ({"question": {"options": ["Yes", "Yes"]}}, "question.options", "must differ"),
        ({"question": {"options": ["Only one"]}}, "question.options", "at least 2"),
        ({"question": {"options": [f"o{i}" for i in range(6)]}}, "question.options", "at most 5"),
    ],
)
async def test_a_question_that_cannot_be_asked_is_refused_by_field(
    world: tuple[Rig, SignInLinks], change: dict[str, Any], field: str, words: str
) -> None:
    rig, _ = world
    body = {**_question(), **change}
    body = {k: v for k, v in body.items() if v is not None}
    status, refused = await rig.api("POST", "/approvals", json=body)
    assert status == 422, refused
    fields = refused["error"]["fields"]
    assert any(f["field"] == field and words in f["message"] for f in fields), fields


# -- bulk decisions from the inbox -------------------------------------------------------------


async def test_requests_picked_in_the_inbox_are_decided_one_by_one(
    world: tuple[Rig, SignInLinks],
) -> None:
    rig, links = world
    made = [await rig.create(run_id=f"bulk-{i}") for i in range(3)]
    alice = await _browser(rig, links, "alice")
    try:
        inbox = await alice.get("/web/inbox")
        picks = {
            node.attrs["name"]: node.attrs["value"]
            for node in inbox.doc.find_all("input")
            if node.attrs.get("name", "").startswith("pick.")
        }
        assert picks == {f"pick.{r['id']}": r["hash"] for r in made}
        # Bob rejects one while Alice's page is open: her bulk approval refuses that one only.
        await _operator(rig).reject_shown(made[1]["id"], made[1]["hash"], Actor("bob", "web"))
        form = inbox.doc.find("form", id="bulk")
        result = await alice.post(
            form.attrs["action"],
            {"csrf": form.field("csrf"), "action": "approve", "note": "batch", **picks},
        )
        assert result.status == 200, result.html
        assert result.doc.find(role="status").text == "2 decided, 1 refused."
        said = {
            li.find("a").attrs["href"].rsplit("/", 1)[1]: li.text
            for li in result.doc.find("ul", classes="bulk-result").find_all("li")
        }
        assert said[made[0]["id"]].endswith("Approved.")
        assert said[made[2]["id"]].endswith("Approved.")
        assert "Already rejected by Bob Stone" in said[made[1]["id"]]
    finally:
        await alice.http.close()
    states = [(await rig.state(r["id"])).state for r in made]
    assert states == ["approved", "rejected", "approved"]
    refused = [e for e in await rig.events(made[1]["id"]) if e.type == "refused"]
    assert refused and refused[0].actor == "web:alice"
