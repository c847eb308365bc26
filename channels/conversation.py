"""The chat logic every surface shares, whatever platform carries it.

A chat adapter (Slack, Telegram, and any surface after them) does four things of its own:
verify the request, translate the platform's identity into a principal, call into this
module, and render. Everything a person reads that is not about the platform lives here once:
who is not linked and how to fix it, why a decision was refused, what a decision did, the
delegate / delegations / revoke commands, and what to say when something fails. So two
surfaces cannot drift apart in what they allow or how they word it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from bot.delegations import Delegations, parse_delegate
from bot.errors import (
    ApprovalChanged,
    ApprovalExpired,
    ConfigError,
    DeliveryFailed,
    NotAnApprover,
    NotFound,
    NotPending,
    SignoffError,
)
from bot.model import State
from bot.operator import Action, Actor, Operator, decision_text
from bot.routing import Directory, Principal
from bot.target import Target

log = logging.getLogger("signoff.chat")


class Tell(Protocol):
    """Say something to the one person who clicked or wrote, in plain text. `firmly`: they
    may not decide this request at all (a surface may make them dismiss it)."""

    async def __call__(self, text: str, *, firmly: bool = False) -> None: ...


FAILED = "Something went wrong and nothing was decided; please try again."
COMMAND_FAILED = "Something went wrong and nothing was changed; please try again."
# The delegation commands every surface offers (each spells them its own way).
COMMANDS = ("delegate", "delegations", "revoke")


def credentials(
    table: str, variables: Sequence[str], what: str, environ: Mapping[str, str] = os.environ
) -> list[str]:
    """The values of a channel's secret environment variables, in order; ConfigError naming
    every one that is unset (checked at startup, before anything touches the database)."""
    values = [environ.get(name) or "" for name in variables]
    missing = [name for name, value in zip(variables, values, strict=True) if not value]
    if missing:
        raise ConfigError(
            f"[{table}] is configured but ${', $'.join(missing)} not set; set {what}, or "
            f"remove [{table}]"
        )
    return values


@dataclass(frozen=True, slots=True)
class Surface:
    """How one platform writes what the shared logic says."""

    name: str  # "slack": notify targets, actor labels in the audit trail ("slack:alice")
    title: str  # "Slack", in sentences
    command_prefix: str  # "/signoff " (one slash command) or "/" (one command per verb)
    quote_ids: bool  # Slack ids are strings (slack = "U0ALICE"), Telegram's numbers
    backticks: bool  # whether the platform shows `literal text` as code

    def code(self, text: str) -> str:
        return f"`{text}`" if self.backticks else text

    def command(self, words: str) -> str:
        return self.code(f"{self.command_prefix}{words}")

    def link(self, user_id: str | int) -> str:
        """The config line that links this account to a principal."""
        value = f'"{user_id}"' if self.quote_ids else str(user_id)
        return self.code(f"{self.name} = {value}")


class Conversation:
    """One surface's side of the shared chat logic: `Conversation(surface, directory,
    operator, delegations)`."""

    def __init__(
        self,
        surface: Surface,
        directory: Directory,
        operator: Operator,
        delegations: Delegations,
    ) -> None:
        self.surface = surface
        self.directory = directory
        self.operator = operator
        self.delegations = delegations

    # -- who is speaking ---------------------------------------------------------------------

    def unlinked(self, user_id: str | int, *, deciding: bool = True) -> str:
        """What someone whose account is no principal reads, and how to fix it."""
        why = ", so it cannot decide" if deciding else ""
        return (
            f"Your {self.surface.title} account ({user_id}) is not linked to a signoff "
            f"principal{why}; an administrator can add {self.surface.link(user_id)} to your "
            "[principals.NAME] entry."
        )

    def actor(self, principal: Principal) -> Actor:
        return Actor(principal.key, self.surface.name)

    def label(self, principal: Principal | None, user_id: str | int) -> str:
        """Who tried, for the audit trail: the principal if the account is linked."""
        return f"{self.surface.name}:{principal.key if principal else user_id}"

    async def identify(
        self, principal: Principal | None, user_id: str | int, approval_id: str, action: str
    ) -> Actor | None:
        """The actor behind a linked account; for anyone else, the refusal recorded on the
        request, and None (the caller tells them `unlinked(user_id)`)."""
        if principal is not None:
            return self.actor(principal)
        error = NotAnApprover(self.unlinked(user_id))
        await self.record(approval_id, self.label(None, user_id), action, error)
        return None

    # -- deciding ------------------------------------------------------------------------------

    async def decide(
        self,
        action: Action,
        approval_id: str,
        shown_hash: str,
        actor: Actor,
        tell_refusal: Tell,
        *,
        note: str | None = None,
        to: str | None = None,
    ) -> str | None:
        """Approve, reject or hand over through the Operator. Returns what happened, in the
        sentence every surface shows (bot.operator.decision_text); on a refusal, records it,
        tells the person why and returns None."""
        try:
            decision = await self.operator.decide(
                action, approval_id, shown_hash, actor, note=note, to=to
            )
            return decision_text(decision.approval, decision.event, self.directory)
        except SignoffError as error:
            await self.refuse(approval_id, actor.label, action, error, tell_refusal)
            return None

    async def answer(
        self,
        approval_id: str,
        shown_hash: str,
        actor: Actor,
        tell_refusal: Tell,
        *,
        text: str | None = None,
        option: str | None = None,
    ) -> str | None:
        """Answer instead of deciding (words, or a question's option) through the Operator;
        what happened in every surface's words, or None once a refusal is recorded and told."""
        try:
            decision = await self.operator.answer(
                approval_id, shown_hash, actor, text=text, option=option
            )
            return decision_text(decision.approval, decision.event, self.directory)
        except SignoffError as error:
            await self.refuse(approval_id, actor.label, "answer", error, tell_refusal)
            return None

    async def approve_edited(
        self,
        approval_id: str,
        shown_hash: str,
        arguments: dict[str, Any],
        edited_hash: str,
        actor: Actor,
        tell_refusal: Tell,
        *,
        note: str | None = None,
    ) -> str | None:
        """Approve the revision the person confirmed (bot.operator.Operator.approve_edited);
        like `decide`, the outcome in words or None after a refusal is recorded and told."""
        try:
            decision = await self.operator.approve_edited(
                approval_id, shown_hash, arguments, edited_hash, actor, note
            )
            return decision_text(decision.approval, decision.event, self.directory)
        except SignoffError as error:
            await self.refuse(approval_id, actor.label, "approve", error, tell_refusal)
            return None

    async def precheck(
        self,
        approval_id: str,
        shown_hash: str,
        actor: Actor,
        action: Action,
        tell: Tell,
        *,
        recorded_as: str | None = None,
    ) -> bool:
        """Whether `actor` could take `action` now, asked before a dialog or a question that
        would otherwise be answered only to be refused; a refusal is recorded (as
        `recorded_as`, when the press was for something judged like `action`: an answer is
        judged as a rejection) and told."""
        try:
            await self.operator.precheck(approval_id, shown_hash, actor, action)
        except SignoffError as error:
            await self.refuse(approval_id, actor.label, recorded_as or action, error, tell)
            return False
        return True

    async def refuse(
        self, approval_id: str, actor_label: str, action: str, error: SignoffError, tell: Tell
    ) -> None:
        """Record the refusal in the request's audit trail, then tell the person why."""
        said = await self.recorded(approval_id, actor_label, action, error)
        await tell(said, firmly=isinstance(error, NotAnApprover))

    async def recorded(
        self, approval_id: str, actor_label: str, action: str, error: SignoffError
    ) -> str:
        """Record the refusal in the request's audit trail; why, in every surface's words
        (for a page that shows it rather than telling it)."""
        await self.record(approval_id, actor_label, action, error)
        return refusal_text(error, self.directory)

    async def record(
        self, approval_id: str, actor_label: str, action: str, error: SignoffError
    ) -> None:
        try:
            await self.operator.record_refusal(approval_id, actor_label, action, error)
        except Exception:  # the person still hears why; the failure is for the operator
            log.exception("could not record the refusal on %s", approval_id)

    @asynccontextmanager
    async def failures_told(self, tell: Tell) -> AsyncIterator[None]:
        """Whatever goes wrong, the person hears that nothing was decided, not silence or
        the platform's generic error; the operator gets the traceback."""
        try:
            yield
        except Exception:
            log.exception("%s interaction failed", self.surface.title)
            await tell(FAILED)

    # -- the delegation commands ----------------------------------------------------------------

    async def command(
        self,
        verb: str,
        caller: Principal | None,
        user_id: str | int,
        words: list[str],
        *,
        resolve: Callable[[str], str] = lambda word: word.removeprefix("@"),
    ) -> str:
        """`delegate NAME [from WHEN] [until WHEN] [SCOPE]`, `delegations` or `revoke ID`,
        answered in a sentence, mistakes included. `resolve` turns the word naming a delegate
        into a principal key (a platform's mention, or the key itself)."""
        if caller is None:
            return self.unlinked(user_id, deciding=False)
        try:
            if verb == "delegate":
                return await self._delegate(caller.key, words, resolve)
            if verb == "delegations":
                return await self._list(caller.key)
            return await self._revoke(caller.key, words)
        except SignoffError as error:
            return error.message
        except Exception:
            log.exception("%s command %r from %s failed", self.surface.title, verb, caller.key)
            return COMMAND_FAILED

    async def _delegate(self, caller: str, words: list[str], resolve: Callable[[str], str]) -> str:
        asked = parse_delegate(words, self.operator.clock.now())
        delegation = await self.delegations.create(
            caller,
            resolve(asked.to),
            created_by=f"{self.surface.name}:{caller}",
            starts_at=asked.starts_at,
            ends_at=asked.ends_at,
            scope=asked.scope,
        )
        return (
            f"Delegated: {self.delegations.describe(delegation)}. To end it early: "
            f"{self.surface.command(f'revoke {delegation.id}')}"
        )

    async def _list(self, caller: str) -> str:
        mine = await self.delegations.involving(caller)
        if not mine:
            return "No active or scheduled delegations for you."
        code = self.surface.code
        return "\n".join(f"{code(d.id)}: {self.delegations.describe(d)}" for d in mine)

    async def _revoke(self, caller: str, words: list[str]) -> str:
        listing = self.surface.command("delegations")
        if len(words) != 1:
            return f"Which one? {self.surface.command('revoke ID')} (the ids are in {listing})."
        try:
            revoked = await self.delegations.revoke_own(
                words[0], caller, by=f"{self.surface.name}:{caller}"
            )
        except NotFound:
            return f"You have no delegation {words[0]} to revoke; see {listing}."
        return f"Revoked: {self.delegations.describe(revoked)}."

    # -- outbound ------------------------------------------------------------------------------

    def account_of(self, target: Target) -> str | int | None:
        """The account a personal target ("slack:@alice") names on this surface; None for a
        target that is a place (a channel or a group chat)."""
        key = target.principal
        if key is None:
            return None
        principal = self.directory.principals.get(key)
        account = principal.account(self.surface.name) if principal else None
        if account is None:
            raise DeliveryFailed(
                f"principal {key!r} has no {self.surface.title} user id configured"
            )
        return account


def refusal_text(error: SignoffError, directory: Directory) -> str:
    """What a person reads when a click or reply decided nothing: exactly why, in plain text
    (each surface escapes it for its own markup)."""
    if isinstance(error, ApprovalExpired):
        return f"{error.message[0].upper()}{error.message[1:]}."
    if isinstance(error, NotPending):
        if error.decided_by and error.state in (State.APPROVED, State.REJECTED):
            who = directory.name_of(error.decided_by)
            when = f" at {error.decided_at:%H:%M} UTC" if error.decided_at else ""
            return f"Already {error.state} by {who}{when}."
        return f"This request is no longer open: it is {error.state.replace('_', ' ')}."
    if isinstance(error, ApprovalChanged):
        return (
            "This card is out of date: the request changed since it was shown, so nothing "
            "was decided. Review it again."
        )
    if type(error) is NotAnApprover and error.assignee:
        return f"You are not an approver for this request; it is assigned to {error.assignee}."
    return error.message
