"""Embed tokens: a partner's page frames one request's approval for one person.

A partner's backend mints a token with its tenant's API key (`POST /v1/approvals/{id}/embed`,
bot/api_embed.py) for one request of that tenant, one person entitled to decide it (the one
eligibility rule, `Directory.check_eligible`, with the delegations active now) and one parent
origin the deployment allows (`[web] embed_origins`). The token carries 256 random bits; only
their SHA-256 is stored (store/embed_tokens.py), with what it may do: show that request to
that person at `/embed/<token>`, framed by that origin only, and decide it once, approve or
reject against the hash the page showed, before it expires (an hour at most). The mint is an
`embed_issued` event in the request's audit trail, naming the person and the origin; a
decision through it is the decision's own event, by `embed:<person>`.

A token is nothing else: it opens no session, signs nobody in, is no API key, and no other
page reads its table. Whether a decision is allowed (a changed request, self-approval, a
quorum's votes) is still the Operator's to judge, as for every surface.

The refusals are here, on the one hierarchy's root: the API's (422, for the partner's
backend) and the page's (what the frame tells its parent as `error` with the code).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from bot import audit, expiry
from bot.clock import Clock, utc_iso
from bot.decisions import check_open
from bot.errors import InvalidRequest, NotAnApprover, NotFound, SignoffError
from bot.model import Kind
from bot.routing import Directory
from store.repository import Store

EMBED_PATH = "/embed/"
MAX_TTL = timedelta(hours=1)
DEFAULT_TTL = "10m"
# Used and expired tokens are kept this long past their expiry, to say why they are refused.
KEEP = timedelta(days=1)
# The mint's event in the request's audit trail.
ISSUED = "embed_issued"
# How a decision through an embed is recorded (`Actor.via`: the event's actor is embed:NAME).
VIA = "embed"


# -- refusals ------------------------------------------------------------------------------------


class UnknownPerson(InvalidRequest):
    """The person named is not a principal of this signoff."""

    code = "unknown_person"


class PersonNotEntitled(InvalidRequest):
    """The person named may not decide this request (not an approver, nor a delegate of one)."""

    code = "person_not_entitled"


class OriginNotAllowed(InvalidRequest):
    """The parent origin is not one of `[web] embed_origins`."""

    code = "origin_not_allowed"


class EmbedKeyRequired(SignoffError):
    """Embed tokens are minted with the tenant's embed key (`embed_key_env`), never with the
    agent's API key: an agent could otherwise decide its own request as a person."""

    code = "embed_key_required"
    http_status = 403


class EmbedRefused(SignoffError):
    """This embed token does not open the approval."""

    code = "embed_refused"
    http_status = 403


class EmbedTokenUnknown(EmbedRefused):
    """This embed token is not valid; ask the page that showed it for a new one."""

    code = "embed_token_unknown"
    http_status = 404


class EmbedTokenUsed(EmbedRefused):
    """This embed token was already used: it decides once."""

    code = "embed_token_used"
    http_status = 410


class EmbedTokenExpired(EmbedRefused):
    """This embed token has expired; ask the page that showed it for a new one."""

    code = "embed_token_expired"
    http_status = 410


class EmbedOtherRequest(EmbedRefused):
    """This embed token was made for another request; nothing was decided."""

    code = "embed_other_request"
    http_status = 403


class EmbedOriginRefused(EmbedRefused):
    """This embed token's page is no longer allowed to be framed ([web] embed_origins)."""

    code = "embed_origin_not_allowed"
    http_status = 403


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


# -- tokens --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EmbedToken:
    """What a token may do, as stored."""

    approval_id: str
    principal: str
    parent_origin: str
    expires_at: datetime
    used_at: datetime | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> EmbedToken:
        return cls(
            row["approval_id"],
            row["principal"],
            row["parent_origin"],
            row["expires_at"],
            row["used_at"],
        )


@dataclass(frozen=True, slots=True)
class Minted:
    token: str
    expires_at: datetime


