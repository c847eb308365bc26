"""Unauthenticated input that is not what any browser, Slack or Telegram would send: never a
500, never a write. The real application with [web], [slack] and [telegram] on a loopback
port, spoken to over raw sockets (an HTTP client library would refuse to send most of these
bytes), on SQLite and PostgreSQL.

Proves: a session cookie, an Origin, a CSRF field, a Telegram secret token or a Slack
timestamp or signature that is not ASCII, not UTF-8 or absurdly long, a form body that is not
UTF-8 and a Content-Type naming a charset that does not exist are each answered 4xx (or as a
visitor who is not signed in) with nothing written; and a bounded fuzz of arbitrary bytes in
bodies, headers and cookies sent to /web/*, /dashboard, /slack/events and /telegram/webhook
gets no 5xx and writes nothing (signed Slack bodies only their replay-guard row).
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote, unquote_to_bytes

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from bot.clock import FakeClock
from store.repository import Store
from store.schema import inbound_deliveries
from tests.fakes.slack_inbound import sign
from tests.support.edge_rig import FORM, SLACK_SECRET, TG_SECRET, Reply, Rig, running

# Per database, a few seconds: drawing and sending each case costs CPU, and a share of the
# cases is aimed at each finding. The suite's run is derandomized: the same requests every
# time, so the check below that they include every input that broke cannot flake;
# SIGNOFF_FUZZ_RANDOM=1 (and SIGNOFF_FUZZ_CASES=N) draws new ones, for a longer hunt.
FUZZ_CASES = int(os.environ.get("SIGNOFF_FUZZ_CASES", "150"))
FUZZ_RANDOM = os.environ.get("SIGNOFF_FUZZ_RANDOM") == "1"


@pytest.fixture
async def rig(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Rig]:
    async with running(store, clock, monkeypatch) as rig:
        yield rig


@pytest.fixture
def no_tracebacks(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """The test's requests logged no traceback and no error (a 4xx is not an error)."""
    yield
    crashed = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not crashed, [r.getMessage() for r in crashed]


# -- the findings, one by one --------------------------------------------------------------------


@pytest.mark.parametrize("cookie", [b"\xe9", b"\xc3\xa9", b"\xff\xfe", "Zoë".encode(), b"a" * 5000])
async def test_a_session_cookie_that_is_not_ascii_is_a_signed_out_visitor(
    rig: Rig, cookie: bytes, no_tracebacks: None
) -> None:
    record = await rig.create()
    before = await rig.snapshot()
    for path in (b"/web/inbox", b"/dashboard", f"/web/approvals/{record['id']}".encode()):
        reply = await rig.raw(b"GET", path, [(b"Cookie", b"signoff_session=" + cookie)])
        assert reply.status == 401, (path, reply)
    posted = await rig.raw(
        b"POST",
        f"/web/approvals/{record['id']}/approve".encode(),
        [(b"Cookie", b"signoff_session=" + cookie), (b"Content-Type", FORM)],
        f"hash={record['hash']}&csrf=x".encode(),
    )
    assert posted.status == 401
    assert await rig.snapshot() == before


async def test_a_csrf_field_that_is_not_ascii_is_refused(rig: Rig, no_tracebacks: None) -> None:
    record = await rig.create()
    cookie, _csrf = await rig.signed_in()
    before = await rig.snapshot()
    for csrf in ("%C3%A9", "%FF%FE", "Zo%C3%AB" * 20):
        reply = await rig.raw(
            b"POST",
            f"/web/approvals/{record['id']}/approve".encode(),
            [(b"Cookie", cookie), (b"Content-Type", FORM)],
            f"hash={record['hash']}&csrf={csrf}".encode(),
        )
        # 400 when the field is not UTF-8 at all (the form cannot be read), else 403.
        assert reply.status in (400, 403), reply
    assert await rig.snapshot() == before


def _except_replay_guards(snapshot: dict[str, Any]) -> dict[str, Any]:
    """A signed Slack request or a Telegram update with the right secret leaves its replay
    guard row behind; nothing else may change."""
    return {k: v for k, v in snapshot.items() if k != inbound_deliveries.name}


