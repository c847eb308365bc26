"""The embedded approval over real HTTP, on SQLite and PostgreSQL (tests/support/embed_rig.py):
a partner's backend mints a token with its tenant key (`POST /v1/approvals/{id}/embed`), the
frame shows the card with Approve and Reject bound to the hash, framed only by the token's
origin, and decides once, recorded as `embed:<person>`; the mint is an audit event naming the
person. Bad input of every kind (an expired, used or unknown token, a token with another
request's form, an origin not allowed, a TTL over an hour, an unknown or unentitled person,
another tenant's request) gets its 4xx and stable code and writes nothing. The browser side
(another origin framing it, postMessage) is tests/browser/test_embed.py's.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select

from bot.clock import FakeClock
from bot.delegations import Delegations
from store.embed_tokens import embed_tokens
from store.repository import Store
from tests.support.api_server import GLOBEX_KEY, Api, assert_error
from tests.support.embed_rig import ELSEWHERE, PARENT, EmbedRig, embedding


@pytest.fixture
async def rig(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[EmbedRig]:
    async with embedding(store, clock, monkeypatch) as one:
        yield one


async def _events(rig: EmbedRig, approval_id: str) -> list[tuple[str, str | None, dict[str, Any]]]:
    async with rig.api.store.read() as tx:
        return [(e.type, e.actor, e.data) for e in await tx.events_for(approval_id)]


# -- minting ---------------------------------------------------------------------------------------


async def test_a_mint_answers_the_page_and_records_the_person_but_never_the_token(
    rig: EmbedRig,
) -> None:
    record = await rig.api.create()
    now = rig.api.clock.now()
    reply = await rig.mint(record["id"], ttl="15m")
    assert reply.status == 201, reply.body
    token = reply.body["token"]
    public_url = str(rig.api.config.server.public_url).rstrip("/")
    assert reply.body == {
        "approval_id": record["id"],
        "person": "alice",
        "parent_origin": PARENT,
        "token": token,
        "url": f"{public_url}/embed/{token}",
        "expires_at": (now + timedelta(minutes=15)).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
    }
    assert len(token) >= 43  # 256 bits
    # Only the token's SHA-256 is stored; nothing in the table is the token.
    async with rig.api.store.read() as tx:
        rows = (await tx.conn.execute(select(embed_tokens))).mappings().all()
    [row] = rows
    assert row["token_hash"] == hashlib.sha256(token.encode()).hexdigest()
    assert token not in {str(v) for v in row.values()}
    assert (row["principal"], row["parent_origin"]) == ("alice", PARENT)
    # The mint is in the request's audit trail, naming the person, by the tenant's agent.
    *_, (kind, actor, data) = await _events(rig, record["id"])
    assert (kind, actor) == ("embed_issued", "agent:acme")
    assert data["person"] == "alice" and data["parent_origin"] == PARENT
    assert data["token"] == row["token_hash"][:16]
    # The default lifetime is ten minutes; an origin is written as browsers write it.
    again = await rig.mint(record["id"], parent_origin="https://Partner.Example:443")
    assert again.status == 201, again.body
    assert again.body["parent_origin"] == PARENT
    assert again.body["expires_at"] == (now + timedelta(minutes=10)).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ"
    )


async def test_a_delegate_may_be_embedded_and_the_requester_only_rejects(rig: EmbedRig) -> None:
    record = await rig.api.create()
    # carol is no approver of payments: refused, until alice delegates to her.
    assert_error(await rig.mint(record["id"], person="carol"), 422, "person_not_entitled")
    delegations = Delegations(rig.api.store, rig.api.directory, rig.api.clock)
    await delegations.create("alice", "carol", created_by="cli:alice", scope="payments.*")
    assert (await rig.mint(record["id"], person="carol")).status == 201

    # sam asked for it (no self-approval on payments): he may reject, never approve.
    frame = await rig.frame(await rig.token(record["id"], person="sam"))
    assert frame.status == 200 and frame.event == "loaded"
    assert frame.dom.all("form", class_="approve") == []
    assert "reject" in frame.dom.one("form", class_="reject").attrs["class"]
    assert "requested" in frame.dom.one("p", class_="why-not").words


# -- deciding ----------------------------------------------------------------------------------


async def test_the_frame_decides_once_as_the_person_against_the_hash_shown(
    rig: EmbedRig,
) -> None:
    record = await rig.api.create()
    token = await rig.token(record["id"])
    frame = await rig.frame(token)
    assert frame.status == 200 and frame.event == "loaded"
    # Framed by the token's origin only, never denied outright; it tells that origin only.
    assert frame.frame_ancestors == PARENT
    assert "X-Frame-Options" not in frame.headers
    assert frame.parents == [PARENT]
    assert frame.headers["Referrer-Policy"] == "no-referrer"
    assert frame.headers["Cache-Control"] == "no-store"
    assert "Set-Cookie" not in frame.headers  # a token opens no session
    assert frame.body.attrs["data-hash"] == record["hash"]
    assert record["presentation"]["title"] in frame.dom.one("h1").words
    approve = frame.form("approve")
    assert approve == {"approval": record["id"], "hash": record["hash"], "action": "approve"}

    done = await rig.post(token, approve)
    assert done.status == 200, done.html
    assert done.event == "decided"
    assert (done.body.attrs["data-decision"], done.body.attrs["data-state"]) == (
        "approve",
        "approved",
    )
    assert done.body.attrs["data-shown"] == record["hash"]
    assert "Approved." in done.dom.one("p", class_="done").words
    got = await rig.api.get(record["id"])
    assert (got["state"], got["decided_by"]) == ("approved", "alice")
    *_, (kind, actor, data) = await _events(rig, record["id"])
    assert (kind, actor, data["shown_hash"]) == ("approved", "embed:alice", record["hash"])

    # Used: the page and its form are refused, with the code the parent hears; nothing moves.
    before = await rig.written()
    again = await rig.frame(token)
    assert (again.status, again.event, again.code) == (410, "error", "embed_token_used")
    assert again.frame_ancestors == PARENT and again.parents == [PARENT]
    reused = await rig.post(token, approve)
    assert (reused.status, reused.code) == (410, "embed_token_used")
    assert await rig.written() == before


async def test_a_refused_decision_spends_nothing_and_is_recorded(rig: EmbedRig) -> None:
    record = await rig.api.create()
    token = await rig.token(record["id"], person="bob")
    reject = (await rig.frame(token)).form("reject")
    # A page showing an older revision decides nothing; the refusal is in the trail.
    stale = await rig.post(token, {**reject, "hash": "0" * 64})
    assert (stale.status, stale.event, stale.code) == (409, "error", "approval_changed")
    assert "out of date" in stale.dom.one("section", class_="refusal").words
    *_, (kind, actor, data) = await _events(rig, record["id"])
    assert (kind, actor, data["code"]) == ("refused", "embed:bob", "approval_changed")
    # The token still decides, once.
    done = await rig.post(token, {**reject, "note": "not this quarter"})
    assert (done.status, done.event) == (200, "decided"), done.html
    got = await rig.api.get(record["id"])
    assert (got["state"], got["decided_by"], got["decision_note"]) == (
        "rejected",
        "bob",
        "not this quarter",
    )


async def test_a_request_decided_elsewhere_shows_its_outcome_and_tells_the_parent(
    rig: EmbedRig,
) -> None:
    record = await rig.api.create()
    token = await rig.token(record["id"])
    await rig.api.approve(record)  # alice, from the CLI
    frame = await rig.frame(token)
    assert (frame.status, frame.event, frame.code) == (409, "error", "not_pending")
    assert frame.dom.all("form") == []
    assert frame.dom.one("article").attrs["data-state"] == "approved"


async def test_a_quorum_vote_in_the_frame_leaves_the_request_pending(rig: EmbedRig) -> None:
    record = await rig.api.create(capability="quorum.payout", run_id="run-quorum")
    token = await rig.token(record["id"], person="bob")
    done = await rig.post(token, (await rig.frame(token)).form("approve"))
    assert (done.event, done.body.attrs["data-state"]) == ("decided", "pending")
    assert "1 of 2" in done.dom.one("p", class_="done").words
    # A second token for bob shows the card without buttons, and says why to the parent.
    again = await rig.frame(await rig.token(record["id"], person="bob"))
    assert (again.status, again.event, again.code) == (409, "error", "already_voted")
    assert again.dom.all("form") == []
    assert "Your vote is recorded" in again.dom.one("p", class_="why-not").words


# -- bad input: each a 4xx with a stable code, nothing written ----------------------------------


async def test_bad_mints_are_refused_and_write_nothing(rig: EmbedRig) -> None:
    record = await rig.api.create()
    theirs = await rig.api.create(key=GLOBEX_KEY, capability="payments.refund")
    cases: list[tuple[str, dict[str, Any], int, str]] = [
        ("origin not allowed", {"parent_origin": ELSEWHERE}, 422, "origin_not_allowed"),
        ("origin with a path", {"parent_origin": PARENT + "/app"}, 422, "invalid_request"),
        ("ttl over an hour", {"ttl": "61m"}, 422, "invalid_request"),
        ("ttl not a duration", {"ttl": "soon"}, 422, "invalid_request"),
        ("unknown person", {"person": "mallory"}, 422, "unknown_person"),
        ("person not entitled", {"person": "dave"}, 422, "person_not_entitled"),
        ("no person", {"person": None}, 422, "invalid_request"),
        ("unknown field", {"scope": "all"}, 422, "invalid_request"),
    ]
    before = await rig.written()
    for name, body, status, code in cases:
        error = assert_error(await rig.mint(record["id"], **body), status, code)
        assert error["message"], name
    ttl = assert_error(await rig.mint(record["id"], ttl="2h"), 422, "invalid_request")
    assert ttl["fields"][0]["field"] == "ttl"
    # Another tenant's request is not there for this key; an unknown id neither.
    assert_error(await rig.mint(theirs["id"]), 404, "not_found")
    assert_error(await rig.mint("0b7d1c4e-8a59-4c35-9d0e-3f1a2b3c4d5e"), 404, "not_found")
    assert_error(await rig.mint(record["id"], key=None), 401, "unauthorized")
    assert_error(await rig.mint(record["id"], key="wrong"), 401, "unauthorized")
    assert await rig.written() == before

    # A request no longer pending: 409, as every action on it.
    await rig.api.approve(record)
    before = await rig.written()
    assert_error(await rig.mint(record["id"]), 409, "not_pending")
    assert await rig.written() == before
    # One whose clock ran out: 410.
    late = await rig.api.create(run_id="run-late", approval_ttl="1h")
    rig.api.clock.advance(timedelta(hours=2))
    before = await rig.written()
    assert_error(await rig.mint(late["id"]), 410, "expired")
    assert await rig.written() == before


async def test_bad_tokens_are_refused_and_write_nothing(rig: EmbedRig) -> None:
    record = await rig.api.create()
    other = await rig.api.create(run_id="run-2")
    token = await rig.token(record["id"], ttl="1m")
    approve = (await rig.frame(token)).form("approve")
    before = await rig.written()

    # A token with the form of another request (its id and hash).
    mixed = await rig.post(token, {**approve, "approval": other["id"], "hash": other["hash"]})
    assert (mixed.status, mixed.code) == (403, "embed_other_request")
    # A form sent from another site's page.
    forged = await rig.post(token, approve, site="cross-site")
    assert (forged.status, forged.code) == (403, "cross_site")
    # A token never issued: refused; it may only be framed by an allowed origin.
    unknown = await rig.frame("A" * 43)
    assert (unknown.status, unknown.code) == (404, "embed_token_unknown")
    assert unknown.frame_ancestors == PARENT
    assert (await rig.post("A" * 43, approve)).status == 404
    assert await rig.written() == before

    # Past its minute: 410 expired, the page and its form alike.
    rig.api.clock.advance(timedelta(minutes=1))
    expired = await rig.frame(token)
    assert (expired.status, expired.event, expired.code) == (410, "error", "embed_token_expired")
    assert (await rig.post(token, approve)).code == "embed_token_expired"
    assert await rig.written() == before
    assert (await rig.api.get(record["id"]))["state"] == "pending"


async def test_an_origin_no_longer_allowed_frames_nothing(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with embedding(store, clock, monkeypatch) as rig:
        record = await rig.api.create()
        token = await rig.token(record["id"])
    # The deployment restarts allowing another origin only.
    async with embedding(store, clock, monkeypatch, origins=(ELSEWHERE,)) as rig:
        frame = await rig.frame(token)
        assert (frame.status, frame.code) == (403, "embed_origin_not_allowed")
        assert frame.frame_ancestors == "'none'" and frame.parents == []
        before = await rig.written()
        posted = await rig.post(token, {"approval": record["id"], "action": "approve"})
        assert posted.status == 403
        assert await rig.written() == before


async def test_without_web_every_mint_says_embedding_is_off(api: Api) -> None:
    record = await api.create()
    reply = await api.call(
        "POST",
        f"/v1/approvals/{record['id']}/embed",
        {"person": "alice", "parent_origin": PARENT},
    )
    error = assert_error(reply, 422, "origin_not_allowed")
    assert "embedding is off" in error["message"]


async def test_no_other_page_or_route_takes_an_embed_token(rig: EmbedRig) -> None:
    record = await rig.api.create()
    token = await rig.token(record["id"])
    # Not an API key.
    reply = await rig.api.call("GET", f"/v1/approvals/{record['id']}", key=token)
    assert_error(reply, 401, "unauthorized")
    # Not a sign-in link, and it opens no session for the inbox.
    async with rig.http.post(f"{rig.url}/web/login/{token}", allow_redirects=False) as r:
        assert r.status == 403 and "Set-Cookie" not in r.headers
    async with rig.http.get(f"{rig.url}/web/inbox") as r:
        assert r.status == 401
    # Still unused: the refusals elsewhere did not touch it.
    assert (await rig.frame(token)).status == 200
