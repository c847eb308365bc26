"""The email surface: approval cards by mail, decided with single-use links.

Every card goes to one principal's mailbox: `email:@alice` (the outbox's expansion of
`email:dm` for each approver, and the card a new assignee or a delegate gets) or
`email:alice` (a route naming her). It is a multipart message, plain text and HTML, showing
the card every surface shows (channels/email/card.py) with an Approve and a Reject link,
each good once, for that principal, for that revision (bot/email_links.py). What
happens to the request after (a vote, a hand-off, an escalation, the outcome, a reminder)
follows as a reply in the same thread (In-Reply-To / References), since a sent mail cannot
be edited. The links' pages are channels/email/pages.py; sending is channels/email/smtp.py.
"""

from __future__ import annotations

import email.policy
import hashlib
import logging
import os
from collections.abc import Mapping
from email.message import EmailMessage
from email.utils import format_datetime, formataddr
from typing import TYPE_CHECKING

from aiohttp import web

from bot.card import Card, card_for
from bot.clock import Clock
from bot.delegations import Delegations
from bot.email_links import LINK_PATH, DecisionLinks
from bot.errors import Undeliverable
from bot.model import State
from bot.operator import Operator
from bot.routing import Directory, Principal
from bot.target import Target
from channels.base import MessageRef
from channels.conversation import Conversation, Surface
from channels.email import card as email_card
from channels.email import pages as email_pages
from channels.email.card import Links
from channels.email.config import EmailConfig
from channels.email.smtp import send, smtp_credentials
from store.repository import Store

if TYPE_CHECKING:
    from channels.web.site import Site as WebSite

log = logging.getLogger("signoff.email")

# Headers are not folded below SMTP's 998: a folded In-Reply-To would be encoded as text
# (RFC 2047) and no longer name the card, and the thread would break.
POLICY = email.policy.SMTP.clone(max_line_length=998)

SURFACE = Surface(name="email", title="email", command_prefix="", quote_ids=True, backticks=False)


