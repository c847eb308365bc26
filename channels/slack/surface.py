"""Slack's declaration to the core (bot.surfaces): its `[slack]` table, its notify targets
(`slack:CHANNEL`, `slack:dm`), a principal's Slack user id, its startup check and its channel.

Light on purpose: it imports no Slack SDK, so every command can read the registry; Bolt is
loaded by the factory and the check, which run only when `[slack]` is configured.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from bot.surfaces import Services, StartupCheck, Surface
from channels.slack.config import SlackConfig

if TYPE_CHECKING:
    from channels.base import Channel


def _build(services: Services) -> Channel:
    from channels.slack.channel import SlackChannel  # only deployments with Slack load Bolt

    return SlackChannel(
        services.table,
        services.directory,
        services.operator,
        services.delegations,
        services.memory,
        web=services.channel("web"),  # type: ignore[arg-type]
    )


def _check(table: SlackConfig | None, _options: StartupCheck) -> None:
    if table is not None:
        from channels.slack.channel import check  # credentials, and a warning without a team_id

        check(table)


SURFACE = Surface(
    name="slack",
    where="in Slack",
    config=SlackConfig,
    factory=_build,
    target_forms=("slack:CHANNEL", "slack:dm"),
    target_pattern=r"dm|[A-Z0-9]+",
    # A member id: U... (W... on Enterprise Grid).
    account=Annotated[str, Field(pattern=r"^[UW][A-Z0-9]+$")],
    check=_check,
)
