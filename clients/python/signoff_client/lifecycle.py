"""The life of one approved call on the agent's side, shared by the framework adapters
(`signoff_client.langgraph`, `signoff_client.openai_agents`): claim, check, run, complete.

1. **Claim.** `SignoffClient.claim` takes the approved call (one caller wins; the others get
   NotPending) under an Idempotency-Key, so an answer lost on the way is retried without
   losing the claim. The adapters claim with a fresh key each time on purpose: a key shared
   by two resumers would hand both the same claim, and the call would run twice.
2. **Check.** `claim_mismatch` says why the claimed call may not run: it must hash to the
   hash every decider saw, and be exactly the call the agent paused on. Before claiming,
   `hashes_to` checks the paused call itself against the approval.
3. **Hold.** `hold` renews the lease right before the call starts, which proves this caller
   still holds the claim, and tells it otherwise what became of the call.
4. **Run and complete.** `ClaimedCall` tracks what signoff cannot see: whether the call was
   handed to the tool, what it returned, and whether signoff has acknowledged that outcome.
   `record` completes the approval, retrying a lost answer (a completion is safe to repeat).
5. **Hand back, or leave unknown.** A call that never started is released (approved again)
   or completed as not run; a call that started and never reported is left to its lease, so
   signoff marks it `outcome_unknown` and asks a human whether to run it again. Nothing here
   guesses an outcome.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp

from signoff_client.client import ApprovalRecord, Claim, SignoffClient
from signoff_client.errors import (
    ClaimMismatch,
    LeaseExhausted,
    NotPending,
    RequestTooLarge,
    SignoffError,
)
from signoff_client.hashing import approval_hash, canonical_json

__all__ = [
    "CLOSED",
    "RESULT_LIMIT",
    "ClaimedCall",
    "Hold",
    "Outcome",
    "asked_call",
    "claim_mismatch",
    "hashes_to",
    "hold",
    "record_outcome",
    "recorded_outcome",
    "resume_meta",
]

log = logging.getLogger("signoff_client.lifecycle")

Outcome = Literal["succeeded", "failed"]
# States in which the call never ran and never will: the agent is told that outcome instead
# (for `answered`, the person's answer: `signoff_client.telling.answered_message`).
CLOSED = frozenset({"rejected", "expired", "cancelled", "superseded", "answered"})
# The server's bound on a completion's result, in canonical JSON bytes.
RESULT_LIMIT = 16 * 1024
# A completion the network lost is sent this many times in all before it is left to the
# caller's later retry (and, failing that, to the lease).
_ATTEMPTS = 3


def resume_meta(approval: Mapping[str, Any], marker: str) -> Mapping[str, Any] | None:
    """What an adapter filed under its `marker` in the approval's `resume` field (a record's
    `raw`, or a webhook's `approval`), or None if another integration filed it."""
    resume = approval.get("resume")
    if isinstance(resume, Mapping) and isinstance(resume.get(marker), Mapping):
        return resume[marker]
    return None


def hashes_to(record: ApprovalRecord, name: Any, arguments: Any) -> bool:
    """Whether the call `name(arguments)` hashes, with the approval's kind, capability and
    presentation, to the hash the approval was decided on; for a call approved as edited,
    the call the agent asked for may hash to `original_hash` instead (what runs is then the
    revision, checked by `claim_mismatch`)."""
    found = approval_hash(record.kind, record.capability, record.presentation, name, arguments)
    return found == record.hash or (record.edited and found == record.original_hash)


def asked_call(record: ApprovalRecord) -> dict[str, Any] | None:
    """The call the agent asked for: the record's `tool`, or for one approved as edited the
    same tool with its original arguments."""
    if record.tool is None:
        return None
    if not record.edited:
        return dict(record.tool)
    return {"name": record.tool.get("name"), "arguments": record.original_arguments}


def claim_mismatch(
    claim: Claim, asked_tool: Any = None, approved_hash: str | None = None
) -> str | None:
    """Why the claimed call must not run, or None. The claimed call must hash to the
    approval's hash (which signoff's claim re-checks against what the humans were shown),
    that hash must be the one the caller checked before claiming (`approved_hash`), and the
    call must be the one the agent asked for (`asked_tool`), whatever the server returned.
    A call approved as edited runs the revision: then what the agent asked for must be the
    original, hashing to `original_hash`, and the revision the same tool."""
    approval = claim.approval
    name, arguments = claim.tool.get("name"), claim.tool.get("arguments")
    hashed = approval_hash(
        approval.kind, approval.capability, approval.presentation, name, arguments
    )
    if hashed != approval.hash:
        return f"approval {approval.id}: the claimed call does not hash to the approved hash"
    if approved_hash is not None and approval.hash != approved_hash:
        return f"approval {approval.id}: the claimed approval's hash changed since it was read"
    asked = claim.tool
    if claim.edited:
        asked = {"name": name, "arguments": approval.original_arguments}
        original = approval_hash(
            approval.kind, approval.capability, approval.presentation, name, asked["arguments"]
        )
        if claim.original_hash is None or original != claim.original_hash:
            return f"approval {approval.id}: the edited call's original does not hash to its hash"
    if asked_tool is not None and canonical_json(asked) != canonical_json(asked_tool):
        return f"approval {approval.id}: the claimed call is not the call the agent asked for"
    return None