@pytest.mark.parametrize("charset", [b"bogus", b"utf-7", b"\xff", b"utf-16"])
async def test_a_content_type_with_a_charset_that_does_not_exist_is_not_a_500(
    rig: Rig, charset: bytes, no_tracebacks: None
) -> None:
    record = await rig.create()
    cookie, csrf = await rig.signed_in()
    before = await rig.snapshot()
    # A web form in anything but UTF-8 is not one of our pages' forms: refused, not guessed.
    web_form = await rig.raw(
        b"POST",
        f"/web/approvals/{record['id']}/approve".encode(),
        [(b"Cookie", cookie), (b"Content-Type", FORM + b"; charset=" + charset)],
        f"hash={record['hash']}&csrf={csrf}".encode(),
    )
    assert web_form.status == 400, web_form
    assert await rig.snapshot() == before
    # Slack and Telegram send UTF-8 and say so; an authenticated body is read as UTF-8
    # whatever the header claims (it used to be read by the claimed charset: a 500).
    telegram = await rig.raw(
        b"POST",
        b"/telegram/webhook",
        [
            (b"X-Telegram-Bot-Api-Secret-Token", TG_SECRET.encode()),
            (b"Content-Type", b"application/json; charset=" + charset),
        ],
        b'{"update_id": 1}',
    )
    assert telegram.status == 200, telegram
    body = b"command=%2Fsignoff&user_id=U0ALICE&text=delegations"
    slack = await rig.raw(
        b"POST",
        b"/slack/events",
        [
            (b"Content-Type", FORM + b"; charset=" + charset),
            *((k.encode(), v.encode()) for k, v in sign(SLACK_SECRET, body).items()),
        ],
        body,
    )
    assert slack.status == 200 and b"No active or scheduled delegations" in slack.body, slack
    assert _except_replay_guards(await rig.snapshot()) == _except_replay_guards(before)


async def test_a_slack_body_that_is_not_utf8_is_refused(rig: Rig, no_tracebacks: None) -> None:
    before = await rig.snapshot()
    body = b"payload=\xff\xfe"
    now = str(int(time.time())).encode()
    for signature in (b"v0=" + b"0" * 64, b"v0=\xff", b"anything"):
        reply = await rig.raw(
            b"POST",
            b"/slack/events",
            [
                (b"Content-Type", FORM),
                (b"X-Slack-Request-Timestamp", now),
                (b"X-Slack-Signature", signature),
            ],
            body,
        )
        assert reply.status in (400, 401), reply
    # Signed with the right secret, it is still not a body Slack sends.
    signed = [(k.encode(), v.encode()) for k, v in sign(SLACK_SECRET, body).items()]
    reply = await rig.raw(b"POST", b"/slack/events", [(b"Content-Type", FORM), *signed], body)
    assert reply.status == 400, reply
    assert _except_replay_guards(await rig.snapshot()) == _except_replay_guards(before)


@pytest.mark.parametrize(
    "timestamp",
    [b"1" * 4300, b"9" * 8000, "١٧٠٠٠٠٠٠٠٠".encode(), b"\xff", b"-1", b"+1700000000", b"1e9"],
    ids=[
        "4300 digits",
        "8000 digits",
        "arabic digits",
        "not utf-8",
        "negative",
        "plus",
        "exponent",
    ],
)
async def test_a_slack_timestamp_that_is_not_a_plain_number_is_401(
    rig: Rig, timestamp: bytes, no_tracebacks: None
) -> None:
    before = await rig.snapshot()
    reply = await rig.raw(
        b"POST",
        b"/slack/events",
        [
            (b"Content-Type", FORM),
            (b"X-Slack-Request-Timestamp", timestamp),
            (b"X-Slack-Signature", b"v0=" + b"0" * 64),
        ],
        b"payload=%7B%7D",
    )
    assert reply.status == 401, reply
    assert await rig.snapshot() == before


@pytest.mark.parametrize("signature", [b"v0=\xe9", "v0=é".encode(), b"\xff" * 70])
async def test_a_slack_signature_that_is_not_ascii_is_401(
    rig: Rig, signature: bytes, no_tracebacks: None
) -> None:
    before = await rig.snapshot()
    body = b"payload=%7B%7D"
    reply = await rig.raw(
        b"POST",
        b"/slack/events",
        [
            (b"Content-Type", FORM),
            (b"X-Slack-Request-Timestamp", str(int(time.time())).encode()),
            (b"X-Slack-Signature", signature),
        ],
        body,
    )
    assert reply.status == 401, reply
    assert await rig.snapshot() == before


