"""The agent-side SDK: ask for a decision, let the turn end, and later claim and execute
exactly the approved call, once.

    async with SignoffClient("https://signoff.internal", api_key) as client:
        approval = await client.request(run_id=..., capability=..., tool=..., presentation=...)
        # wait for the decision, held on the server (no public URL needed); or end the turn
        # and act on the signed decision webhook (verify_webhook)
        decided = await client.wait(approval.id, max_wait=3600)
        if decided.state != "approved":
            return decided.state  # rejected, expired, answered... (or still pending)
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

Waiting for a decision needs no public URL: `wait()` (and `answer()`, and `wait_any()` for
many requests) holds a request open on the server, which answers as soon as the decision is
committed, and renews it until the deadline given. Against a server without waits (its answer
carries no `Signoff-Wait` header) they poll instead, backing off from `poll_first` to
`poll_most` seconds.

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
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Literal

import aiohttp

from signoff_client.errors import (
    InvalidRequest,
    NotFound,
    Overloaded,
    SignoffError,
    error_from_code,
)
from signoff_client.records import ApprovalRecord, ApprovalVote, Claim

__all__ = ["ApprovalRecord", "ApprovalVote", "Claim", "SignoffClient"]

QUESTION = "question"

# States a waiting agent stops on: decided (or otherwise closed) one way or another.
_WAITING = frozenset({"pending"})
# The longest wait a server holds (GET ...?wait=, docs/reference.md); a longer deadline is
# reached by renewing it.
WAIT_MAX = 60.0
# The shortest wait worth asking for: below it, a plain read.
_WAIT_MIN = 0.001
# How many ids one batch wait names, at most.
WAIT_IDS_MAX = 100


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
        poll_first: float = 0.5,
        poll_most: float = 10.0,
    ) -> None:
        """`timeout`: seconds for one call in all; a held wait gets its own length on top.
        `overload_*`: how a 429 (or a 503 with Retry-After) is retried: at most
        `overload_attempts` attempts in all, waiting Retry-After each time (at most
        `overload_wait_max` seconds), and no more than `overload_budget` seconds of waiting
        per call; `overload_attempts=1` never retries. `poll_first`, `poll_most`: the
        polling of `wait()` against a server without waits (first delay, longest delay)."""
        if overload_attempts < 1:
            raise ValueError("overload_attempts must be at least 1")
        if not 0 < poll_first <= poll_most:
            raise ValueError("poll_first must be above 0 and at most poll_most")
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {api_key}"}
        self._session = session
        self._own_session = session is None
        self.timeout = timeout
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self.poll_first = poll_first
        self.poll_most = poll_most
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
        status, data, _ = await self._exchange(method, path, body, params, headers)
        return status, data

    async def _exchange(
        self,
        method: str,
        path: str,
        body: Any,
        params: Mapping[str, Any] | None,
        headers: Mapping[str, str] | None,
        limit: aiohttp.ClientTimeout | None = None,
    ) -> tuple[int, Any, Mapping[str, str]]:
        """One request: (status, JSON body, response headers); an error answer raised as its
        class (`_Refused` for a 429, or a 503 with Retry-After). `limit` replaces the
        client's timeout for this request (a held wait outlasts it)."""
        async with self._http().request(
            method,
            self.base_url + path,
            json=body,
            params={k: str(v) for k, v in (params or {}).items() if v is not None},
            headers={**self._headers, **(headers or {})},
            timeout=limit or self._timeout,
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
            return response.status, data, response.headers

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

    async def answer(
        self,
        approval_id: str,
        max_wait: float = 60.0,
        *,
        first: float | None = None,
        most: float | None = None,
    ) -> str | None:
        """The answer to a question (or to a call answered instead of run), waiting up to
        `max_wait` seconds as `wait` does; None if it is still unanswered then, or if the
        request ended otherwise (expired, cancelled: `get()` says which)."""
        record = await self.wait(approval_id, max_wait, first=first, most=most)
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
        self,
        approval_id: str,
        max_wait: float = 60.0,
        *,
        first: float | None = None,
        most: float | None = None,
    ) -> ApprovalRecord:
        """Wait until the approval leaves `pending` or `max_wait` seconds pass; returns the
        latest record (still pending if the time ran out).

        The wait is held on the server (`GET /v1/approvals/{id}?wait=`, at most 60 s at a
        time, renewed until `max_wait`), which answers when the decision is committed: no
        public URL, no polling. `max_wait` may be hours; a process that may not live that
        long ends its turn and waits again later (or resumes on the webhook). A server
        without waits is polled instead, backing off from `first` to `most` seconds
        (default the client's `poll_first` and `poll_most`). A server refusing a wait for
        load (429, e.g. `too_many_waits`) is asked again after its Retry-After, within
        `max_wait`."""
        records = await self._wait_until([approval_id], max_wait, first, most, single=True)
        return records[0]

    async def wait_any(
        self,
        approval_ids: list[str],
        max_wait: float = 60.0,
        *,
        first: float | None = None,
        most: float | None = None,
    ) -> list[ApprovalRecord]:
        """Wait until any of the approvals (up to 100) leaves `pending` or `max_wait` seconds
        pass, on one held request (`GET /v1/approvals?ids=...&wait=`); returns their records
        in the order asked (ids this tenant has no request of are left out). As `wait` in
        every other way; a server without waits is polled one id at a time."""
        if not approval_ids:
            raise ValueError("wait_any needs at least one approval id")
        if len(approval_ids) > WAIT_IDS_MAX:
            raise ValueError(f"wait_any takes at most {WAIT_IDS_MAX} ids")
        return await self._wait_until(list(approval_ids), max_wait, first, most)

    async def wait_all(
        self,
        approval_ids: list[str],
        max_wait: float = 60.0,
        *,
        first: float | None = None,
        most: float | None = None,
    ) -> list[ApprovalRecord]:
        """Wait until none of the approvals is `pending` (or `max_wait` seconds pass): the
        requests of one agent turn, all decided. Holds one batch wait on those still
        pending at a time; returns every record, in the order asked."""
        deadline = time.monotonic() + max_wait
        latest: dict[str, ApprovalRecord] = {}
        waiting = list(dict.fromkeys(approval_ids))
        while waiting:
            left = deadline - time.monotonic()
            for record in await self.wait_any(waiting, max(left, 0), first=first, most=most):
                latest[record.id] = record
            waiting = [i for i in waiting if i in latest and latest[i].state in _WAITING]
            if left <= 0:
                break
        return [latest[i] for i in dict.fromkeys(approval_ids) if i in latest]

    async def _wait_until(
        self,
        ids: list[str],
        max_wait: float,
        first: float | None,
        most: float | None,
        *,
        single: bool = False,
    ) -> list[ApprovalRecord]:
        """The loop behind the waits: hold a server wait of min(60 s, what is left) and renew
        it; once an answer comes without `Signoff-Wait`, poll with backoff instead."""
        deadline = time.monotonic() + max_wait
        delay = self.poll_first if first is None else first
        most = self.poll_most if most is None else most
        held = True  # until a server answers a wait without the header
        while True:
            left = deadline - time.monotonic()
            offered = False
            if held and left >= _WAIT_MIN:
                try:
                    records, offered = await self._held_wait(ids, min(WAIT_MAX, left), single)
                except _Refused as refused:  # too many waits open: come back when told
                    if deadline - time.monotonic() <= 0:
                        raise refused.error from None
                    await asyncio.sleep(min(refused.wait, deadline - time.monotonic()))
                    continue
                held = offered
            else:
                records = await self._read(ids, single)
            left = deadline - time.monotonic()
            if left <= 0 or not records or any(r.state not in _WAITING for r in records):
                return records
            if offered:
                continue
            await asyncio.sleep(min(delay, left))
            delay = min(delay * 2, most)

    async def _held_wait(
        self, ids: list[str], seconds: float, single: bool
    ) -> tuple[list[ApprovalRecord], bool]:
        """One held wait; the records and whether the server honoured the wait (its answer
        carries `Signoff-Wait`). The request may take `seconds` longer than any other."""
        wait = f"{seconds:.3f}"
        limit = aiohttp.ClientTimeout(total=seconds + self.timeout)
        params: dict[str, Any] = {"wait": wait, "seen": "pending"}
        if single:
            path = f"/v1/approvals/{ids[0]}"
        else:  # `ids` keeps the page to these requests; `limit`, all of them on it
            path, params = "/v1/approvals", {"ids": ",".join(ids), "limit": len(ids), **params}
        try:
            _, data, headers = await self._exchange("GET", path, None, params, None, limit)
        except InvalidRequest as refused:
            named = {str(f.get("field")) for f in refused.fields or () if isinstance(f, dict)}
            if single or not named & {"ids", "wait", "seen"}:
                raise
            # A server older than the batch form refuses its parameters: read one by one.
            return await self._read(ids, single), False
        offered = "Signoff-Wait" in headers
        if single:
            return [ApprovalRecord.from_json(data)], offered
        if not offered:  # an older server ignores `ids` too: its list is not these records
            return await self._read(ids, single), False
        found = {a["id"]: ApprovalRecord.from_json(a) for a in data["approvals"]}
        return [found[i] for i in ids if i in found], True  # newest first: put in asked order

    async def _read(self, ids: list[str], single: bool) -> list[ApprovalRecord]:
        """The records as they stand, one plain read each (what any server answers)."""
        if single:
            return [await self.get(ids[0])]
        found = []
        for approval_id in ids:
            try:
                found.append(await self.get(approval_id))
            except NotFound:  # as the batch form: left out
                continue
        return found

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
