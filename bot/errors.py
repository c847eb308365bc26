"""The one error hierarchy of signoff.

Each class's docstring is its default message. Surfaces (CLI, HTTP API, chat channels) turn
these into a human sentence or a status code; none of them is ever shown as a traceback.
`code` is the stable machine-readable name (the HTTP API's error bodies will carry it).

The base class and the errors the store raises are defined in store/errors.py (the store
depends on nothing above it) and re-exported here: import any error from this module.
"""

from __future__ import annotations

from datetime import datetime

from store.errors import (
    ConfigError,
    InvalidRequest,
    SchemaOutOfDate,
    SignoffError,
    StoreUnavailable,
)

__all__ = [
    "AlreadyVoted",
    "ApprovalChanged",
    "ApprovalCorrupt",
    "ApprovalExpired",
    "ApproversOutsideRoute",
    "ClaimMismatch",
    "ConfigError",
    "DelegationLoop",
    "DeliveryFailed",
    "EditRefused",
    "GrantRefused",
    "InvalidRequest",
    "LeaseExhausted",
    "MalformedJson",
    "NoRoute",
    "NotAnApprover",
    "NotCanonical",
    "NotFound",
    "NotPending",
    "Overloaded",
    "PolicyChanged",
    "RequestTooLarge",
    "RetryLater",
    "SchemaOutOfDate",
    "SelfApproval",
    "SignInRefused",
    "SignoffError",
    "StoreUnavailable",
    "TooManyWaits",
    "Unauthorized",
    "Undeliverable",
    "UnknownPrincipal",
    "UnknownTenant",
]


class MalformedJson(InvalidRequest):
    """The body is not well-formed JSON (or repeats a key, which JSON leaves ambiguous)."""

    code = "malformed_json"
    http_status = 400


class RequestTooLarge(InvalidRequest):
    """The approval request is larger than the configured limit."""

    code = "too_large"
    http_status = 413


class NotCanonical(InvalidRequest):
    """The value cannot be expressed as RFC 8785 canonical JSON, so it cannot be hashed."""

    code = "not_canonical"


class UnknownTenant(InvalidRequest):
    """No tenant of that name is configured."""

    code = "unknown_tenant"


class NoRoute(InvalidRequest):
    """No route matches this tenant and capability, so nobody may decide it; refused."""

    code = "no_route"


class ApproversOutsideRoute(InvalidRequest):
    """The request names approvers its route does not allow (a request may narrow, never widen)."""

    code = "approvers_outside_route"


class UnknownPrincipal(SignoffError):
    """No principal of that name is configured."""

    code = "unknown_principal"
    http_status = 400


class NotFound(SignoffError):
    """No approval with that id."""

    code = "not_found"
    http_status = 404


class NotPending(SignoffError):
    """The approval is no longer open for this action."""

    code = "not_pending"
    http_status = 409

    def __init__(
        self,
        message: str | None = None,
        *,
        state: str,
        decided_by: str | None = None,
        decided_at: datetime | None = None,
    ) -> None:
        if message is None:
            message = f"approval is {state}"
            if decided_by:
                message += f" (by {decided_by}"
                if decided_at is not None:
                    message += f" at {decided_at:%Y-%m-%d %H:%M} UTC"
                message += ")"
        super().__init__(message, state=state, decided_by=decided_by, decided_at=decided_at)
        self.state = state
        self.decided_by = decided_by
        self.decided_at = decided_at


class ApprovalExpired(NotPending):
    """The approval expired before this decision arrived."""

    code = "expired"
    http_status = 410


class PolicyChanged(NotPending):
    """The configuration no longer allows this grant (its route, or its approvers, changed
    since it was approved); it was superseded and nothing runs."""

    code = "policy_changed"


class ApprovalChanged(SignoffError):
    """The request changed since it was shown: the shown hash differs from the stored one."""

    code = "approval_changed"
    http_status = 409


class ApprovalCorrupt(SignoffError):
    """The stored request no longer hashes to what was approved: it was altered outside
    signoff, and it is neither approved nor handed out for execution."""

    code = "approval_corrupt"
    http_status = 409


class LeaseExhausted(SignoffError):
    """The claim's lease cannot be extended: it ran out, or reached the longest a claim may
    hold a call."""

    code = "lease_exhausted"
    http_status = 409


class NotAnApprover(SignoffError):
    """You are not an approver for this request."""

    code = "not_an_approver"
    http_status = 403

    def __init__(self, message: str | None = None, *, assignee: str | None = None) -> None:
        if message is None and assignee is not None:
            message = f"not an approver for this request; it is assigned to {assignee}"
        super().__init__(message, assignee=assignee)
        self.assignee = assignee


class SelfApproval(NotAnApprover):
    """The requester may not approve their own request on this route."""

    code = "self_approval"


class EditRefused(SignoffError):
    """The route does not let approvers change these arguments."""

    code = "edit_refused"
    http_status = 403


class GrantRefused(SignoffError):
    """The route does not let its approvers give this standing grant."""

    code = "grant_refused"
    http_status = 403


class Unauthorized(SignoffError):
    """Missing or unknown API key."""

    code = "unauthorized"
    http_status = 401


class ClaimMismatch(SignoffError):
    """The claim token does not match the approval's current claim."""

    code = "claim_mismatch"
    http_status = 409


class DeliveryFailed(SignoffError):
    """An outbound delivery (webhook) did not succeed; the outbox retries it."""

    code = "delivery_failed"


class Undeliverable(DeliveryFailed):
    """The delivery would fail the same way every time (a destination a callback may not
    reach); the outbox buries the job at once instead of retrying it."""

    code = "undeliverable"


class RetryLater(DeliveryFailed):
    """The far side asked to wait (HTTP 429, or 503 with Retry-After); the outbox retries then."""

    code = "retry_later"

    def __init__(self, message: str, delay: float | None = None) -> None:
        super().__init__(message)
        self.delay = delay

    @classmethod
    def after(cls, message: str, retry_after: str | None) -> RetryLater:
        """From an HTTP Retry-After header in seconds; anything else leaves the wait to the
        runner's backoff."""
        value = (retry_after or "").strip()
        return cls(message, delay=float(value) if value.isdigit() else None)


class SignInRefused(SignoffError):
    """This sign-in link does not open a session (already used, expired, or unknown)."""

    code = "sign_in_refused"


class AlreadyVoted(SignoffError):
    """You have already voted on this request."""

    code = "already_voted"
    http_status = 409


class DelegationLoop(SignoffError):
    """The delegation would hand authority around in a circle (alice -> bob -> alice)."""

    code = "delegation_loop"
    http_status = 409


class Overloaded(SignoffError):
    """The server is busy serving people; retry this create after Retry-After seconds."""

    code = "overloaded"
    http_status = 429

    def __init__(self, message: str | None = None, *, retry_after: int = 1) -> None:
        super().__init__(message, retry_after=retry_after)
        self.retry_after = retry_after


class TooManyWaits(Overloaded):
    """This server holds as many waits as it may (`[server] max_waits`, or
    `max_waits_per_tenant` for this tenant); wait again after Retry-After seconds."""

    code = "too_many_waits"
