"""`signoff demo`'s scripted agent: the agents' side of the story (bot/demo.py).

It speaks only the public HTTP API with the tenants' bearer keys, and acts on each signed
decision webhook as a real agent would: claims and "runs" what was approved (simulated), says
why it will not run what was rejected, expired or answered.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, TextIO

import aiohttp
from aiohttp import web
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from bot.errors import SignoffError


class DemoFailed(SignoffError):
    """The demo could not set itself up; the message says what to do."""


@dataclass
class Agent:
    """The agents' side: files requests over the HTTP API and, on each decision webhook,
    runs what was approved (claim, execute, report) or says why it will not."""

    base_url: str
    keys: dict[str, str]  # tenant -> API key
    webhook_secrets: dict[str, str]  # tenant -> whsec_
    out: TextIO
    session: aiohttp.ClientSession = field(init=False)
    # Approvals this agent "crashes" on after claiming: it must not run them when their
    # webhook arrives.
    crashing: set[str] = field(default_factory=set)
    _seen: set[str] = field(default_factory=set)

    async def start(self) -> None:
        self.session = aiohttp.ClientSession()

    async def close(self) -> None:
        await self.session.close()

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    async def call(
        self, tenant: str, method: str, path: str, body: Any = None, *, expect: int = 200
    ) -> dict[str, Any]:
        async with self.session.request(
            method,
            self.base_url + path,
            json=body,
            headers={"Authorization": f"Bearer {self.keys[tenant]}"},
        ) as response:
            document = await response.json(content_type=None)
            if response.status != expect:
                raise DemoFailed(
                    f"the demo agent's {method} {path} got {response.status}: "
                    f"{json.dumps(document)[:500]}"
                )
            return dict(document)

    async def file(self, tenant: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.call(tenant, "POST", "/v1/approvals", body, expect=201)

    async def get(self, tenant: str, approval_id: str) -> dict[str, Any]:
        return await self.call(tenant, "GET", f"/v1/approvals/{approval_id}")

    async def claim(self, tenant: str, approval_id: str, lease: str | None = None) -> Any:
        body = {"lease": lease} if lease else {}
        return await self.call(tenant, "POST", f"/v1/approvals/{approval_id}/claim", body)

    # -- webhooks ---------------------------------------------------------------------------

    async def webhook(self, request: web.Request) -> web.Response:
        raw = await request.read()
        try:
            tenant = json.loads(raw)["approval"]["tenant"]
            secret = self.webhook_secrets[tenant]
            document = Webhook(secret).verify(raw, dict(request.headers))
        except (ValueError, KeyError, TypeError, WebhookVerificationError) as exc:
            self.say(f"agent: refused a webhook that did not verify ({exc})")
            return web.Response(status=400, text="bad signature")
        # A delivery may come twice (at least once); act on each once.
        if document["delivery_id"] not in self._seen:
            self._seen.add(document["delivery_id"])
            asyncio.get_running_loop().create_task(self._react(document["approval"]))
        return web.Response(text="ok")

    async def _react(self, approval: dict[str, Any]) -> None:
        title = approval["presentation"].get("title", approval["capability"])
        who = approval.get("decided_by") or "signoff"
        state = approval["state"]
        try:
            if state == "approved" and approval["id"] in self.crashing:
                return  # this run "crashed" after its claim; it never reports
            if state == "approved":
                claim = await self.claim(approval["tenant"], approval["id"])
                tool = claim["tool"]
                exactly = (
                    f"the arguments as {who} edited them ({json.dumps(tool['arguments'])}; "
                    f"it asked for sha256:{claim['original_hash'][:12]})"
                    if claim["edited"]
                    else "exactly the stored arguments"
                )
                self.say(
                    f"agent: {title!r} approved by {who}: claimed it and ran "
                    f"{tool['name']} with {exactly} (simulated)"
                )
                await self.call(
                    approval["tenant"],
                    "POST",
                    f"/v1/approvals/{approval['id']}/complete",
                    {
                        "claim_token": claim["claim_token"],
                        "outcome": "succeeded",
                        "result": {"simulated": True},
                    },
                )
            elif state in ("rejected", "expired", "cancelled"):
                note = approval.get("decision_note")
                self.say(
                    f"agent: {title!r} was {state}"
                    + (f" by {who}" if state == "rejected" else "")
                    + (f" ({note})" if note else "")
                    + "; it will not run"
                )
            elif state == "answered":
                answer = approval["answer"]
                given = answer.get("option") or answer.get("text")
                ran = "" if approval["kind"] == "question" else "; the tool did not run"
                self.say(f"agent: {title!r} answered by {who}: {given!r}{ran}")
            elif state == "outcome_unknown":
                self.say(
                    f"agent: {title!r}: signoff says the outcome is unknown (the claim's lease "
                    "lapsed); a human is asked whether to run it again"
                )
        except SignoffError as exc:
            self.say(f"agent: {title!r}: {exc.message}")
        except aiohttp.ClientError as exc:
            self.say(f"agent: {title!r}: the server did not answer ({exc})")
