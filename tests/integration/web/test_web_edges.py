"""The web surface's edges: where a POST may come from, the headers every answer carries,
what agent text with invisible characters looks like, and how many refusals one person can
add to a request's trail. The real application on a loopback port, requests written byte for
byte (tests/support/edge_rig.py), on SQLite and PostgreSQL.

Proves: a POST under /web or /dashboard (the sign-in link's included) whose Origin or
Sec-Fetch-Site names another site is 403 and writes nothing, while one from our own origin
(the public URL's, or the Host it was sent to), from the same origin by Sec-Fetch-Site, or
from a program sending neither header is served; every web answer says `nosniff` and
`no-referrer`; bidi controls and zero-width characters in a title, an argument, the
run id, the requester or a note are shown as escapes on the approval page, the inbox, the
dashboard and its timeline, and the Slack and Telegram cards, while the request keeps them;
a person repeating a refused POST adds three `refused` events to the trail and then only a
count, which the dashboard shows, and the chain still verifies.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from bot.audit import verify
from bot.clock import FakeClock
from store.repository import Store
from tests.support.api_server import Api
from tests.support.edge_rig import FORM, PUBLIC_URL, Rig, running


@pytest.fixture
async def rig(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Rig]:
    async with running(store, clock, monkeypatch) as rig:
        yield rig


CROSS_SITE = [
    [(b"Origin", b"https://evil.example")],
    [(b"Origin", b"null")],  # a sandboxed frame, or a page with no-referrer (no Sec-Fetch-Site)
    [(b"Origin", b"http://signoff.example.com.evil.example")],
    [(b"Origin", b"https://signoff.example.com")],  # another scheme than the public URL's
    [(b"Origin", b"\xe9\xff")],
    [(b"Sec-Fetch-Site", b"cross-site")],
    [(b"Sec-Fetch-Site", b"same-site")],  # a sibling subdomain is another party
    [(b"Origin", PUBLIC_URL.encode()), (b"Sec-Fetch-Site", b"cross-site")],
]


@pytest.mark.parametrize(
    "headers", CROSS_SITE, ids=lambda h: b" ".join(v for _, v in h).decode("latin-1")
)
async def test_a_cross_site_sign_in_is_refused_and_leaves_the_link_unused(
    rig: Rig, headers: list[tuple[bytes, bytes]]
) -> None:
    token = await rig.links.make("bob")
    before = await rig.snapshot()
    refused = await rig.raw(b"POST", f"/web/login/{token}".encode(), headers)
    assert refused.status == 403
    assert b"another site" in refused.body
    assert b"set-cookie" not in refused.headers
    assert await rig.snapshot() == before
    # The person opening their own link still signs in with it.
    own = [(b"Origin", PUBLIC_URL.encode()), (b"Sec-Fetch-Site", b"same-origin")]
    used = await rig.raw(b"POST", f"/web/login/{token}".encode(), own)
    assert used.status == 303 and b"signoff_session=" in used.headers[b"set-cookie"]


async def test_every_web_post_refuses_another_sites_origin_and_writes_nothing(rig: Rig) -> None:
    record = await rig.create()
    cookie, csrf = await rig.signed_in("alice")  # an operator
    forms = {
        f"/web/approvals/{record['id']}/approve": f"hash={record['hash']}&csrf={csrf}",
        f"/web/approvals/{record['id']}/reject": f"hash={record['hash']}&csrf={csrf}&note=no",
        f"/web/approvals/{record['id']}/delegate": f"hash={record['hash']}&csrf={csrf}&to=bob",
        "/dashboard/outbox/1/retry": f"csrf={csrf}",
        "/web/logout": f"csrf={csrf}",
    }
    before = await rig.snapshot()
    for path, form in forms.items():
        for headers in CROSS_SITE:
            sent = [(b"Cookie", cookie), (b"Content-Type", FORM), *headers]
            reply = await rig.raw(b"POST", path.encode(), sent, form.encode())
            assert reply.status == 403, (path, headers, reply.status)
    assert await rig.snapshot() == before
    # The session is still good: logging out cross-site did nothing either.
    assert (await rig.raw(b"GET", b"/web/inbox", [(b"Cookie", cookie)])).status == 200


@pytest.mark.parametrize(
    "headers",
    [
        [(b"Origin", PUBLIC_URL.encode())],
        [(b"Origin", b"HTTP://Signoff.Example.COM:80")],
        [(b"Origin", b"<HOST>")],  # reached under the address it was sent to
        [(b"Sec-Fetch-Site", b"same-origin")],
        # Our own page under our `Referrer-Policy: no-referrer`, as Chromium sends it.
        [(b"Origin", b"null"), (b"Sec-Fetch-Site", b"same-origin")],
        [(b"Sec-Fetch-Site", b"none")],  # typed or bookmarked: the user's own doing
        [],  # curl or a script: no browser, so no other site's page behind it
    ],
    ids=[
        "public origin",
        "public origin spelled otherwise",
        "host",
        "same-origin",
        "null origin, same-origin",
        "none",
        "neither",
    ],
)
async def test_a_post_from_our_own_pages_or_a_program_is_served(
    rig: Rig, headers: list[tuple[bytes, bytes]]
) -> None:
    record = await rig.create()
    cookie, csrf = await rig.signed_in("alice")
    own = f"http://127.0.0.1:{rig.port}".encode()
    headers = [(k, own if v == b"<HOST>" else v) for k, v in headers]
    token = await rig.links.make("bob")
    assert (await rig.raw(b"POST", f"/web/login/{token}".encode(), headers)).status == 303
    form = f"hash={record['hash']}&csrf={csrf}".encode()
    sent = [(b"Cookie", cookie), (b"Content-Type", FORM), *headers]
    approved = await rig.raw(b"POST", f"/web/approvals/{record['id']}/approve".encode(), sent, form)
    assert approved.status == 303
    assert (await rig.state(record["id"])).state == "approved"


async def test_every_web_answer_says_nosniff_and_no_referrer(rig: Rig) -> None:
    record = await rig.create()
    cookie, csrf = await rig.signed_in("alice")
    token = await rig.links.make("bob")
    answers = [
        await rig.raw(b"GET", b"/web/inbox", [(b"Cookie", cookie)]),
        await rig.raw(b"GET", b"/web/inbox"),  # the 401 sign-in page
        await rig.raw(b"GET", f"/web/login/{token}".encode()),  # the link's own page
        await rig.raw(b"GET", b"/web/static/web.css"),
        await rig.raw(b"GET", b"/dashboard", [(b"Cookie", cookie)]),
        await rig.raw(
            b"GET", f"/dashboard/approvals/{record['id']}".encode(), [(b"Cookie", cookie)]
        ),
        await rig.raw(b"GET", b"/web"),  # a redirect
        await rig.raw(b"POST", f"/web/login/{token}".encode()),  # a redirect with a cookie
        await rig.raw(
            b"POST",
            f"/web/approvals/{record['id']}/approve".encode(),
            [(b"Cookie", cookie), (b"Content-Type", FORM)],
            f"hash={'ab' * 32}&csrf={csrf}".encode(),
        ),  # a refusal
        await rig.raw(b"POST", b"/web/logout", [(b"Origin", b"https://evil.example")]),
        await rig.raw(b"GET", b"/web/no-such-page"),
    ]
    for answer in answers:
        assert answer.headers.get(b"x-content-type-options") == b"nosniff", answer
        assert answer.headers.get(b"referrer-policy") == b"no-referrer", answer


# -- Trojan Source -------------------------------------------------------------------------------

RLO, ZWSP, LRI, PDI = "\u202e", "\u200b", "\u2066", "\u2069"


async def test_invisible_characters_are_shown_on_every_surface(rig: Rig) -> None:
    record = await rig.create(
        run_id=f"run{RLO}1",
        presentation={"title": f"Refund {RLO}0009 €", "summary": f"ok{LRI}x{PDI}"},
        tool={"name": "stripe.refunds.create", "arguments": {"customer": f"delete{ZWSP}_it"}},
        requested_by=f"sam{ZWSP}",
    )
    cookie, csrf = await rig.signed_in("alice")
    await rig.drain()  # the cards go to Slack and Telegram
    page = await rig.raw(b"GET", f"/web/approvals/{record['id']}".encode(), [(b"Cookie", cookie)])
    inbox = await rig.raw(b"GET", b"/web/inbox", [(b"Cookie", cookie)])
    # Approved from the page with a note of its own, so the timeline has that to show too.
    form = f"hash={record['hash']}&csrf={csrf}&note=fine%E2%80%AE".encode()
    sent = [(b"Cookie", cookie), (b"Content-Type", FORM)]
    path = f"/web/approvals/{record['id']}/approve".encode()
    assert (await rig.raw(b"POST", path, sent, form)).status == 303
    timeline = await rig.raw(
        b"GET", f"/dashboard/approvals/{record['id']}".encode(), [(b"Cookie", cookie)]
    )
    dashboard = await rig.raw(b"GET", b"/dashboard", [(b"Cookie", cookie)])
    [slack] = [c.args for c in rig.slack.calls_to("chat.postMessage", ok=True)]
    [telegram] = [c.args for c in rig.tg.calls_to("sendMessage", ok=True)]
    shown = {
        "approval page": page.body.decode(),
        "inbox": inbox.body.decode(),
        "timeline": timeline.body.decode(),
        "dashboard": dashboard.body.decode(),
        "Slack card": json.dumps(slack["blocks"], ensure_ascii=False).replace("\\\\", "\\"),
        "Telegram card": telegram["text"],
    }
    for surface, text in shown.items():
        assert not {RLO, ZWSP, LRI, PDI} & set(text), surface
        assert "Refund \\u202e0009" in text, surface
    for surface in ("approval page", "Slack card", "Telegram card"):
        assert "delete\\u200b_it" in shown[surface], surface
    assert "run\\u202e1" in shown["timeline"] and "sam\\u200b" in shown["timeline"]
    assert "fine\\u202e" in shown["timeline"]
    # What the agent sent is kept as sent.
    stored = await rig.state(record["id"])
    assert stored.presentation["title"] == f"Refund {RLO}0009 €"
    assert stored.decision_note == f"fine{RLO}"


# -- refusals, bounded ---------------------------------------------------------------------------


async def test_a_person_repeating_a_refused_post_adds_three_events_and_a_count(rig: Rig) -> None:
    record = await rig.create()  # payments: group finance (alice, bob, sam); dave is not in it
    dave_cookie, dave_csrf = await rig.signed_in("dave")
    carol_cookie, carol_csrf = await rig.signed_in("carol")
    path = f"/web/approvals/{record['id']}/approve".encode()

    async def post(cookie: bytes, csrf: str) -> int:
        form = f"hash={record['hash']}&csrf={csrf}".encode()
        sent = [(b"Cookie", cookie), (b"Content-Type", FORM)]
        return (await rig.raw(b"POST", path, sent, form)).status

    for _ in range(30):
        assert await post(dave_cookie, dave_csrf) == 403
    assert await post(carol_cookie, carol_csrf) == 403
    rig.clock.advance(minutes=5)
    assert await post(dave_cookie, dave_csrf) == 403  # still told why, every time

    events = await rig.events(record["id"])
    assert [(e.type, e.actor) for e in events] == [
        ("requested", "agent:acme"),
        ("refused", "web:dave"),
        ("refused", "web:dave"),
        ("refused", "web:dave"),
        ("refused", "web:carol"),
    ]
    assert "further_refusals" in events[3].data and "further_refusals" not in events[2].data
    assert (await verify(rig.store, record["id"])).broken is None
    async with rig.store.read() as tx:
        counts = {c.actor: c for c in await tx.refusal_counts(record["id"])}
    assert {actor: c.refused for actor, c in counts.items()} == {"web:dave": 31, "web:carol": 1}
    assert counts["web:dave"].last_at == rig.clock.now()
    assert (counts["web:dave"].last_action, counts["web:dave"].last_code) == (
        "approve",
        "not_an_approver",
    )
    # The operator sees every one counted beside the timeline.
    alice_cookie, _ = await rig.signed_in("alice")
    page = await rig.raw(
        b"GET", f"/dashboard/approvals/{record['id']}".encode(), [(b"Cookie", alice_cookie)]
    )
    assert b'data-actor="web:dave" data-refused="31"' in page.body
    assert (await rig.state(record["id"])).state == "pending"


async def test_without_the_web_surface_the_root_url_names_the_api_and_health(api: Api) -> None:
    """No [web]: `/` is a small page (or JSON, asked for) naming where to go, not a 404; the
    agent API's JSON 404 for a path it does not have is unchanged."""
    page = await api.call("GET", "/", key=None, headers={"Accept": "text/html"})
    assert page.status == 200 and page.headers["Content-Type"].startswith("text/html")
    for path in ("/healthz", "/readyz", "/v1/approvals", "/v1/openapi.json"):
        assert f'href="{path}"' in page.body, page.body
    listed = await api.call("GET", "/", key=None, headers={"Accept": "application/json"})
    assert listed.status == 200
    assert listed.body["links"]["health"] == "/healthz"
    assert listed.body["links"]["openapi"] == "/v1/openapi.json"
    for path in listed.body["links"].values():
        assert (await api.call("GET", path)).status == 200, path
    unknown = await api.call("GET", "/v1/nothing-here")
    assert unknown.status == 404
    assert unknown.body["error"] == {
        "code": "not_found",
        "message": "no such endpoint: GET /v1/nothing-here",
    }
    assert (await api.call("GET", "/nothing-here", key=None)).status == 404
