"""A real OpenID provider for the `[web.oidc]` tests: the npm package `oidc-provider`, run by
Node from tests/support/oidc/ (package.json, package-lock.json, provider.mjs), with its own
login and consent pages (any password signs a login in).

`installed()` runs `npm ci` there once (under a file lock: xdist workers share the folder)
and again only when package-lock.json changes (a stamp file holds its hash). `OidcProvider`
starts `node provider.mjs` on a loopback port, reads the issuer from its first line, and
stops it with SIGTERM. `tamper(mode)` makes the provider's next token answer carry a doctored
ID token (another issuer, another key, expired, another nonce: see provider.mjs).

Without Node the tests skip, saying so, except under CI=true, where they fail.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent / "oidc"
CLIENT_ID = "signoff-test"
CLIENT_SECRET = "oidc-test-client-secret-0123456789"
OPERATORS_GROUP = "signoff-operators"
# Logins typed on the provider's login page, and the claims each gets. `mallory` is nobody
# the directory knows; `unverified` has alice's address, unverified.
ACCOUNTS: dict[str, dict[str, Any]] = {
    "alice": {"email": "Alice@Example.com", "email_verified": True, "name": "Alice Ng"},
    "bob": {"email": "bob@example.com", "email_verified": True, "groups": ["finance"]},
    "olga": {"email": "olga@example.com", "email_verified": True, "groups": [OPERATORS_GROUP]},
    "mallory": {"email": "mallory@elsewhere.example", "email_verified": True},
    "unverified": {"email": "alice@example.com", "email_verified": False},
}
# The directory's side: the principals' addresses (tests add them to their config).
EMAILS = {"alice": "alice@example.com", "bob": "bob@example.com", "olga": "olga@example.com"}
_START_TIMEOUT = 30.0


def node() -> str:
    """The node executable; a skip (a failure under CI) when there is none."""
    found = shutil.which("node")
    if found is None:
        message = "node is not installed (apt-get install nodejs npm): the OIDC tests need it"
        if os.environ.get("CI") == "true":
            pytest.fail(message + " (CI=true: these tests must not skip)")
        pytest.skip(message)
    return found


def installed() -> Path:
    """tests/support/oidc/ with its node_modules matching package-lock.json."""
    node()
    lock = (HERE / "package-lock.json").read_bytes()
    digest = hashlib.sha256(lock).hexdigest()
    stamp = HERE / "node_modules" / ".signoff-installed"
    with open(HERE / ".install.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if not (stamp.is_file() and stamp.read_text() == digest):
            subprocess.run(
                ["npm", "ci", "--no-audit", "--no-fund", "--silent"],
                cwd=HERE,
                check=True,
                timeout=300,
            )
            stamp.write_text(digest)
    return HERE


class OidcProvider:
    """`node provider.mjs` on a loopback port, with `clients` registered."""

    def __init__(self, redirect_uris: Sequence[str], *, client_id: str = CLIENT_ID) -> None:
        self.setup = {
            "clients": [
                {
                    "client_id": client_id,
                    "client_secret": CLIENT_SECRET,
                    "redirect_uris": list(redirect_uris),
                    "grant_types": ["authorization_code"],
                    "response_types": ["code"],
                }
            ],
            "accounts": ACCOUNTS,
        }
        self.issuer = ""
        self._process: subprocess.Popen[str] | None = None

    def __enter__(self) -> OidcProvider:
        env = {**os.environ, "OIDC_TEST_SETUP": json.dumps(self.setup), "NODE_NO_WARNINGS": "1"}
        self._process = subprocess.Popen(
            [node(), "provider.mjs"],
            cwd=installed(),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        line = _first_line(self._process, _START_TIMEOUT)
        self.issuer = json.loads(line)["issuer"]
        return self

    def __exit__(self, *exc: object) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def tamper(self, mode: str | None) -> None:
        """The next token answer's ID token doctored as `mode` says (provider.mjs)."""
        request = urllib.request.Request(
            f"{self.issuer}/__test/tamper",
            data=json.dumps({"mode": mode}).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 204

    def config(self, **overrides: Any) -> dict[str, Any]:
        """A `[web.oidc]` table for this provider."""
        return {
            "issuer": self.issuer,
            "client_id": CLIENT_ID,
            "client_secret_env": "SIGNOFF_TEST_OIDC_SECRET",
            "scopes": ["openid", "email", "profile", "groups"],
            "operator_claim": "groups",
            "operator_values": [OPERATORS_GROUP],
            "name": "Test IdP",
            **overrides,
        }


SECRET_ENV: Mapping[str, str] = {"SIGNOFF_TEST_OIDC_SECRET": CLIENT_SECRET}


def _first_line(process: subprocess.Popen[str], timeout: float) -> str:
    """The process's first stdout line, or an error if it exits or is silent too long."""
    import selectors

    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        if not selector.select(timeout):
            process.kill()
            raise RuntimeError(f"the OIDC provider said nothing within {timeout} s")
    line = process.stdout.readline()
    if not line:
        raise RuntimeError(f"the OIDC provider exited ({process.wait()}) before it listened")
    return line
