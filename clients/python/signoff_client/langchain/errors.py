"""The error the LangChain adapter raises itself (beside the server's own,
signoff_client.errors)."""

from __future__ import annotations

from signoff_client.errors import SignoffError

__all__ = ["ResumeRefused"]


class ResumeRefused(SignoffError):
    """The paused agent does not match what was filed or approved (an action in the
    checkpoint hashes to something else), or signoff's decision is one the review does not
    allow and has no stand-in; nothing ran."""

    code = "resume_refused"