@pytest.mark.parametrize(
    "secret", [b"\xe9", "é".encode(), b"\xff\xfe" * 100, TG_SECRET.encode() + b"\xe9"]
)
async def test_a_telegram_secret_token_that_is_not_utf8_is_403(
    rig: Rig, secret: bytes, no_tracebacks: None
) -> None:
    before = await rig.snapshot()
    reply = await rig.raw(
        b"POST",
        b"/telegram/webhook",
        [(b"X-Telegram-Bot-Api-Secret-Token", secret), (b"Content-Type", b"application/json")],
        b'{"update_id": 5}',
    )
    assert reply.status == 403, reply
    assert await rig.snapshot() == before


# -- the fuzz ------------------------------------------------------------------------------------
#
# Requests are drawn by hypothesis first, then sent (hypothesis does not drive coroutines), so
# a failure names the whole request. Each is aimed at one endpoint with the headers that
# endpoint reads, their values leaning on what broke before: bytes that are not ASCII or not
# UTF-8, runs of digits thousands long, charsets that do not exist. Markers such as <SESSION>
# are replaced when sent by the real thing (a live session cookie, its CSRF token, the time
# now, Slack's signature, the Telegram secret), so the fuzz also reaches what lies behind
# each check. The test counts what it sent, so a strategy that stopped producing one of the
# inputs behind the first round's 500s fails it rather than passing quietly.

_HAZARDS = [
    b"\xe9",
    b"\xff\xfe",
    b"\xc3",
    b"\xed\xa0\x80",
    b"\x80\x80\x80",
    "é".encode(),
    "Zoë\u202e".encode(),
    b"%FF%FE",
    b"9" * 4301,  # int() refuses more than 4,300 digits
    b"1" * 5000,
    b"-1",
    b"\x7f\x01",
    b"bogus",
]
_JUNK = st.one_of(
    st.sampled_from(_HAZARDS),
    st.binary(min_size=1, max_size=40),
    st.text(min_size=1, max_size=20).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.integers(4301, 7000).map(lambda n: b"7" * n),
).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b"").replace(b"\x00", b"") or b"x")


def _or_none(strategy: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes | None]:
    return st.one_of(st.none(), strategy)


_CONTENT_TYPE = st.tuples(
    st.sampled_from([FORM, FORM, b"application/json", b"multipart/form-data", b"text/plain"]),
    st.one_of(st.just(b""), st.just(b"; charset=utf-8"), _JUNK.map(lambda c: b"; charset=" + c)),
).map(b"".join)
_PAGES = ["/web/inbox", "/web/inbox?partial=1&after=\udce9", "/web", "/dashboard"]
_PAGES += ["/dashboard/approvals/<ID>", "/web/approvals/<ID>", "/web/login/<JUNK>"]
_FORMS = ["/web/approvals/<ID>/approve", "/web/approvals/<ID>/reject"]
_FORMS += ["/web/approvals/<ID>/delegate", "/web/logout", "/dashboard/outbox/1/retry"]
_WEB_HEADERS = {
    b"Cookie": st.one_of(
        st.just(b"<SESSION>"), _JUNK.map(lambda v: b"signoff_session=" + v), _JUNK
    ),
    b"Origin": st.one_of(
        st.just(b"<SELF>"), st.just(b"https://evil.example"), st.just(b"null"), _JUNK
    ),
    b"Sec-Fetch-Site": st.one_of(st.sampled_from([b"same-origin", b"cross-site", b"none"]), _JUNK),
    b"Referer": _JUNK,
}


@dataclass(frozen=True)
class Case:
    method: bytes
    path: str
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes

    def header(self, name: bytes) -> bytes | None:
        return next((v for k, v in self.headers if k == name), None)

    def but(self, name: bytes, value: bytes) -> Case:
        """This request with header `name` set to `value`."""
        return replace(
            self, headers=(*((k, v) for k, v in self.headers if k != name), (name, value))
        )

    @property
    def authenticated(self) -> bool:
        """Whether it carries real credentials a browser on our own page, Slack or Telegram
        would send: a session with its CSRF token, a sign-in link from our page, Slack's
        signature, Telegram's secret. Such a request may write (a refusal recorded, a link
        used, a replay guard); any other must not."""
        if self.path == "/web/login/<TOKEN>":
            # channels/web/channel.py's cross_site: Sec-Fetch-Site decides when sent, else Origin.
            origin, site = self.header(b"Origin"), self.header(b"Sec-Fetch-Site")
            if site is not None:
                return site in (b"same-origin", b"none")
            return origin in (None, b"<SELF>")
        session = self.header(b"Cookie") == b"<SESSION>" and b"<CSRF>" in self.body
        slack = self.header(b"X-Slack-Signature") == b"<SIGNED>"
        return session or slack or self.header(b"X-Telegram-Bot-Api-Secret-Token") == b"<TG>"


