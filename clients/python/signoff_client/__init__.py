"""signoff-client: the agent side of signoff.

Ask for a human decision, let the turn end, and later claim and run exactly the approved call,
once. Needs only aiohttp, rfc8785 and standardwebhooks; the integrations (`signoff_client.mcp`,
`signoff_client.openai_agents`, `signoff_client.langgraph`) load their frameworks only when
imported. See docs/integrations.md in the signoff repository.
"""

from signoff_client.client import ApprovalRecord, Claim, SignoffClient
from signoff_client.errors import (
    AlreadyVoted,
    ApprovalChanged,
    ApprovalCorrupt,
    ApprovalExpired,
    BadWebhookSignature,
    ClaimMismatch,
    InvalidRequest,
    LeaseExhausted,
    NotAnApprover,
    NotCanonical,
    NotFound,
    NotPending,
    Overloaded,
    PolicyChanged,
    SignoffError,
    StoreUnavailable,
    TooManyWaits,
    Unauthorized,
)
from signoff_client.hashing import approval_hash, canonical_json, record_hash
from signoff_client.webhooks import new_secret, verify_webhook

__all__ = [
    "AlreadyVoted",
    "ApprovalChanged",
    "ApprovalCorrupt",
    "ApprovalExpired",
    "ApprovalRecord",
    "BadWebhookSignature",
    "Claim",
    "ClaimMismatch",
    "InvalidRequest",
    "LeaseExhausted",
    "NotAnApprover",
    "NotCanonical",
    "NotFound",
    "NotPending",
    "Overloaded",
    "PolicyChanged",
    "SignoffClient",
    "SignoffError",
    "StoreUnavailable",
    "TooManyWaits",
    "Unauthorized",
    "approval_hash",
    "canonical_json",
    "new_secret",
    "record_hash",
    "verify_webhook",
]
