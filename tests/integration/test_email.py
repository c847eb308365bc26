"""The email surface against a real SMTP server on loopback (aiosmtpd), on both databases:
what a card mail carries (parts, headers, hash), the thread of what follows, the decision
links (a GET shows, only a POST decides, once), and what SMTP refusals do to the job."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from bot.clock import FakeClock
from channels.base import MessageRef
from channels.email.config import EmailConfig
from channels.email.smtp import probe
from store.repository import Store
from tests.support.email_rig import API_KEY, EmailRig, serve_email
from tests.support.smtp_sink import smtp_sink

Start = Callable[..., Awaitable[EmailRig]]


@pytest.fixture
async def start(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Start]:
    monkeypatch.setenv("EMAIL_TEST_API_KEY", API_KEY)
    cleanup: list[Callable[[], Awaitable[None]]] = []
    async with smtp_sink() as sink:

        async def one(store: Store, notify: list[str] | None = None, **extra: Any) -> EmailRig:
            return await serve_email(sink, store, clock, cleanup, notify or ["email:dm"], extra)

        yield one
        for close in reversed(cleanup):
            await close()


@pytest.fixture
async def rig(start: Start, store: Store) -> EmailRig:
    return await start(store)


async def _get(rig: EmailRig, url: str) -> tuple[int, str]:
    async with rig.http.get(url) as response:
        return response.status, await response.text()


async def _post(rig: EmailRig, url: str, **form: str) -> tuple[int, str]:
    async with rig.http.post(url, data=form) as response:
        return response.status, await response.text()


# -- the card mail ---------------------------------------------------------------------------


async def test_each_approver_gets_a_multipart_card_with_both_hashes_and_two_links(
    rig: EmailRig,
) -> None:
    record = await rig.create(presentation={"title": "Refund <b>€120</b> to Zoë"})
    await rig.drain()
    # finance is alice, bob and sam, each with an address: one mail each, to them alone.
    assert sorted(r for m in rig.sink.received for r in m.rcpt_to) == [
        "alice@example.com",
        "bob@example.com",
        "sam@example.com",
    ]
    [mail] = rig.mails_to("alice")
    message = mail.message
    assert message.get_content_type() == "multipart/alternative"
    assert message["From"] == "signoff <signoff@signoff.test>"
    assert message["To"] == "Alice Ng <alice@example.com>"
    assert message["Reply-To"] == "approvals@signoff.test"
    assert message["Auto-Submitted"] == "auto-generated"
    short = f"sha256:{record['hash'][:12]}"
    assert message["Subject"] == f"[signoff] Approval needed: Refund <b>€120</b> to Zoë ({short})"
    plain, html = mail.part("plain"), mail.part("html")
    for part in (plain, html):
        assert short in part and f"sha256:{record['hash']}" in part and record["id"] in part
        assert "payments.refund" in part and "stripe.refunds.create" in part
    assert "Refund <b>€120</b> to Zoë" in plain
    assert "Refund &lt;b&gt;€120&lt;/b&gt; to Zoë" in html and "<b>€120" not in html
    links = rig.links(mail)
    assert sorted(links) == ["approve", "reject"]
    assert all(links[action] in html for action in links)
    async with rig.store.read() as tx:
        messages = await tx.card_messages_for(record["id"])
    mine = [m for m in messages if m.address == "alice"]
    assert [(m.channel, m.message_id, m.shown_hash) for m in mine] == [
        ("email", message["Message-ID"], record["hash"])
    ]


async def test_a_get_decides_nothing_and_the_post_decides_once_then_replies_in_thread(
    rig: EmailRig,
) -> None:
    record = await rig.create()
    await rig.drain()
    [card] = rig.mails_to("alice")
    approve = rig.links(card)["approve"]
    events_before = len(await rig.events(record["id"]))
    # A mail scanner or a link preview fetches it, maybe twice: a page, nothing more.
    for _ in range(2):
        status, page = await _get(rig, approve)
        assert status == 200 and "Approve this request?" in page
        assert f"sha256:{record['hash'][:12]}" in page
    assert (await rig.state(record["id"])).state == "pending"
    assert len(await rig.events(record["id"])) == events_before

    status, page = await _post(rig, approve)
    assert status == 200 and "Approved" in page
    row = await rig.state(record["id"])
    assert (row.state, row.decided_by) == ("approved", "alice")
    [event] = [e for e in await rig.events(record["id"]) if e.type == "approved"]
    assert event.actor == "email:alice" and event.data["shown_hash"] == record["hash"]

    status, page = await _post(rig, approve)  # the same link again, from anywhere
    assert status == 410 and "already used" in page
    status, page = await _get(rig, approve)
    assert status == 410 and "already used" in page

    await rig.drain()
    [_, reply] = rig.mails_to("alice")
    assert reply.message["In-Reply-To"] == card.message["Message-ID"]
    assert reply.message["References"] == card.message["Message-ID"]
    assert reply.message["Subject"] == "Re: " + card.message["Subject"]
    assert reply.part("plain").startswith("Approved by Alice Ng (alice)")
    assert rig.links(reply) == {}  # nothing left to decide
    # bob and sam hear it in their own threads.
    [bob_card, bob_reply] = rig.mails_to("bob")
    assert bob_reply.message["In-Reply-To"] == bob_card.message["Message-ID"]


async def test_reject_asks_for_a_reason_and_sends_it(rig: EmailRig) -> None:
    record = await rig.create()
    await rig.drain()
    reject = rig.links(rig.mails_to("bob")[0])["reject"]
    status, page = await _get(rig, reject)
    assert status == 200 and "Your reason for rejecting" in page and 'name="reason"' in page
    status, page = await _post(rig, reject, reason="  no budget left  ")
    assert status == 200 and "Rejected" in page
    row = await rig.state(record["id"])
    assert (row.state, row.decided_by, row.decision_note) == ("rejected", "bob", "no budget left")


async def test_a_link_for_a_request_decided_meanwhile_says_so_and_decides_nothing(
    rig: EmailRig,
) -> None:
    record = await rig.create()
    await rig.drain()
    await _post(rig, rig.links(rig.mails_to("bob")[0])["approve"])
    reject = rig.links(rig.mails_to("alice")[0])["reject"]
    status, page = await _get(rig, reject)
    assert status == 409 and "Already approved by Bob Stone" in page
    assert 'name="reason"' not in page
    status, page = await _post(rig, reject, reason="too late")
    assert status == 409 and "Already approved by Bob Stone" in page
    assert (await rig.state(record["id"])).state == "approved"
    refused = [e for e in await rig.events(record["id"]) if e.type == "refused"]
    assert [e.actor for e in refused] == ["email:alice"]  # the POST's, not the GET's


async def test_a_link_past_the_deadline_or_never_issued_is_refused(rig: EmailRig) -> None:
    record = await rig.create()
    await rig.drain()
    approve = rig.links(rig.mails_to("alice")[0])["approve"]
    status, page = await _get(rig, approve.rsplit("/", 1)[0] + "/not-a-real-token")
    assert status == 404 and "not valid" in page
    rig.clock.advance(timedelta(days=4))  # payments.* requests live 72h
    for status, page in (await _get(rig, approve), await _post(rig, approve)):
        assert status == 410 and "expired" in page
    assert (await rig.state(record["id"])).state in ("pending", "expired")
    assert (await rig.state(record["id"])).decided_by is None


async def test_a_link_to_someone_not_entitled_is_refused_in_words(
    start: Start, store: Store
) -> None:
    # carol is named by the route but decides nothing on payments.*: her link is hers
    # alone, and judged as any click of hers would be.
    rig = await start(store, notify=["email:carol"])
    record = await rig.create()
    await rig.drain()
    [mail] = rig.mails_to("carol")
    approve = rig.links(mail)["approve"]
    status, page = await _get(rig, approve)
    assert status == 409 and "not an approver" in page
    status, page = await _post(rig, approve)
    assert status == 409 and "not an approver" in page
    assert (await rig.state(record["id"])).state == "pending"


async def test_a_quorum_vote_by_mail_replies_with_fresh_links(start: Start, store: Store) -> None:
    rig = await start(store)
    record = await rig.create(capability="quorum.deploy")
    await rig.drain()
    status, _ = await _post(rig, rig.links(rig.mails_to("alice")[0])["approve"])
    assert status == 200
    assert (await rig.state(record["id"])).state == "pending"
    await rig.drain()
    [bob_card, bob_update] = rig.mails_to("bob")
    assert bob_update.message["In-Reply-To"] == bob_card.message["Message-ID"]
    assert "Approved by Alice Ng (alice)" in bob_update.part("plain")
    status, _ = await _post(rig, rig.links(bob_update)["approve"])
    assert status == 200 and (await rig.state(record["id"])).state == "approved"


async def test_a_reminder_is_a_reply_in_the_cards_thread(rig: EmailRig) -> None:
    record = await rig.create()
    await rig.drain()
    [card] = rig.mails_to("sam")
    channel = rig.channels["email"]
    await channel.send_reply(MessageRef("email", "sam", card.message["Message-ID"]), "Reminder!")
    [_, reminder] = rig.mails_to("sam")
    assert reminder.message["In-Reply-To"] == card.message["Message-ID"]
    assert reminder.message["Subject"] == "Re: " + card.message["Subject"]
    assert reminder.message.get_content().strip() == "Reminder!"
    assert record["id"] in reminder.message["Message-ID"]


# -- SMTP refusals -----------------------------------------------------------------------------


async def _card_jobs(rig: EmailRig, approval_id: str) -> dict[str, Any]:
    async with rig.store.read() as tx:
        jobs = await tx.outbox_jobs(approval_id=approval_id)
    return {j.payload["target"]: j for j in jobs if j.kind == "post_card"}


async def test_a_permanent_refusal_buries_the_job_with_the_servers_words(rig: EmailRig) -> None:
    rig.sink.refuse_next(
        "550 5.1.1 <alice@example.com>: Recipient address rejected", to="alice@example.com"
    )
    record = await rig.create()
    await rig.drain()
    jobs = await _card_jobs(rig, record["id"])
    alice = jobs["email:@alice"]
    assert alice.state == "dead" and alice.attempts == 1
    assert "550" in (alice.last_error or "") and "Recipient address rejected" in alice.last_error
    assert {jobs["email:@bob"].state, jobs["email:@sam"].state} == {"done"}


async def test_a_temporary_refusal_is_tried_again_and_arrives(rig: EmailRig) -> None:
    rig.sink.refuse_next("451 4.3.0 Try again later", stage="data")
    record = await rig.create()
    await rig.drain()
    jobs = await _card_jobs(rig, record["id"])
    waiting = [j for j in jobs.values() if j.state == "queued"]
    assert len(waiting) == 1 and "451" in (waiting[0].last_error or "")
    rig.clock.advance(timedelta(minutes=10))
    await rig.drain()
    assert {j.state for j in (await _card_jobs(rig, record["id"])).values()} == {"done"}
    assert len(rig.sink.received) == 3


async def test_an_unreachable_server_is_tried_again(start: Start, store: Store) -> None:
    async with smtp_sink() as gone:
        port = gone.port
    rig = await start(store, notify=["email:alice"])
    rig.channels["email"].config = rig.channels["email"].config.model_copy(update={"port": port})
    record = await rig.create()
    await rig.drain()
    [job] = (await _card_jobs(rig, record["id"])).values()
    assert job.state == "queued" and job.attempts == 1


# -- config check ------------------------------------------------------------------------------


async def test_the_probe_says_which_step_fails() -> None:
    async with smtp_sink(credentials=("signoff", "right")) as sink:
        table = EmailConfig(
            host=sink.host,
            port=sink.port,
            security="none",
            from_address="signoff@signoff.test",
            username_env="SMTP_USER",
        )
        env = {"SMTP_USER": "signoff", "SIGNOFF_SMTP_PASSWORD": "right"}
        assert await probe(table, env) is None
        wrong = await probe(table, {**env, "SIGNOFF_SMTP_PASSWORD": "wrong"})
        assert wrong is not None and wrong.startswith("AUTH as signoff") and "535" in wrong
        assert "$SIGNOFF_SMTP_PASSWORD" in (await probe(table, {"SMTP_USER": "x"}) or "")
        starttls = await probe(table.model_copy(update={"security": "starttls"}), env)
        assert starttls is not None and starttls.startswith("connecting to")
        assert "STARTTLS" in starttls
        port = sink.port
    closed = await probe(table.model_copy(update={"port": port}), env)
    assert closed is not None and closed.startswith(f"connecting to 127.0.0.1:{port}")
    assert sink.received == []


async def test_a_post_from_another_site_decides_nothing(rig: EmailRig) -> None:
    record = await rig.create()
    await rig.drain()
    approve = rig.links(rig.mails_to("alice")[0])["approve"]
    async with rig.http.post(approve, headers={"Sec-Fetch-Site": "cross-site"}) as response:
        assert response.status == 403
    assert (await rig.state(record["id"])).state == "pending"
    status, _ = await _post(rig, approve)  # not used up: the real press still works
    assert status == 200 and (await rig.state(record["id"])).state == "approved"
