"""The base of signoff's one error hierarchy, and the errors the store itself raises.

They live here, at the bottom, so the store depends on nothing above it; bot/errors.py
re-exports them and builds every other error on `SignoffError`, so a caller catching
`bot.errors.StoreUnavailable` (or any `SignoffError`) catches what the store raises.

Each class's docstring is its default message. Surfaces (CLI, HTTP API, chat channels) turn
these into a human sentence or a status code; none of them is ever shown as a traceback.
`code` is the stable machine-readable name (the HTTP API's error bodies carry it).
"""

from __future__ import annotations

from typing import Any


class SignoffError(Exception):
    """signoff failed.

    `code` is the stable name an API client sees; `http_status` the status an HTTP surface
    (the agent API, the web pages) answers with, inherited by subclasses."""

    code = "error"
    http_status = 400

    def __init__(self, message: str | None = None, **details: Any) -> None:
        self.message = message or (self.__doc__ or "").strip()
        self.details = details
        super().__init__(self.message)


class ConfigError(SignoffError):
    """The configuration is invalid."""

    code = "config_error"


class SchemaOutOfDate(SignoffError):
    """The database schema is not current; run `signoff db upgrade`."""

    code = "schema_out_of_date"
    http_status = 503


class InvalidRequest(SignoffError):
    """The approval request is invalid."""

    code = "invalid_request"
    http_status = 422

    def __init__(self, message: str | None = None, *, fields: list[dict[str, Any]] | None = None):
        super().__init__(message, fields=fields or [])
        self.fields = fields or []


class StoreUnavailable(SignoffError):
    """The database is unreachable or too busy to answer; nothing was changed, retry later."""

    code = "store_unavailable"
    http_status = 503
