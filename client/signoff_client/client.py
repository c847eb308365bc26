"""The agent-side SDK: ask for a decision, let the turn end, and later claim and execute
exactly the approved call, once.

    async with SignoffClient("https://signoff.internal", api_key) as client:
        approval = await client.request(run_id=..., capability=..., tool=..., presentation=...)
        ...  # end the turn; a signed webhook (verify_webhook) says when it was decided
        claim = await client.claim(approval.id)
        outcome = run_tool(claim.tool, idempotency_key=claim.idempotency_key)
        await client.complete(approval.id, claim.claim_token, "succeeded", {"ref": outcome})

Errors are the server's classes and codes (signoff_client.errors), rebuilt from the error
code: NotPending, ApprovalExpired, NotFound, InvalidRequest (with `.fields`), Unauthorized...
A network failure (server unreachable, timeout) is aiohttp's own ClientError or TimeoutError:
retry it; every call is safe to repeat (create is idempotent, a claim repeated with the same
idempotency key returns the same claim, a repeated complete returns the recorded outcome).
`claim` itself retries a lost answer with the same key before giving up.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp

from signoff_client.errors import SignoffError, error_from_code

__all__ = ["ApprovalRecord", "ApprovalVote", "Claim", "SignoffClient"]

# States a waiting agent stops on: decided (or otherwise closed) one way or another.
_WAITING = frozenset({"pending"})


@dataclass(frozen=True, slots=True)
class ApprovalVote:
    """One vote towards an N-of-M quorum: who, deciding what ("approve" or "reject"), when,
    on which surface ("web", "slack", "telegram", "cli"; None if not recorded), and for whom
    a delegate stood in."""

    principal: str
    decision: str
    at: str
    via: str | None = None
    as_delegate_of: str | None = None
    note: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ApprovalVote:
        return cls(
            principal=data["principal"],
            decision=data["decision"],
            at=data["at"],
            via=data.get("via"),
            as_delegate_of=data.get("as_delegate_of"),
            note=data.get("note"),
        )


@dataclass(frozen=True, slots=True)
class ApprovalRecord:
    """An approval as the API returns it. `execution` tells a resumed agent whether the call
    never ran (not_started), ran with an unknown outcome (started), or finished."""

    id: str
    state: str
    execution: str
    hash: str
    kind: str
    capability: str
    tool: dict[str, Any]
    assignee: str
    decided_by: str | None
    decided_at: str | None
    expires_at: str | None
    origin_id: str | None
    presentation: Any
    raw: dict[str, Any]
    # The interrupted_side_effect approval raised when this one's lease lapsed, the newer
    # request of the same step that replaced it, and the current claim's lease.
    follow_up_id: str | None = None
    superseded_by: str | None = None
    lease_until: str | None = None
    # Every vote counted towards a quorum, oldest first (empty where one decision decides,
    # and from a server older than the field).
    votes: tuple[ApprovalVote, ...] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ApprovalRecord:
        return cls(
            id=data["id"],
            state=data["state"],
            execution=data["execution"],
            hash=data["hash"],
            kind=data["kind"],
            capability=data["capability"],
            tool=data["tool"],
            assignee=data["assignee"],
            decided_by=data.get("decided_by"),
            decided_at=data.get("decided_at"),
            expires_at=data.get("expires_at"),
            origin_id=data.get("origin_id"),
            presentation=data.get("presentation"),
            raw=dict(data),
            follow_up_id=data.get("follow_up_id"),
            superseded_by=data.get("superseded_by"),
            lease_until=data.get("lease_until"),
            votes=tuple(ApprovalVote.from_json(v) for v in data.get("votes") or ()),
        )


@dataclass(frozen=True, slots=True)
class Claim:
    """The approved call, held by this caller until `lease_until`: execute `tool` exactly,
    passing `idempotency_key` to the effect's API, then `complete()` with `claim_token`."""

    approval: ApprovalRecord
    claim_token: str
    lease_until: str
    idempotency_key: str
    tool: dict[str, Any]
    step: Any
    resume: Any
    preconditions: Any