@st.composite
def _cases(draw: st.DrawFn, target: str | None = None) -> Case:
    target = target or draw(st.sampled_from(["page", "form", "form", "login", "slack", "telegram"]))
    headers: dict[bytes, bytes | None] = {}
    if target in ("page", "form", "login"):
        for name, values in _WEB_HEADERS.items():
            headers[name] = draw(_or_none(values))
    if target == "page":
        return Case(b"GET", draw(st.sampled_from(_PAGES)), _present(headers), b"")
    headers[b"Content-Type"] = draw(_CONTENT_TYPE)
    if target == "form":
        # Mostly signed in: the form is read only behind a session.
        headers[b"Cookie"] = draw(st.one_of(st.just(b"<SESSION>"), _WEB_HEADERS[b"Cookie"]))
        # hypothesis leans towards the first choice of a one_of: the hazards come first.
        field = st.one_of(
            st.sampled_from([b"%C3%A9", b"%FF%FE", "é".encode()]), _JUNK, st.just(b"<CSRF>")
        )
        form = st.tuples(_JUNK, field, _JUNK).map(
            lambda f: b"hash=" + f[0] + b"&csrf=" + f[1] + b"&to=bob&note=" + f[2]
        )
        body = draw(st.one_of(form, st.binary(max_size=200)))
        return Case(b"POST", draw(st.sampled_from(_FORMS)), _present(headers), body)
    if target == "login":
        return Case(b"POST", "/web/login/<TOKEN>", _present(headers), draw(st.binary(max_size=50)))
    if target == "slack":
        # Mostly the time now: the body is read only within the window.
        headers[b"X-Slack-Request-Timestamp"] = draw(
            st.one_of(st.just(b"<NOW>"), _JUNK, st.just(b"<NOW>"), st.none())
        )
        headers[b"X-Slack-Signature"] = draw(
            _or_none(st.one_of(st.just(b"<SIGNED>"), _JUNK.map(lambda v: b"v0=" + v), _JUNK))
        )
        headers[b"X-Slack-Retry-Num"] = draw(_or_none(_JUNK))
        body = draw(
            st.one_of(
                # First (hypothesis leans to it): a body the gate lets through to Bolt.
                st.text(max_size=30).map(
                    lambda t: (
                        b"command=%2Fsignoff&user_id=U0ALICE&text="
                        + quote(t, errors="surrogatepass").encode()
                    )
                ),
                st.binary(max_size=200),
                _JUNK.map(lambda v: b"payload=" + v),
                st.sampled_from(_HAZARDS[:5]).map(lambda v: b"payload=" + v),
                _JUNK.map(lambda v: b"command=%2Fsignoff&user_id=U0ALICE&text=" + v),
                _JUNK.map(lambda v: b'{"type": "event_callback", "event": ' + v + b"}"),
            )
        )
        return Case(b"POST", "/slack/events", _present(headers), body)
    headers[b"X-Telegram-Bot-Api-Secret-Token"] = draw(
        _or_none(st.one_of(st.just(b"<TG>"), _JUNK.map(lambda v: b"<TG>" + v), _JUNK))
    )
    body = draw(
        st.one_of(
            st.binary(max_size=200),
            _JUNK.map(lambda v: b'{"update_id": 7, "message": ' + v + b"}"),
            _JUNK.map(lambda v: b'{"update_id": 8, "callback_query": {"data": "' + v + b'"}}'),
        )
    )
    return Case(b"POST", "/telegram/webhook", _present(headers), body)


def _present(headers: dict[bytes, bytes | None]) -> tuple[tuple[bytes, bytes], ...]:
    return tuple((k, v) for k, v in headers.items() if v is not None)


