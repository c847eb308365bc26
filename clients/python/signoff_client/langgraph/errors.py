"""The errors the LangGraph adapter raises in a node, as classes a node catches (beside the
server's own, signoff_client.errors)."""

from __future__ import annotations

from signoff_client.errors import SignoffError

__all__ = ["CallMismatch", "ClaimLost", "GatedCallFailed", "NotApproved"]


class NotApproved(SignoffError):
    """The decision is not an approval: the call must not run."""

    code = "langgraph_not_approved"


class ClaimLost(SignoffError):
    """This run no longer holds the claim on the approved call (another caller holds it, or its
    lease ran out), so it does not run the call."""

    code = "langgraph_claim_lost"


class GatedCallFailed(SignoffError):
    """The gated call already ran, in an earlier execution of this node, and failed."""

    code = "langgraph_gated_call_failed"


class CallMismatch(SignoffError):
    """The claimed call is not the call the thread asked for, or does not hash to the hash
    the human approved."""

    code = "langgraph_claim_mismatch"
