"""The `[slack]` table: read by the declaration (channels/slack/surface.py) and by the
channel it builds, so it lives apart from both and imports no Slack SDK."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from bot.config import EnvVar, Strict
from bot.validation import HttpUrl


class SlackConfig(Strict):
    bot_token_env: EnvVar = "SLACK_BOT_TOKEN"
    signing_secret_env: EnvVar = "SLACK_SIGNING_SECRET"
    api_base_url: HttpUrl = "https://slack.com/api/"
    # The workspace whose clicks decide (its id, T...): a request from any other is refused.
    team_id: Annotated[str, Field(pattern=r"^[TE][A-Z0-9]{2,}$")] | None = None
