"""The errors a signoff server reports, as classes an agent catches.

The server answers an error as `{"error": {"code", "message", ...}}`; `error_from_code`
rebuilds the class of that code here, so `except NotPending` works the same in an agent as in
the server. The classes, their codes and their parents are the server's own (bot/errors.py);
tests/unit/test_client_package.py checks that the two hierarchies agree.
"""

from __future__ import annotations

from typing import Any


class SignoffError(Exception):
    """signoff failed."""

    code = "error"

    def __init__(self, message: str | None = None, **details: Any) -> None:
        self.message = message or (self.__doc__ or "").strip()
        self.details = details
        super().__init__(self.message)


class InvalidRequest(SignoffError):
    """The approval request is invalid."""

    code = "invalid_request"

    def __init__(self, message: str | None = None, *, fields: list[dict[str, Any]] | None = None):
        super().__init__(message, fields=fields or [])
        self.fields = fields or []


class MalformedJson(InvalidRequest):
    """The body is not well-formed JSON (or repeats a key, which JSON leaves ambiguous)."""

    code = "malformed_json"


class RequestTooLarge(InvalidRequest):
    """The approval request is larger than the server's limit."""

    code = "too_large"


class NotCanonical(InvalidRequest):
    """The value cannot be expressed as RFC 8785 canonical JSON, so it cannot be hashed."""

    code = "not_canonical"


class UnknownTenant(InvalidRequest):
    """No tenant has that name."""

    code = "unknown_tenant"


class NoRoute(InvalidRequest):
    """No route of the tenant covers the capability."""

    code = "no_route"


class ApproversOutsideRoute(InvalidRequest):
    """The request names approvers its route does not allow."""

    code = "approvers_outside_route"


class UnknownPrincipal(SignoffError):
    """No principal has that name."""

    code = "unknown_principal"


class NotFound(SignoffError):
    """No approval with that id (for this API key's tenant)."""

    code = "not_found"


class NotPending(SignoffError):
    """The approval is no longer open for this action."""

    code = "not_pending"

    def __init__(
        self, message: str | None = None, *, state: str = "unknown", decided_by: str | None = None
    ) -> None:
        super().__init__(message or f"approval is {state}", state=state, decided_by=decided_by)
        self.state = state
        self.decided_by = decided_by


class ApprovalExpired(NotPending):
    """The approval expired before this decision arrived."""

    code = "expired"


class PolicyChanged(NotPending):
    """The configuration no longer allows this grant; it was superseded and nothing runs."""

    code = "policy_changed"


class ApprovalChanged(SignoffError):
    """The request changed since it was shown: the shown hash differs from the stored one."""

    code = "approval_changed"


class ApprovalCorrupt(SignoffError):
    """The stored request no longer hashes to what was approved; nothing is handed out."""

    code = "approval_corrupt"


class LeaseExhausted(SignoffError):
    """The claim's lease cannot be extended."""

    code = "lease_exhausted"


class NotAnApprover(SignoffError):
    """You are not an approver for this request."""

    code = "not_an_approver"

    def __init__(self, message: str | None = None, *, assignee: str | None = None) -> None:
        super().__init__(message, assignee=assignee)
        self.assignee = assignee


class SelfApproval(NotAnApprover):
    """The requester may not approve their own request on this route."""

    code = "self_approval"


class EditRefused(SignoffError):
    """The route does not let approvers change these arguments."""

    code = "edit_refused"


class GrantRefused(SignoffError):
    """The route does not let its approvers give this standing grant."""

    code = "grant_refused"


class Unauthorized(SignoffError):
    """Missing or unknown API key."""

    code = "unauthorized"


class ClaimMismatch(SignoffError):
    """The claim token does not match the approval's current claim."""

    code = "claim_mismatch"


class BadWebhookSignature(SignoffError):
    """The webhook's signature, timestamp or id does not verify."""

    code = "bad_signature"


class AlreadyVoted(SignoffError):
    """You have already voted on this request."""

    code = "already_voted"


class DelegationLoop(SignoffError):
    """The delegation would hand authority around in a circle."""

    code = "delegation_loop"


class Overloaded(SignoffError):
    """The server is busy serving people and refused this call (HTTP 429); it changed nothing.
    SignoffClient retries it after Retry-After and raises this once its budget is spent."""

    code = "overloaded"

    def __init__(self, message: str | None = None, *, retry_after: float | None = None) -> None:
        super().__init__(message, retry_after=retry_after)
        self.retry_after = retry_after


class TooManyWaits(Overloaded):
    """The server holds as many waits as it may (`[server] max_waits`, or
    `max_waits_per_tenant` for this tenant); `SignoffClient.wait` waits Retry-After and
    waits again, within its deadline."""

    code = "too_many_waits"


class StoreUnavailable(SignoffError):
    """The server's database is unreachable or too busy to answer; nothing was changed."""

    code = "store_unavailable"


def _subclasses(cls: type[SignoffError]) -> list[type[SignoffError]]:
    found = [cls]
    for sub in cls.__subclasses__():
        found += _subclasses(sub)
    return found


def error_from_code(code: str, message: str, details: dict[str, Any] | None = None) -> SignoffError:
    """The error a server reported, as the class of its code (SignoffError, keeping the code,
    for one this package does not know)."""
    details = details or {}
    cls = {c.code: c for c in _subclasses(SignoffError)}.get(code, SignoffError)
    error: SignoffError
    if issubclass(cls, NotPending):
        error = cls(
            message,
            state=str(details.get("state") or "unknown"),
            decided_by=details.get("decided_by"),
        )
    elif issubclass(cls, NotAnApprover):
        error = cls(message, assignee=details.get("assignee"))
    elif issubclass(cls, InvalidRequest):
        error = cls(message, fields=details.get("fields"))
    elif issubclass(cls, Overloaded):
        retry_after = details.get("retry_after")
        error = cls(message, retry_after=retry_after if isinstance(retry_after, int) else None)
    else:
        error = cls(message)
        if cls is SignoffError:
            error.code = code
    error.details = details
    return error
