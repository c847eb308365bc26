"""The chat platforms' answers, read no further than a cap.

slack-sdk and python-telegram-bot read a whole answer into memory before looking at it. A
Web API answer is a few KB (a posted message echoed back); an endpoint that answers
megabytes (a misconfigured `api_base_url`, a proxy's error page, a hostile server) must not
be able to grow the server's memory with it. Past `ANSWER_LIMIT` the call fails like any
other failed call, and the outbox retries it later.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import httpx

from bot.errors import DeliveryFailed
from store import json_text

ANSWER_LIMIT = 4 * 1024 * 1024
_CHUNK = 64 * 1024


class CappedResponse(aiohttp.ClientResponse):
    """For the aiohttp session slack-sdk's client uses: `read()` (and so `json()` and
    `text()`) stops past the cap instead of buffering the whole body."""

    async def read(self) -> bytes:
        if self._body is None:
            body = bytearray()
            async for chunk in self.content.iter_chunked(_CHUNK):
                body += chunk
                if len(body) > ANSWER_LIMIT:
                    self.close()
                    raise DeliveryFailed(
                        f"{self.url.host} answered more than {ANSWER_LIMIT} bytes; not read"
                    )
            self._body = bytes(body)
        return await super().read()

    async def json(
        self,
        *,
        encoding: str | None = None,
        loads: Callable[[str], Any] = json_text.loads,
        content_type: str | None = "application/json",
    ) -> Any:
        # slack-sdk reads every answer with json() and no `loads`: orjson's, not the
        # standard library's, unless it asks for another.
        return await super().json(encoding=encoding, loads=loads, content_type=content_type)


class _Capped(httpx.AsyncByteStream):
    def __init__(self, stream: httpx.AsyncByteStream, host: str) -> None:
        self._stream = stream
        self._host = host

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = 0
        async for chunk in self._stream:
            size += len(chunk)
            if size > ANSWER_LIMIT:
                # An httpx error, so python-telegram-bot reports it as a NetworkError.
                raise httpx.RemoteProtocolError(
                    f"{self._host} answered more than {ANSWER_LIMIT} bytes; not read"
                )
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


async def cap_httpx_answer(response: httpx.Response) -> None:
    """An httpx response hook (python-telegram-bot's client): runs before the body is read,
    and wraps its stream so reading stops past the cap."""
    assert isinstance(response.stream, httpx.AsyncByteStream)
    response.stream = _Capped(response.stream, response.request.url.host)
