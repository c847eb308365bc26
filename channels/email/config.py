"""The `[email]` table and what an address may be: read by the declaration
(channels/email/surface.py), the channel it builds and the SMTP sender, so they live apart
from all three and import no SMTP client."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from bot.config import EnvVar, Strict
from bot.validation import DurationText

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
