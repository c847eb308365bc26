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
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import AfterValidator, Field

from bot.config import Config, EnvVar, Strict
from bot.surfaces import Services, StartupCheck, Surface
from bot.validation import DurationText

if TYPE_CHECKING:
    from channels.base import Channel

log = logging.getLogger("signoff.cli")

# One address, no display name, no list: what an SMTP envelope names (RFC 5321's 254).
_ADDRESS = r"^[^@\s<>,;:\"()\[\]\\]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$"
# Lower case, so one mailbox cannot be two principals' by spelling it twice.
EmailAddress = Annotated[str, Field(pattern=_ADDRESS, max_length=254), AfterValidator(str.lower)]
# The port each kind of security uses unless the table says otherwise.
DEFAULT_PORTS = {"starttls": 587, "tls": 465, "none": 25}


class EmailConfig(Strict):
    """The SMTP server signoff sends through, and who the mail is from."""

    host: Annotated[str, Field(min_length=1, max_length=253)]
    port: Annotated[int, Field(gt=0, lt=65536)] | None = None
    # starttls: plain connection upgraded by STARTTLS (587); tls: TLS from the first byte
    # (465); none: no encryption, for a relay on the same host or network only.
    security: Literal["starttls", "tls", "none"] = "starttls"
    from_address: EmailAddress
    from_name: Annotated[str, Field(max_length=100, pattern=r"^[^\r\n]*$")] = "signoff"
    reply_to: EmailAddress | None = None
    # AUTH with these variables' values when username_env is set (both must be).
    username_env: EnvVar | None = None
    password_env: EnvVar = "SIGNOFF_SMTP_PASSWORD"
    # How long one connection, command or message may take before it is tried again later.
    timeout: DurationText = "30s"

    @property
    def smtp_port(self) -> int:
        return self.port if self.port is not None else DEFAULT_PORTS[self.security]


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
