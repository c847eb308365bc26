"""The `[web]` table: read by the declaration (channels/web/surface.py) and by the channel it
builds, so it lives apart from both and imports no Jinja2."""

from __future__ import annotations

from bot.config import EnvVar, Strict
from bot.validation import DurationText


class WebConfig(Strict):
    """The browser surface: an approver inbox and an operator dashboard, signed in by
    single-use links. Present in the config means served."""

    # The variable holding the key that signs session cookies (32 characters or more).
    secret_env: EnvVar = "SIGNOFF_WEB_SECRET"
    # A sign-in link works once, and only this long after it was made.
    link_ttl: DurationText = "15m"
    # A session ends after this long without a request.
    session_idle: DurationText = "8h"