class SignoffClient:
    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        session: aiohttp.ClientSession | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {api_key}"}
        self._session = session
        self._own_session = session is None
        self._timeout = aiohttp.ClientTimeout(total=timeout)

    async def __aenter__(self) -> SignoffClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session

    async def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, Any]:
        async with self._http().request(
            method,
            self.base_url + path,
            json=body,
            params={k: str(v) for k, v in (params or {}).items() if v is not None},
            headers={**self._headers, **(headers or {})},
        ) as response:
            try:
                data = await response.json(content_type=None)
            except ValueError:
                data = None
            if response.status >= 400:
                error = (data or {}).get("error") if isinstance(data, dict) else None
                if not isinstance(error, dict):
                    raise SignoffError(f"HTTP {response.status} from {path}")
                details = {k: v for k, v in error.items() if k not in ("code", "message")}
                raise error_from_code(str(error.get("code")), str(error.get("message")), details)
            return response.status, data

    async def request(self, **body: Any) -> ApprovalRecord:
        """Create (or find, for the same run_id and call) an approval request. Fields as in
        the create body: run_id, capability, tool, presentation, and the optional ones."""
        _, data = await self._call("POST", "/v1/approvals", body)
        return ApprovalRecord.from_json(data)

    async def get(self, approval_id: str) -> ApprovalRecord:
        _, data = await self._call("GET", f"/v1/approvals/{approval_id}")
        return ApprovalRecord.from_json(data)

    async def route(self, capability: str) -> dict[str, Any] | None:
        """The route a request for `capability` would take now (its `capability` glob,
        `approvers`, `required_approvals`), or None: signoff would refuse it `no_route`."""
        _, data = await self._call("GET", "/v1/routes/match", params={"capability": capability})
        return data["route"]

    async def list(self, **filters: Any) -> tuple[list[ApprovalRecord], str | None]:
        """One page (filters: state, run_id, capability, assignee, limit, cursor); returns the
        records and the cursor of the next page (None on the last)."""
        _, data = await self._call("GET", "/v1/approvals", params=filters)
        return [ApprovalRecord.from_json(a) for a in data["approvals"]], data["next_cursor"]

    async def wait(
        self, approval_id: str, max_wait: float = 60.0, *, first: float = 0.5, most: float = 10.0
    ) -> ApprovalRecord:
        """Poll until the approval leaves `pending` or `max_wait` seconds pass, backing off from
        `first` to `most` seconds between polls. For short waits only: a human may take days,
        so a real agent ends its turn and resumes on the webhook. Returns the latest record
        (still pending if the time ran out)."""
        deadline = time.monotonic() + max_wait
        delay = first
        while True:
            record = await self.get(approval_id)
            left = deadline - time.monotonic()
            if record.state not in _WAITING or left <= 0:
                return record
            await asyncio.sleep(min(delay, left))
            delay = min(delay * 2, most)

    async def claim(
        self,
        approval_id: str,
        lease: str | None = None,
        *,
        idempotency_key: str | None = None,
        attempts: int = 3,
    ) -> Claim:
        """Take the approved call for execution (one caller wins; others get NotPending).

        The claim carries an idempotency key (a new one unless you pass your own, e.g. one
        stored with the run so a restarted process can recover its claim): if the answer is
        lost on the way, the call is retried up to `attempts` times with the same key, and
        the server hands back the same claim instead of refusing it."""
        key = idempotency_key or str(uuid.uuid4())
        body = {"lease": lease} if lease else {}
        path = f"/v1/approvals/{approval_id}/claim"
        for attempt in range(1, attempts + 1):
            try:
                _, data = await self._call("POST", path, body, headers={"Idempotency-Key": key})
                break
            except (aiohttp.ClientError, TimeoutError):
                if attempt == attempts:
                    raise
                await asyncio.sleep(0.2 * 2**attempt)
        return Claim(
            approval=ApprovalRecord.from_json(data["approval"]),
            claim_token=data["claim_token"],
            lease_until=data["lease_until"],
            idempotency_key=data["idempotency_key"],
            tool=data["tool"],
            step=data["step"],
            resume=data["resume"],
            preconditions=data["preconditions"],
        )

    async def renew(
        self, approval_id: str, claim_token: str, lease: str | None = None
    ) -> ApprovalRecord:
        """Hold a claimed call longer (`lease` from now, default the server's claim lease),
        never past 24 h from the claim (LeaseExhausted); `lease_until` says until when."""
        body = {"claim_token": claim_token} | ({"lease": lease} if lease else {})
        _, data = await self._call("POST", f"/v1/approvals/{approval_id}/renew", body)
        return ApprovalRecord.from_json(data)

    async def release(self, approval_id: str, claim_token: str) -> ApprovalRecord:
        """Hand a claimed call back without having started it: approved again, for this or
        another caller to claim while its grant lasts."""
        body = {"claim_token": claim_token}
        _, data = await self._call("POST", f"/v1/approvals/{approval_id}/release", body)
        return ApprovalRecord.from_json(data)

    async def complete(
        self,
        approval_id: str,
        claim_token: str,
        outcome: Literal["succeeded", "failed"],
        result: Any = None,
    ) -> ApprovalRecord:
        body = {"claim_token": claim_token, "outcome": outcome, "result": result}
        _, data = await self._call("POST", f"/v1/approvals/{approval_id}/complete", body)
        return ApprovalRecord.from_json(data)

    async def supersede(self, approval_id: str, reason: str) -> ApprovalRecord:
        body = {"reason": reason}
        _, data = await self._call("POST", f"/v1/approvals/{approval_id}/supersede", body)
        return ApprovalRecord.from_json(data)

    async def cancel(self, approval_id: str, reason: str | None = None) -> ApprovalRecord:
        body = {"reason": reason} if reason else {}
        _, data = await self._call("POST", f"/v1/approvals/{approval_id}/cancel", body)
        return ApprovalRecord.from_json(data)