class EmbedTokens:
    """`EmbedTokens(store, directory, clock)`: mint, read, use once, give back."""

    def __init__(self, store: Store, directory: Directory, clock: Clock) -> None:
        self.store = store
        self.directory = directory
        self.clock = clock

    async def mint(
        self,
        tenant: str,
        approval_id: str,
        person: str,
        parent_origin: str,
        ttl: timedelta,
        allowed: tuple[str, ...],
    ) -> Minted:
        """A new token for `person` on `tenant`'s request, framed by `parent_origin` (one of
        `allowed`), for `ttl` (at most MAX_TTL). The request is judged under its row lock,
        and the token and its audit event are written in the same transaction: a refusal
        writes nothing."""
        if parent_origin not in allowed:
            why = (
                "embedding is off: no [web] embed_origins are configured"
                if not allowed
                else f"{parent_origin} is not one of [web] embed_origins"
            )
            raise OriginNotAllowed(
                why, fields=[{"field": "parent_origin", "message": "origin not allowed"}]
            )
        if person not in self.directory.principals:
            raise UnknownPerson(
                f"no principal {person!r} in the configuration",
                fields=[{"field": "person", "message": "unknown principal"}],
            )
        if ttl > MAX_TTL:  # the API's model says so first; this is the rule itself
            raise InvalidRequest("an embed token lives an hour at most")
        now = self.clock.now()
        token = secrets.token_urlsafe(32)
        digest = _digest(token)
        expires_at = now + ttl
        async with self.store.write() as tx:
            row = await tx.lock_approval(approval_id)  # the chain head is ours until commit
            if row is None or row.tenant != tenant:
                raise NotFound(f"no approval with id {approval_id!r}")
            check_open(row)
            if expiry.expiry_due(row, now) is not None:
                raise expiry.expired_error(row)
            if row.kind == Kind.QUESTION:
                raise InvalidRequest(
                    "a question is answered, not approved or rejected: an embed cannot show it"
                )
            try:
                self.directory.check_eligible(
                    row,
                    person,
                    approving=False,
                    delegations=await tx.delegations_to(person, now),
                )
            except NotAnApprover as refused:
                raise PersonNotEntitled(
                    f"{person} may not decide this request: {refused.message}",
                    fields=[{"field": "person", "message": "not entitled to decide it"}],
                ) from None
            await tx.prune_embed_tokens(now - KEEP)
            await tx.insert_embed_token(
                {
                    "token_hash": digest,
                    "approval_id": row.id,
                    "principal": person,
                    "parent_origin": parent_origin,
                    "created_at": now,
                    "expires_at": expires_at,
                    "used_at": None,
                }
            )
            data = {
                "person": person,
                "parent_origin": parent_origin,
                "expires_at": utc_iso(expires_at),
                # Which token a later look names: a prefix of its hash, never the token.
                "token": digest[:16],
            }
            await audit.note(tx, row, ISSUED, actor=f"agent:{tenant}", at=now, data=data)
        return Minted(token, expires_at)

    async def peek(self, token: str) -> EmbedToken | None:
        """The token, without using it; None for one never issued (or long pruned)."""
        async with self.store.read() as tx:
            row = await tx.embed_token(_digest(token))
        return EmbedToken.from_row(row) if row is not None else None

    def refusal(self, found: EmbedToken | None) -> EmbedRefused | None:
        """Why this token opens nothing now, whatever its request's state; None if it does."""
        if found is None:
            return EmbedTokenUnknown()
        if found.used_at is not None:
            return EmbedTokenUsed()
        if found.expires_at <= self.clock.now():
            return EmbedTokenExpired()
        return None

    async def use(self, token: str) -> EmbedToken:
        """The token, now used; the refusal saying why not (used first elsewhere, expired)."""
        digest = _digest(token)
        async with self.store.write() as tx:
            used = await tx.use_embed_token(digest, self.clock.now())
            found = None if used is not None else await tx.embed_token(digest)
        if used is not None:
            return EmbedToken.from_row(used)
        refused = self.refusal(EmbedToken.from_row(found) if found is not None else None)
        raise refused or EmbedTokenUsed()

    async def give_back(self, token: str) -> None:
        """Nothing was decided with it (a refusal, a failure): it may decide once still."""
        async with self.store.write() as tx:
            await tx.give_back_embed_token(_digest(token))
