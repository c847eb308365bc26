"""Email's declaration to the core (bot.surfaces): its `[email]` table (the SMTP server and
the sender), its notify targets (`email:dm`, each approver's mailbox; `email:NAME`, one
principal's), a principal's address, its startup check, its `config check` probe and its
channel.

Light on purpose: aiosmtplib and the pages are loaded by the factory and the probe, which run
only when `[email]` is configured. A target names a principal, never an address, so nobody
can make signoff mail a stranger: every address comes from the `[principals]` tables.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from bot.config import Config
from bot.surfaces import Services, StartupCheck, Surface
from channels.email.config import EmailAddress, EmailConfig

if TYPE_CHECKING:
    from channels.base import Channel

log = logging.getLogger("signoff.cli")


def _build(services: Services) -> Channel:
    from channels.email.channel import EmailChannel  # only deployments with [email] load aiosmtplib

    return EmailChannel(
        services.table,
        services.public_url,
        services.store,
        services.directory,
        services.clock,
        services.operator,
        services.delegations,
        web=services.channel("web"),  # type: ignore[arg-type]
    )


def _check(table: EmailConfig | None, _options: StartupCheck) -> None:
    if table is not None:
        from channels.email.smtp import smtp_credentials

        smtp_credentials(table)


async def _probe(table: EmailConfig, _config: Config) -> None:
    """Connect to the SMTP server as sending would (EHLO, STARTTLS, AUTH) and warn, naming
    the step, about what fails."""
    from channels.email.smtp import probe

    problem = await probe(table)
    if problem is not None:
        log.warning("email: %s", problem)


SURFACE = Surface(
    name="email",
    where="by email",
    config=EmailConfig,
    factory=_build,
    target_forms=("email:dm", "email:NAME"),
    target_pattern=r"dm|@?[a-z0-9][a-z0-9_.-]*",
    targets_principals=True,
    account=EmailAddress,
    check=_check,
    probe=_probe,
)
