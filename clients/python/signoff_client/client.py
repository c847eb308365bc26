"""The agent-side SDK: ask for a decision, let the turn end, and later claim and execute
exactly the approved call, once.

    async with SignoffClient("https://signoff.internal", api_key) as client:
        approval = await client.request(run_id=..., capability=..., tool=..., presentation=...)
        ...  # end the turn; a signed webhook (verify_webhook) says when it was decided
        claim = await client.claim(approval.id)
        # claim.tool is the call to run: an approver's revision if claim.edited
        outcome = run_tool(claim.tool, idempotency_key=claim.idempotency_key)
        await client.complete(approval.id, claim.claim_token, "succeeded", {"ref": outcome})

A request may also end `answered`: a person replied in words instead of deciding, and the
call never runs (`record.answer_text`). `ask()` asks a person a question with no call at all.

Errors are the server's classes and codes (signoff_client.errors), rebuilt from the error
code: NotPending, ApprovalExpired, NotFound, InvalidRequest (with `.fields`), Unauthorized...
A network failure (server unreachable, timeout) is aiohttp's own ClientError or TimeoutError:
retry it; every call is safe to repeat (create is idempotent, a claim repeated with the same
idempotency key returns the same claim, a repeated complete returns the recorded outcome).
`claim` itself retries a lost answer with the same key before giving up.

A busy server refuses creates with 429 and Retry-After (and an unavailable one may answer 503
with Retry-After); such an answer changed nothing. The client waits as asked and asks again,
within `overload_attempts` attempts and `overload_budget` seconds of waiting in all, each wait
at most `overload_wait_max` seconds (plus up to a quarter more, at random, so agents refused
together do not all come back together); then it raises the answer's error (`Overloaded` for
a 429). Every call but supersede and cancel is retried this way.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Literal

import aiohttp

from signoff_client.errors import Overloaded, SignoffError, error_from_code

__all__ = ["ApprovalRecord", "ApprovalVote", "Claim", "SignoffClient"]

QUESTION = "question"

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
    never ran (not_started), ran with an unknown outcome (started), or finished.

    `kind` is "tool_call" (or "interrupted_side_effect"), or "question": then `tool` is None
    and `question` holds the options offered (`{}` for a reply in words). A request ends
    `answered` when a person replied instead of deciding: `answer` is `{"text": ...}` or
    `{"option": ...}`, and nothing ran. `edited`: an approver changed the arguments before
    approving; `tool` and `hash` are that revision, `original_arguments` and
    `original_hash` what the agent asked for."""

    id: str
    state: str
    execution: str
    hash: str
    kind: str
    capability: str
    tool: dict[str, Any] | None
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
    # Questions, answers and edits (None, None, False... from a server older than them).
    question: dict[str, Any] | None = None
    answer: dict[str, Any] | None = None
    edited: bool = False
    original_hash: str | None = None
    original_arguments: dict[str, Any] | None = None

    @property
    def answered(self) -> bool:
        return self.state == "answered"

    @property
    def answer_text(self) -> str | None:
        """The person's answer in words, or the option they chose; None until answered."""
        if not self.answer:
            return None
        value = self.answer.get("text", self.answer.get("option"))
        return None if value is None else str(value)

    @property
    def options(self) -> list[str]:
        """A question's options (empty for one answered in words, and for a tool call)."""
        return list((self.question or {}).get("options") or [])

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ApprovalRecord:
        return cls(
            id=data["id"],
            state=data["state"],
            execution=data["execution"],
            hash=data["hash"],
            kind=data["kind"],
            capability=data["capability"],
            tool=data.get("tool"),
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
            question=data.get("question"),
            answer=data.get("answer"),
            edited=bool(data.get("edited")),
            original_hash=data.get("original_hash"),
            original_arguments=data.get("original_arguments"),
        )


@dataclass(frozen=True, slots=True)
class Claim:
    """The approved call, held by this caller until `lease_until`: execute `tool` exactly,
    passing `idempotency_key` to the effect's API, then `complete()` with `claim_token`.

    When `edited`, `tool` is the approver's revision of the call (what was approved, and so
    what must run), `original_hash` the hash of the call the agent asked for, and
    `original_arguments` its arguments."""

    approval: ApprovalRecord
    claim_token: str
    lease_until: str
    idempotency_key: str
    tool: dict[str, Any]
    step: Any
    resume: Any
    preconditions: Any
    edited: bool = False
    original_hash: str | None = None

    @property
    def original_arguments(self) -> dict[str, Any] | None:
        return self.approval.original_arguments if self.edited else None


class _Refused(Exception):
    """A 429, or a 503 with Retry-After: `error` to raise once the budget is spent, `wait`
    the seconds the server asked for."""

    def __init__(self, error: SignoffError, wait: float) -> None:
        super().__init__(str(error))
        self.error = error
        self.wait = wait


def _retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (seconds, or an HTTP date); None without one
    that makes sense."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    return max(0.0, seconds) if seconds == seconds else None  # NaN is no wait


