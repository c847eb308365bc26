"""Web origins (scheme://host[:port]) as a browser writes them: the `[web] embed_origins`
a partner's page may frame an approval from, and a mint's `parent_origin`. Apart from
bot/embed_tokens.py so that reading the config loads nothing of the core.
"""

from __future__ import annotations

import re

# scheme://host[:port]: a host name or IPv4 address, as a CSP source may name it (no IPv6
# literal, no user info, no wildcard), a port from 0 to 65535. The OpenAPI document's pattern
# for `parent_origin` is this one, so what it admits the server takes and what it refuses the
# server refuses.
_PORT = r"(?:[0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
_ORIGIN = re.compile(rf"(https?)://([A-Za-z0-9.-]+)(?::({_PORT}))?")


def parse_origin(value: str) -> str:
    """An origin as a browser writes it (scheme://host[:port], the host lower-case, the
    default port left out), from exactly that and nothing more; ValueError otherwise. Both
    the config's `embed_origins` and a mint's `parent_origin` pass here, so they compare as
    text, and what goes into `frame-ancestors` and `postMessage` is never more than an
    origin."""
    match = _ORIGIN.fullmatch(value)
    if match is None:
        raise ValueError(f"expected an origin such as https://app.example.com, got {value!r}")
    scheme, host, port = match.group(1), match.group(2).lower(), match.group(3)
    default = {"http": 80, "https": 443}[scheme]
    if port is None or int(port) == default:
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{int(port)}"