_NOT_UTF8 = st.sampled_from([b"\xe9", b"\xff\xfe", b"\xc3", b"\xed\xa0\x80", b"\x80\x80\x80"])
_BAD_CHARSET = st.one_of(st.sampled_from([b"bogus", b"utf-16", b"utf-7", b"\xff"]), _JUNK)


@st.composite
def _aimed(draw: st.DrawFn, aim: str) -> Case:
    """A request that carries the input behind finding `aim` (see _FINDINGS), the rest of it
    drawn freely: hypothesis leans towards a strategy's first choices, so left to itself a
    run may send none of some kind of input."""
    if aim == "session cookie not UTF-8":
        case = draw(_cases(draw(st.sampled_from(["page", "form"]))))
        return case.but(b"Cookie", b"signoff_session=" + draw(_NOT_UTF8))
    if aim == "Origin not UTF-8 on a POST":
        case = draw(_cases(draw(st.sampled_from(["login", "form"]))))
        return case.but(b"Origin", draw(_NOT_UTF8) + draw(_JUNK))
    if aim == "Slack body not UTF-8":
        case = draw(_cases("slack")).but(b"X-Slack-Request-Timestamp", b"<NOW>")
        return replace(case, body=b"payload=" + draw(_NOT_UTF8) + draw(st.binary(max_size=20)))
    if aim == "Slack timestamp of 4,300 digits or more":
        digits = b"9" * draw(st.integers(4301, 8000))
        return draw(_cases("slack")).but(b"X-Slack-Request-Timestamp", digits)
    if aim == "Telegram secret not UTF-8":
        prefix = draw(st.sampled_from([b"", b"<TG>"]))
        return draw(_cases("telegram")).but(
            b"X-Telegram-Bot-Api-Secret-Token", prefix + draw(_NOT_UTF8)
        )
    if aim == "CSRF field not ASCII, with a session":
        csrf = draw(st.sampled_from([b"%C3%A9", b"%FF%FE", "é".encode(), b"%E2%80%AE"]))
        # From our own page, as a form we read: what reaches the CSRF check.
        case = draw(_cases("form")).but(b"Cookie", b"<SESSION>").but(b"Content-Type", FORM)
        case = case.but(b"Origin", b"<SELF>").but(b"Sec-Fetch-Site", b"same-origin")
        return replace(case, body=b"hash=" + draw(_JUNK) + b"&csrf=" + csrf + b"&to=bob")
    if aim == "a signed Slack command in a charset that does not exist":
        case = draw(_cases("slack"))
        case = case.but(b"X-Slack-Request-Timestamp", b"<NOW>").but(
            b"X-Slack-Signature", b"<SIGNED>"
        )
        case = case.but(b"Content-Type", FORM + b"; charset=" + draw(_BAD_CHARSET))
        return replace(case, body=b"command=%2Fsignoff&user_id=U0ALICE&text=delegations")
    assert aim == "a charset that does not exist", aim
    case = draw(_cases(draw(st.sampled_from(["form", "login", "slack", "telegram"]))))
    kind = draw(st.sampled_from([FORM, b"application/json", b"text/plain"]))
    return case.but(b"Content-Type", kind + b"; charset=" + draw(_BAD_CHARSET))


