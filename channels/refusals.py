"""What a chat user reads when a click or reply decided nothing: exactly why, in plain text.

Shared by every chat surface; each escapes the result for its own markup.
"""

from __future__ import annotations

from bot.errors import ApprovalChanged, ApprovalExpired, NotAnApprover, NotPending, SignoffError
from bot.model import State
from bot.routing import Directory


def refusal_text(error: SignoffError, directory: Directory) -> str:
    if isinstance(error, ApprovalExpired):
        return f"{error.message[0].upper()}{error.message[1:]}."
    if isinstance(error, NotPending):
        if error.decided_by and error.state in (State.APPROVED, State.REJECTED):
            who = directory.describe(error.decided_by).split(" (")[0]
            when = f" at {error.decided_at:%H:%M} UTC" if error.decided_at else ""
            return f"Already {error.state} by {who}{when}."
        return f"This request is no longer open: it is {error.state.replace('_', ' ')}."
    if isinstance(error, ApprovalChanged):
        return (
            "This card is out of date: the request changed since it was shown, so nothing "
            "was decided. Review it again."
        )
    if type(error) is NotAnApprover and error.assignee:
        return f"You are not an approver for this request; it is assigned to {error.assignee}."
    return error.message
