"""The agent API's embed route: `POST /v1/approvals/{id}/embed` mints a short-lived token
that shows one request to one person in a partner's page (bot/embed_tokens.py; the page is
channels/web/embed.py).

bot/api.py's route table registers `Minting(...).mint`, handing it its own plumbing (the
tenant from the key, the strictly parsed body, the id in the path), so this module needs
nothing of bot/api.py and the API reads the same everywhere: the same key check, the same
error bodies (its error middleware), the same 404 for another tenant's request. What the web
surface decides (the allowed origins, the public URL the token's page lives on) it hands
over as `EMBED` when it adds its routes; without `[web]` every mint is refused
`origin_not_allowed`, saying embedding is off.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Protocol

from aiohttp import web
from pydantic import AfterValidator, Field, StrictStr

from bot.clock import Clock, utc_iso
from bot.durations import parse_duration
from bot.embed_tokens import DEFAULT_TTL, EMBED_PATH, MAX_TTL, EmbedTokens
from bot.origins import parse_origin
from bot.routing import Directory
from bot.validation import IS_DURATION, NO_NUL, StrictModel, validate
from store import json_text
from store.repository import Store

log = logging.getLogger("signoff.api")


@dataclass(frozen=True, slots=True)
class EmbedSettings:
    """What the web surface allows: the origins that may frame a token's page, and the public
    URL it is served under."""

    origins: tuple[str, ...]
    public_url: str


EMBED: web.AppKey[EmbedSettings] = web.AppKey("signoff_embed", EmbedSettings)


def _ttl(value: str) -> str:
    if parse_duration(value) > MAX_TTL:
        raise ValueError(f"{value!r} is longer than the hour an embed token may live")
    return value


# Validators the OpenAPI document mirrors with patterns (tests/unit/test_openapi_requests.py).
IS_EMBED_TTL = AfterValidator(_ttl)
IS_ORIGIN = AfterValidator(parse_origin)


class EmbedBody(StrictModel):
    person: Annotated[StrictStr, Field(min_length=1, max_length=128), NO_NUL]
    parent_origin: Annotated[StrictStr, Field(max_length=300), IS_ORIGIN]
    ttl: Annotated[StrictStr, IS_DURATION, IS_EMBED_TTL] = DEFAULT_TTL


class Services(Protocol):
    """What the route reads of the API's context (bot.api.ApiContext)."""

    store: Store
    directory: Directory
    clock: Clock


class Minting:
    """The route's handler, given the API's plumbing by its route table."""

    def __init__(
        self,
        services: Services,
        tenant_of: Callable[[web.Request], str],
        body_of: Callable[[web.Request], Awaitable[Any]],
        approval_id_of: Callable[[web.Request], str],
    ) -> None:
        self.services = services
        self.tenant_of = tenant_of
        self.body_of = body_of
        self.approval_id_of = approval_id_of

    async def mint(self, request: web.Request) -> web.Response:
        tenant = self.tenant_of(request)
        body = validate(EmbedBody, await self.body_of(request))
        approval_id = self.approval_id_of(request)
        settings = request.app.get(EMBED)
        services = self.services
        tokens = EmbedTokens(services.store, services.directory, services.clock)
        minted = await tokens.mint(
            tenant,
            approval_id,
            body.person,
            body.parent_origin,
            parse_duration(body.ttl),
            settings.origins if settings is not None else (),
        )
        assert settings is not None  # no origin is allowed without it
        log.info(
            "embed token for %s on approval %s, framed by %s",
            body.person,
            approval_id,
            body.parent_origin,
            extra={"approval_id": approval_id, "tenant": tenant, "actor": f"agent:{tenant}"},
        )
        answer = {
            "approval_id": approval_id,
            "person": body.person,
            "parent_origin": body.parent_origin,
            "token": minted.token,
            "url": settings.public_url.rstrip("/") + EMBED_PATH + minted.token,
            "expires_at": utc_iso(minted.expires_at),
        }
        return web.json_response(answer, status=201, dumps=json_text.dumps)