class EmailChannel:
    """The `email` channel: posts a card as a new mail, updates it with a reply."""

    name = "email"

    def __init__(
        self,
        config: EmailConfig,
        public_url: str,
        store: Store,
        directory: Directory,
        clock: Clock,
        operator: Operator,
        delegations: Delegations,
        *,
        web: WebSite | None = None,
        environ: Mapping[str, str] = os.environ,
    ) -> None:
        self.config = config
        self.public_url = public_url.rstrip("/")
        self.store = store
        self.directory = directory
        self.clock = clock
        self.operator = operator
        self.web = web
        self.credentials = smtp_credentials(config, environ)
        self.links = DecisionLinks(store, clock)
        self.conversation = Conversation(SURFACE, directory, operator, delegations)
        self.domain = config.from_address.partition("@")[2]

    # -- the Channel protocol ---------------------------------------------------------------

    async def post_card(self, card: Card, target: Target) -> MessageRef:
        principal = self._recipient(target)
        # The same card to the same place has the same Message-ID, so a retry that sends it
        # again (the record was lost after the server took it) reads as one mail.
        message_id = self._message_id(card.approval_id, f"{target}:{card.hash}")
        message = self._message(principal, email_card.subject(card), message_id)
        await self._fill(message, card, principal, lead=None)
        await send(self.config, message, self.credentials)
        return MessageRef("email", principal.key, message_id)

    async def update_card(self, ref: MessageRef, card: Card) -> None:
        """A reply in the card's thread with the request as it stands now: a mail cannot be
        edited. The same state replied twice has the same Message-ID (one mail to a reader)."""
        principal = self._addressee(ref.address)
        lead = _lead(card)
        digest_of = email_card.text(card, Links(), lead=lead)
        message_id = self._message_id(card.approval_id, f"{ref.message_id}:{digest_of}")
        message = self._message(principal, "Re: " + email_card.subject(card), message_id, ref)
        await self._fill(message, card, principal, lead=lead)
        await send(self.config, message, self.credentials)

    async def send_reply(self, ref: MessageRef, text: str) -> None:
        """Plain text in the card's thread (a reminder before the request expires)."""
        principal = self._addressee(ref.address)
        subject = "Re: [signoff] " + text.splitlines()[0][:120]
        approval_id = _approval_of(ref.message_id)
        if approval_id is not None:
            async with self.store.read() as tx:
                approval = await tx.get_approval(approval_id)
            if approval is not None:
                card = card_for(self.directory, approval, self.clock.now())
                subject = "Re: " + email_card.subject(card)
        message_id = self._message_id(approval_id or "notice", f"{ref.message_id}:{text}")
        message = self._message(principal, subject, message_id, ref)
        message.set_content(text)
        await send(self.config, message, self.credentials)

    async def send_notice(self, target: Target, text: str) -> None:
        """A plain message to one principal (a delegation starting or ending)."""
        principal = self._recipient(target)
        first = text.splitlines()[0] if text else "notice"
        message_id = self._message_id("notice", f"{target}:{text}")
        message = self._message(principal, f"[signoff] {first[:120]}", message_id)
        message.set_content(text)
        await send(self.config, message, self.credentials)

    # -- wiring -----------------------------------------------------------------------------

    def add_routes(self, app: web.Application) -> None:
        pages = email_pages.Pages(
            self.links, self.conversation, self.store, self.directory, self.clock, self.web
        )
        email_pages.add_routes(app, pages)

    async def start(self) -> None:
        return None  # one SMTP connection per message: nothing held

    async def stop(self) -> None:
        return None

    def link_url(self, token: str) -> str:
        return f"{self.public_url}{LINK_PATH}{token}"

    # -- building a message -------------------------------------------------------------------

    def _recipient(self, target: Target) -> Principal:
        """The principal a card target names: `email:@alice` or `email:alice`."""
        return self._addressee(target.principal or target.where)

    def _addressee(self, key: str) -> Principal:
        principal = self.directory.principals.get(key)
        if principal is None or principal.account("email") is None:
            # The config changed since the job was queued; only a person can fix it.
            raise Undeliverable(
                f"principal {key!r} has no email address configured", reason="no_address"
            )
        return principal

    def _message_id(self, approval_id: str, what: str) -> str:
        tag = hashlib.sha256(what.encode("utf-8", "surrogateescape")).hexdigest()[:20]
        return f"<signoff.{approval_id}.{tag}@{self.domain}>"

    def _message(
        self, principal: Principal, subject: str, message_id: str, thread: MessageRef | None = None
    ) -> EmailMessage:
        message = EmailMessage(policy=POLICY)
        message["From"] = formataddr((self.config.from_name, self.config.from_address))
        message["To"] = formataddr((_one_line(principal.name), str(principal.account("email"))))
        if self.config.reply_to:
            message["Reply-To"] = self.config.reply_to
        message["Subject"] = subject
        message["Date"] = format_datetime(self.clock.now())
        message["Message-ID"] = message_id
        if thread is not None:
            message["In-Reply-To"] = thread.message_id
            message["References"] = thread.message_id
        # Written by a program (RFC 3834): vacation responders do not answer it.
        message["Auto-Submitted"] = "auto-generated"
        return message

    async def _fill(
        self, message: EmailMessage, card: Card, principal: Principal, *, lead: str | None
    ) -> None:
        links = Links(page=self.web.approval_url(card.approval_id) if self.web else None)
        if card.state == State.PENDING and not card.overdue and not card.question:
            tokens = await self.links.make(
                card.approval_id, principal.key, card.hash, card.expires_at
            )
            links = Links(
                approve=self.link_url(tokens["approve"]),
                reject=self.link_url(tokens["reject"]),
                page=links.page,
            )
        message.set_content(email_card.text(card, links, lead=lead))
        message.add_alternative(email_card.html(card, links, lead=lead), subtype="html")


def _lead(card: Card) -> str:
    """What a reply is about, in one line above the card."""
    outcome = [s for s in card.sections if s.lines]
    if outcome:
        return "; ".join(email_card.outcome_text(line) for line in outcome[-1].lines)
    return "This request changed; here it is as it stands now."


def _approval_of(message_id: str) -> str | None:
    """The approval a card's Message-ID names (`<signoff.ID.TAG@domain>`)."""
    local = message_id.strip("<>").partition("@")[0]
    parts = local.split(".")
    return parts[1] if len(parts) == 3 and parts[0] == "signoff" else None


def _one_line(text: str) -> str:
    return " ".join(text.split())
