"""The web surface's declaration to the core (bot.surfaces): its `[web]` table, its one
notify target (`web`: shown in the inbox), its startup check and its channel.

Light on purpose: Jinja2 and the pages are loaded by the factory and the check, which run
only when `[web]` is configured. Nobody has a web account: people sign in by link as their
principal, so no card is personal here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bot.surfaces import Services, StartupCheck, Surface
from channels.web.config import WebConfig

if TYPE_CHECKING:
    from channels.base import Channel


def _build(services: Services) -> Channel:
    from channels.web.channel import WebChannel  # only deployments with [web] load Jinja2

    return WebChannel(
        services.table,
        services.public_url,
        services.store,
        services.directory,
        services.clock,
        services.operator,
        services.delegations,
    )


def _check(table: WebConfig | None, _options: StartupCheck) -> None:
    if table is not None:
        from channels.web.site import web_secret

        web_secret(table)
        if table.oidc is not None:
            from channels.web.oidc import oidc_secret

            oidc_secret(table.oidc)


SURFACE = Surface(
    name="web",
    where="on the web",
    config=WebConfig,
    factory=_build,
    target_forms=("web",),
    check=_check,
)
