"""The operator dashboard (to be written)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from channels.web import WebChannel


def add_routes(app: web.Application, channel: WebChannel) -> None:
    return None
