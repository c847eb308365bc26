"""The error the OpenAI Agents adapter raises itself (beside the server's own,
signoff_client.errors)."""

from __future__ import annotations

from signoff_client.errors import SignoffError

__all__ = ["ResumeRefused"]


class ResumeRefused(SignoffError):
    """The paused run does not match what was approved (a gated call in the stored state
    hashes to something else, or the state is not the one filed); nothing ran."""

    code = "resume_refused"
