"""The `[web]` table: read by the declaration (channels/web/surface.py) and by the channel it
builds, so it lives apart from both and imports no Jinja2."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from bot.config import EnvVar, Strict
from bot.embed_tokens import parse_origin
from bot.validation import DurationText

# scheme://host[:port], written as a browser writes it (bot.embed_tokens.parse_origin).
Origin = Annotated[str, AfterValidator(parse_origin)]


class WebConfig(Strict):
    """The browser surface: an approver inbox and an operator dashboard, signed in by
    single-use links. Present in the config means served."""

    # The variable holding the key that signs session cookies (32 characters or more).
    secret_env: EnvVar = "SIGNOFF_WEB_SECRET"
    # A sign-in link works once, and only this long after it was made.
    link_ttl: DurationText = "15m"
    # A session ends after this long without a request.
    session_idle: DurationText = "8h"
    # The origins whose pages may frame an approval (/embed/<token>, docs/web.md
    # "Embedding an approval"); none by default, so nothing can be framed.
    embed_origins: list[Origin] = Field(default_factory=list)