class SignoffClient:
    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        session: aiohttp.ClientSession | None = None,
        timeout: float = 30.0,
        overload_attempts: int = 8,
        overload_budget: float = 120.0,
        overload_wait_max: float = 30.0,
    ) -> None:
        """`overload_*`: how a 429 (or a 503 with Retry-After) is retried: at most
        `overload_attempts` attempts in all, waiting Retry-After each time (at most
        `overload_wait_max` seconds), and no more than `overload_budget` seconds of waiting
        per call; `overload_attempts=1` never retries."""
        if overload_attempts < 1:
            raise ValueError("overload_attempts must be at least 1")
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {api_key}"}
        self._session = session
        self._own_session = session is None
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self.overload_attempts = overload_attempts
        self.overload_budget = overload_budget
        self.overload_wait_max = overload_wait_max

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
        *,
        retry: bool = True,
    ) -> tuple[int, Any]:
        """One call; with `retry`, a 429 or a 503 with Retry-After is asked again after the
        wait it names, within the client's overload budget (see the module's docstring)."""
        waited = 0.0
        attempt = 1
        while True:
            try:
                return await self._once(method, path, body, params, headers)
            except _Refused as refused:
                wait = min(refused.wait, self.overload_wait_max) * (1 + random.random() / 4)
                wait = min(wait, self.overload_wait_max)
                if (
                    not retry
                    or attempt >= self.overload_attempts
                    or waited + wait > self.overload_budget
                ):
                    raise refused.error from None
            await asyncio.sleep(wait)
            waited += wait
            attempt += 1

    async def _once(
        self,
        method: str,
        path: str,
        body: Any,
        params: Mapping[str, Any] | None,
        headers: Mapping[str, str] | None,
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
                found: SignoffError
                if isinstance(error, dict):
                    details = {k: v for k, v in error.items() if k not in ("code", "message")}
                    code, message = str(error.get("code")), str(error.get("message"))
                    found = error_from_code(code, message, details)
                elif response.status == 429:  # a proxy's rate limit, in its own words
                    found = Overloaded(f"HTTP 429 from {path}")
                else:
                    found = SignoffError(f"HTTP {response.status} from {path}")
                wait = _retry_after(response.headers.get("Retry-After"))
                if response.status == 429:
                    raise _Refused(found, 1.0 if wait is None else wait)
                if response.status == 503 and wait is not None:
                    raise _Refused(found, wait)
                raise found
            return response.status, data

    async def request(self, **body: Any) -> ApprovalRecord:
        """Create (or find, for the same run_id and call) an approval request. Fields as in
        the create body: run_id, capability, tool, presentation, and the optional ones."""
        _, data = await self._call("POST", "/v1/approvals", body)
        return ApprovalRecord.from_json(data)

    async def ask(
        self,
        question_title: str,
        options: list[str] | None = None,
        *,
        capability: str,
        run_id: str,
        fields: list[dict[str, Any]] | None = None,
        presentation: Mapping[str, Any] | None = None,
        **body: Any,
    ) -> ApprovalRecord:
        """Ask a person a question (a request of kind "question", with no call to run): with
        `options` (2-5 short strings) they choose one, without them they reply in words. It
        is routed by `capability`, and delegated, escalated, reminded and expiring like an
        approval. The title is what they read; `fields` (label/value) add context, or pass a
        whole `presentation` instead. Asking again with the same run_id and question finds
        the same request. Read the answer with `answer()` (or `wait()` and `answer_text`), or
        on the decision webhook; the other create fields (reason, requested_by, approvers,
        approval_ttl, callback_url, resume, ...) go in `body` as they are."""
        shown: dict[str, Any] = (
            dict(presentation) if presentation is not None else {"title": question_title}
        )
        if fields is not None:
            shown["fields"] = list(fields)
        question: dict[str, Any] = {"options": list(options)} if options else {}
        return await self.request(
            kind=QUESTION,
            run_id=run_id,
            capability=capability,
            question=question,
            presentation=shown,
            **body,
        )

    async def answer(self, approval_id: str, max_wait: float = 60.0) -> str | None:
        """The answer to a question (or to a call answered instead of run), polling up to
        `max_wait` seconds as `wait` does; None if it is still unanswered then, or if the
        request ended otherwise (expired, cancelled: `get()` says which)."""
        record = await self.wait(approval_id, max_wait)
        return record.answer_text if record.answered else None

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
            edited=bool(data.get("edited")),
            original_hash=data.get("original_hash"),
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
        another caller to claim while its grant lasts; or `superseded` (its `superseded_by`
        set) if a newer request of its step was made meanwhile."""
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
        _, data = await self._call(
            "POST", f"/v1/approvals/{approval_id}/supersede", body, retry=False
        )
        return ApprovalRecord.from_json(data)

    async def cancel(self, approval_id: str, reason: str | None = None) -> ApprovalRecord:
        body = {"reason": reason} if reason else {}
        _, data = await self._call("POST", f"/v1/approvals/{approval_id}/cancel", body, retry=False)
        return ApprovalRecord.from_json(data)