@functools.cache
def _draw(count: int) -> tuple[Case, ...]:
    """`count` requests: a share aimed at each finding, the rest drawn freely. Drawn once per
    test process (derandomized, both databases get the same ones; the cases are frozen)."""
    drawn: list[Case] = []
    strategies = [_aimed(aim) for aim in _FINDINGS] + [_cases()]
    for strategy in strategies:
        share = count // len(strategies) + (
            count % len(strategies) if strategy is strategies[-1] else 0
        )

        @settings(
            max_examples=share,
            derandomize=not FUZZ_RANDOM,
            database=None,
            deadline=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(strategy)
        def collect(case: Case) -> None:
            drawn.append(case)

        collect()
    return tuple(drawn)


def _not_utf8(value: bytes | None) -> bool:
    try:
        (value or b"").decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


# What the first round of review found answering 500, and how to recognise a fuzzed request
# that would have met it.
_FINDINGS: dict[str, Callable[[Case], bool]] = {
    "session cookie not UTF-8": lambda c: (
        c.path.startswith(("/web/inbox", "/dashboard", "/web/approvals"))
        and (c.header(b"Cookie") or b"").startswith(b"signoff_session=")
        and _not_utf8(c.header(b"Cookie"))
    ),
    "Origin not UTF-8 on a POST": lambda c: c.method == b"POST" and _not_utf8(c.header(b"Origin")),
    "Slack body not UTF-8": lambda c: (
        c.path == "/slack/events"
        and c.header(b"X-Slack-Request-Timestamp") == b"<NOW>"
        and _not_utf8(c.body)
    ),
    "Slack timestamp of 4,300 digits or more": lambda c: (
        (c.header(b"X-Slack-Request-Timestamp") or b"").isdigit()
        and len(c.header(b"X-Slack-Request-Timestamp") or b"") > 4300
    ),
    "Telegram secret not UTF-8": lambda c: _not_utf8(c.header(b"X-Telegram-Bot-Api-Secret-Token")),
    "CSRF field not ASCII, with a session": lambda c: (
        c.header(b"Cookie") == b"<SESSION>"
        and b"&csrf=" in c.body
        and not unquote_to_bytes(c.body.partition(b"&csrf=")[2].partition(b"&")[0]).isascii()
    ),
    "a signed Slack command in a charset that does not exist": lambda c: (
        c.header(b"X-Slack-Signature") == b"<SIGNED>"
        and c.body.startswith(b"command=")
        and b"charset=" in (c.header(b"Content-Type") or b"")
        and not (c.header(b"Content-Type") or b"").endswith(b"charset=utf-8")
    ),
    "a charset that does not exist": lambda c: (
        b"charset=" in (c.header(b"Content-Type") or b"")
        and not (c.header(b"Content-Type") or b"").endswith(b"charset=utf-8")
    ),
}


async def _send(rig: Rig, case: Case, values: dict[bytes, bytes]) -> Reply:
    def fill(text: bytes) -> bytes:
        for marker, value in values.items():
            text = text.replace(marker, value)
        return text

    body = fill(case.body)
    headers = [(k, fill(v)) for k, v in case.headers]
    if case.header(b"X-Slack-Signature") == b"<SIGNED>":
        timestamp = fill(case.header(b"X-Slack-Request-Timestamp") or b"")
        signed = sign(
            SLACK_SECRET,
            body,
            timestamp=int(timestamp) if timestamp.isdigit() and len(timestamp) < 20 else None,
        )
        slack = (b"X-Slack-Request-Timestamp", b"X-Slack-Signature")
        headers = [(k, v) for k, v in headers if k not in slack]
        headers += [(k.encode(), v.encode()) for k, v in signed.items()]
    path = fill(case.path.encode("utf-8", "surrogateescape"))
    return await rig.raw(case.method, path, headers, body)


async def test_fuzzed_requests_get_no_5xx_and_write_nothing_without_credentials(
    rig: Rig, no_tracebacks: None
) -> None:
    record = await rig.create()
    cookie, csrf = await rig.signed_in()
    cases = _draw(FUZZ_CASES)
    met = {name: sum(map(found, cases)) for name, found in _FINDINGS.items()}
    assert all(met.values()), f"the fuzz no longer sends each kind of input that broke: {met}"
    values = {
        b"<SESSION>": cookie,
        b"<CSRF>": csrf.encode(),
        b"<NOW>": str(int(time.time())).encode(),
        b"<SELF>": f"http://127.0.0.1:{rig.port}".encode(),
        b"<TG>": TG_SECRET.encode(),
        b"<ID>": record["id"].encode(),
        b"<JUNK>": b"%FF%FE\xe9",
    }
    started = time.monotonic()
    before = await rig.snapshot()
    for case in cases:
        if case.path == "/web/login/<TOKEN>":
            # A link of its own for each login: one that is let through uses it up.
            values[b"<TOKEN>"] = (await rig.links.make("bob")).encode()
            before = await rig.snapshot()
        reply = await _send(rig, case, values)
        assert reply.status < 500, (case, reply)
        after = await rig.snapshot()
        if not case.authenticated:
            assert after == before, ("written without credentials", case, reply)
        before = after
    assert (await rig.state(record["id"])).state == "pending"
    logging.getLogger(__name__).info(
        "%d fuzzed requests (%s) in %.1f s", len(cases), met, time.monotonic() - started
    )