def recorded_outcome(record: ApprovalRecord) -> tuple[str, Any]:
    """The (outcome status, result) signoff recorded for a call that already ran."""
    outcome = record.raw.get("outcome") or {}
    return str(outcome.get("status")), outcome.get("result")


@dataclass(frozen=True)
class Hold:
    """What `hold` learned about a claim just before its call starts.

    - `held`: this caller holds it (its lease renewed): start the call.
    - `ran`: the call already ran; `record` holds its outcome (`recorded_outcome`).
    - `released`: the claim was handed back and the grant is approved again: claim it anew.
    - `lost`: another caller holds it, its lease ran out, or the approval moved on; `why`."""

    status: Literal["held", "ran", "released", "lost"]
    why: str = ""
    record: ApprovalRecord | None = None


async def hold(client: SignoffClient, approval_id: str, claim_token: str) -> Hold:
    """Renew the claim's lease right before the call starts: a renewal succeeds only for the
    current holder, so it proves this caller may start the call now."""
    try:
        await client.renew(approval_id, claim_token)
    except NotPending as exc:
        if exc.state in ("executed", "failed"):
            return Hold("ran", record=await client.get(approval_id))
        if exc.state == "approved":
            return Hold("released")
        return Hold("lost", f"approval {approval_id} is {exc.state}")
    except (ClaimMismatch, LeaseExhausted) as exc:
        why = f"this caller no longer holds the claim on approval {approval_id}: {exc.message}"
        return Hold("lost", why)
    return Hold("held")


async def record_outcome(
    client: SignoffClient,
    approval_id: str,
    claim_token: str,
    outcome: Outcome,
    result: Any,
) -> bool:
    """Complete the approval with the call's outcome; True once signoff holds it. A lost
    answer is retried (a completion is safe to repeat); a result over the server's bound is
    replaced by a short stand-in. Never raises for the network or a refusal: the call ran, so
    the caller keeps the outcome and tries again later, and if nobody reports, the lease
    lapses to outcome_unknown and signoff asks a human."""
    for attempt in range(_ATTEMPTS):
        try:
            try:
                await client.complete(approval_id, claim_token, outcome, result)
            except RequestTooLarge:
                stand_in = {"truncated": True, "repr": repr(result)[:2000]}
                await client.complete(approval_id, claim_token, outcome, stand_in)
            return True
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("recording the outcome of %s failed (%s)", approval_id, exc)
            if attempt < _ATTEMPTS - 1:
                await asyncio.sleep(0.2 * 2**attempt)
        except SignoffError as exc:  # refused: retrying would not change the answer
            log.error("signoff refused the outcome of %s: %s", approval_id, exc)
            return False
    return False


@dataclass(eq=False)
class ClaimedCall:
    """An approved call this process claimed, and how far it got: the part of the truth
    signoff cannot see until it is told.

    `started` is set when the call is handed to the tool: from then on the claim is never
    handed back, since the tool may have taken effect. `outcome` is what the tool returned
    (None while it runs, or if it never returned), and `recorded` that signoff holds an
    outcome for the claim (the tool's, or "not run")."""

    approval_id: str
    claim_token: str
    idempotency_key: str | None = None
    started: bool = False
    outcome: tuple[Outcome, Any] | None = None
    recorded: bool = False

    @classmethod
    def from_claim(cls, claim: Claim) -> ClaimedCall:
        return cls(claim.approval.id, claim.claim_token, claim.idempotency_key)

    @property
    def unsent(self) -> tuple[Outcome, Any] | None:
        """The tool's outcome while signoff has not acknowledged it."""
        return None if self.recorded else self.outcome

    async def record(self, client: SignoffClient, outcome: Outcome, result: Any) -> bool:
        """The tool returned: keep its outcome and complete the approval with it."""
        self.started = True
        if not self.recorded:
            self.outcome = (outcome, result)
        return await self.resend(client)

    async def resend(self, client: SignoffClient) -> bool:
        """Send an outcome signoff has not acknowledged yet; True once it holds one."""
        if self.recorded or self.outcome is None:
            return self.recorded
        self.recorded = await record_outcome(
            client, self.approval_id, self.claim_token, *self.outcome
        )
        return self.recorded

    async def release(self, client: SignoffClient) -> bool:
        """Hand back a claim whose call never started: the grant is approved again, for a
        later attempt to claim. A failure is logged, not raised: the caller is usually
        already handling an error of its own, and the lease lapsing is the last resort. Only
        for a call that never `started`: the caller checks."""
        try:
            await client.release(self.approval_id, self.claim_token)
        except SignoffError as exc:
            log.warning("could not release approval %s: %s", self.approval_id, exc)
            return False
        return True

    async def record_not_run(self, client: SignoffClient, why: str) -> None:
        """Complete a claimed call that never started, and never will, as failed without
        running: for when handing it back would let it run out of turn."""
        try:
            await client.complete(
                self.approval_id, self.claim_token, "failed", {"ran": False, "error": why}
            )
        except SignoffError:
            log.exception("approval %s: could not record the outcome", self.approval_id)
            return
        self.recorded = True
