"""What `POST /slack/events` checks before Bolt sees a request.

Bolt parses a body before it checks the signature, and a listener meets whatever shape the
payload has; so an unsigned `payload=%7Bnot-json`, or a signed payload without a user, used
to answer 500 with a traceback. Here, in this order and before anything parses the body:

0. Slack's SSL check (a form of `ssl_check=1` and a token, and nothing else) is answered
   200 with nothing read or written, signed or not, as Bolt answers it;
1. the signature (Slack's `v0` HMAC over the timestamp and the raw body, 5-minute window),
   computed here over the bytes as they came: a timestamp that is not a short run of ASCII
   digits, a signature that is not ASCII, or a body that is not UTF-8 is 401 or 400, never
   the exception slack-sdk's verifier raises on them (it decodes the body and calls int() on
   the timestamp first);
2. replay: a signed request seen before (the same signature, on any replica) is answered
   200 and does nothing again; Slack never sends one request twice, an attacker with a
   captured request does;
3. the shape every listener relies on (a JSON object with a user id, actions and objects
   where objects belong; for the Events API's JSON body, a JSON object whose event is one):
   400 otherwise;
4. the workspace, when `[slack] team_id` is configured: a request from another workspace,
   or one that names no workspace at all, is 403 (a bot installed elsewhere with the same
   signing secret must not decide here, and leaving out `team` must not get past the check).
   Only Slack's URL verification, which decides nothing, names none and passes.
   An `E…` id is an Enterprise Grid org, compared with the request's enterprise id.

A request that passes comes with its body as parsed here (`Passed`), and Bolt is handed that
parse instead of parsing the text again: the listeners act on exactly what was checked (a
form whose text starts with "{" is not read as JSON behind the check's back), and a click
is parsed once.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from typing import Any, NamedTuple
from urllib.parse import parse_qs

from aiohttp import web

from bot.chat_memory import ChatMemory

log = logging.getLogger("signoff.slack")

TIMESTAMP = "X-Slack-Request-Timestamp"
SIGNATURE = "X-Slack-Signature"
_OBJECTS = ("channel", "container", "team", "enterprise", "view", "message")
WINDOW = 60 * 5  # seconds a signed request stays good, as Slack documents it
# Unix time in seconds has 10 digits until the year 2286; a longer "number" is not a time
# (and int() of 4,300 digits or more raises ValueError).
_MAX_TIMESTAMP_DIGITS = 12


class Passed(NamedTuple):
    """A request that may reach Bolt: its body's text and what it holds, parsed as Bolt's
    listeners expect it (a form's `payload` JSON; a command's fields; an event's JSON)."""

    text: str
    body: dict[str, Any]


class Workspace(NamedTuple):
    """Whom a signed request says it comes from: its team (workspace) and Enterprise Grid org
    ids where it names them. `exempt`: a request that decides nothing and names neither
    (Slack's URL verification and SSL check)."""

    team: str | None
    enterprise: str | None = None
    exempt: bool = False


_NONE = Workspace(None)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


class SlackGate:
    def __init__(self, signing_secret: str, memory: ChatMemory, team_id: str | None) -> None:
        self._key = signing_secret.encode()
        self.memory = memory
        self.team_id = team_id

    def signed(self, body: bytes, timestamp: str, signature: str) -> bool:
        """Whether `signature` is Slack's `v0` signature of `body` at `timestamp`, and the
        timestamp within WINDOW of now. Header values may hold anything (aiohttp keeps bytes
        that are not UTF-8 as surrogates): they are compared as bytes, never decoded."""
        if not (
            timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= _MAX_TIMESTAMP_DIGITS
        ):
            return False
        if abs(time.time() - int(timestamp)) > WINDOW:
            return False
        base = b"v0:" + timestamp.encode() + b":" + body
        expected = b"v0=" + hmac.new(self._key, base, hashlib.sha256).hexdigest().encode()
        return hmac.compare_digest(expected, signature.encode("utf-8", "surrogateescape"))

    async def check(self, request: web.Request) -> web.Response | Passed:
        """The answer for a request that must not reach Bolt, or what it holds (`Passed`)."""
        body = await request.read()
        if request.content_type == "application/x-www-form-urlencoded" and _ssl_check(body):
            # Slack's periodic certificate check, which Bolt answers before verifying any
            # signature: it asks nothing of signoff, so it is answered, and nothing is read
            # or written.
            return web.Response()
        timestamp = request.headers.get(TIMESTAMP, "")
        signature = request.headers.get(SIGNATURE, "")
        if not self.signed(body, timestamp, signature):
            log.warning("Slack request from %s refused: bad or stale signature", request.remote)
            return _error(401, "bad_signature", "missing, wrong or stale Slack signature")
        if not await self.memory.first_delivery("slack", signature):
            log.warning("Slack request from %s replayed; answered without acting", request.remote)
            return web.Response()
        try:
            text = body.decode()
        except UnicodeDecodeError:
            return _error(400, "malformed", "the body is not UTF-8")
        if request.content_type == "application/json":
            # The Events API (app_home_opened): JSON, never read as a form, where text an agent
            # chose (a title in the Home view it carries) could pose as a form field.
            problem, team, parsed = _event_shape(text)
        else:
            fields = {k: v[-1] for k, v in parse_qs(text, keep_blank_values=True).items()}
            problem, team, parsed = _shape(fields)
        if problem is not None:
            log.warning("signed Slack request refused: %s", problem)
            return _error(400, "malformed", problem)
        if self.team_id is not None and not team.exempt:
            named = team.enterprise if self.team_id.startswith("E") else team.team
            if named is None:
                log.warning("Slack request refused: it names no workspace (not %s)", self.team_id)
                return _error(403, "wrong_workspace", "the request names no workspace")
            if named != self.team_id:
                log.warning("Slack request from workspace %s refused: not %s", named, self.team_id)
                return _error(403, "wrong_workspace", "this app decides for another workspace")
        return Passed(text, parsed)


def _ssl_check(body: bytes) -> bool:
    """Whether `body` is Slack's SSL check (`ssl_check=1&token=...`), and nothing else: no
    payload or command rides along, so an interaction can never pass as one."""
    if b"ssl_check" not in body:
        return False  # every interaction: spared parsing its form twice (0.3 ms for 8 KB)
    try:
        fields = parse_qs(body.decode(), keep_blank_values=True)
    except (UnicodeDecodeError, ValueError):
        return False
    return fields.get("ssl_check") == ["1"] and not fields.keys() & {"payload", "command"}


Shape = tuple[str | None, Workspace, dict[str, Any]]  # (what is wrong, who, the body)


def _shape(fields: dict[str, str]) -> Shape:
    """What is wrong with a signed request's form, the workspace it names, and its body as
    Bolt's listeners read it (the payload's JSON, or the form's fields)."""
    if "payload" not in fields:  # a slash command, or an event Bolt handles on its own
        if "command" in fields and not fields.get("user_id"):
            return "a command without user_id", _NONE, {}
        team = Workspace(_text(fields.get("team_id")), _text(fields.get("enterprise_id")))
        return None, team, dict(fields)
    try:
        payload: Any = json.loads(fields["payload"])
    except (ValueError, RecursionError):
        return "payload is not JSON", _NONE, {}
    if not isinstance(payload, dict):
        return "payload is not a JSON object", _NONE, {}
    user = payload.get("user")
    if not isinstance(user, dict) or not isinstance(user.get("id"), str):
        return "payload names no user", _NONE, {}
    for name in _OBJECTS:
        if payload.get(name) is not None and not isinstance(payload[name], dict):
            return f"payload's {name} is not an object", _NONE, {}
    if payload.get("type") == "block_actions":
        actions = payload.get("actions")
        if not isinstance(actions, list) or not actions or not isinstance(actions[0], dict):
            return "block_actions without actions", _NONE, {}
    team = (payload.get("team") or {}).get("id") or user.get("team_id") or payload.get("team_id")
    enterprise = (
        (payload.get("enterprise") or {}).get("id")
        or user.get("enterprise_id")
        or payload.get("enterprise_id")
    )
    return None, Workspace(_text(team), _text(enterprise)), payload


def _event_shape(text: str) -> Shape:
    """What is wrong with an Events API body, the workspace it names, and the body."""
    try:
        payload: Any = json.loads(text)
    except (ValueError, RecursionError):
        return "the body is not JSON", _NONE, {}
    if not isinstance(payload, dict):
        return "the body is not a JSON object", _NONE, {}
    if payload.get("type") == "url_verification":
        return None, Workspace(None, exempt=True), payload
    if payload.get("type") == "event_callback" and not isinstance(payload.get("event"), dict):
        return "event_callback without an event", _NONE, {}
    team = Workspace(_text(payload.get("team_id")), _text(payload.get("enterprise_id")))
    return None, team, payload


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status)
