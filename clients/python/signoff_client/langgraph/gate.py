"""`SignoffGate`: where signoff is, for the nodes and the resume helpers."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from signoff_client.client import SignoffClient

if TYPE_CHECKING:
    from signoff_client.langgraph.decision import Decision
    from signoff_client.langgraph.resume import ResumeResult

__all__ = ["SignoffGate"]


class SignoffGate:
    """Where signoff is, for the nodes and the resume helpers. Holds no connection: each
    operation opens a short-lived client, so a gate works from any thread and event loop
    (LangGraph runs sync nodes in worker threads)."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 30.0,
        poll_first: float = 0.5,
        poll_most: float = 10.0,
    ) -> None:
        """`timeout` and `poll_*` are the clients' (`SignoffClient`): `poll_*` only matter
        when `resume(..., wait=...)` meets a server without waits, which is polled."""
        if not base_url or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"SignoffGate needs an http(s) URL, got {base_url!r}")
        if not api_key:
            raise ValueError("SignoffGate needs the tenant's API key")
        self.base_url = base_url
        self._api_key = api_key
        self.timeout = timeout
        self.poll_first, self.poll_most = poll_first, poll_most

    @classmethod
    def from_env(cls) -> SignoffGate:
        """The gate SIGNOFF_URL and SIGNOFF_API_KEY describe."""
        url, key = os.environ.get("SIGNOFF_URL"), os.environ.get("SIGNOFF_API_KEY")
        if not url or not key:
            raise RuntimeError(
                "no signoff gate: pass gate=SignoffGate(url, api_key), put one in "
                'config["configurable"]["signoff"], or set SIGNOFF_URL and SIGNOFF_API_KEY'
            )
        return cls(url, key)

    def __repr__(self) -> str:  # never the key
        return f"SignoffGate({self.base_url!r})"

    def client(self) -> SignoffClient:
        return SignoffClient(
            self.base_url,
            self._api_key,
            timeout=self.timeout,
            poll_first=self.poll_first,
            poll_most=self.poll_most,
        )

    # The shortcuts below import their modules when called: those modules import the gate.

    def interrupt(self, **request: Any) -> Decision:
        """`signoff_interrupt(..., gate=self)`."""
        from signoff_client.langgraph.interrupt import signoff_interrupt

        return signoff_interrupt(**request, gate=self)

    async def ainterrupt(self, **request: Any) -> Decision:
        """`asignoff_interrupt(..., gate=self)`."""
        from signoff_client.langgraph.interrupt import asignoff_interrupt

        return await asignoff_interrupt(**request, gate=self)

    async def resume(self, graph: Any, approval_id: str, **options: Any) -> ResumeResult:
        """`resume(graph, approval_id, gate=self, ...)`."""
        from signoff_client.langgraph.resume import resume

        return await resume(graph, approval_id, gate=self, **options)

    async def resume_webhook(
        self, graph: Any, headers: Mapping[str, str], body: bytes, secret: Any, **options: Any
    ) -> ResumeResult:
        """`resume_from_webhook(graph, headers, body, secret, gate=self, ...)`."""
        from signoff_client.langgraph.resume import resume_from_webhook

        return await resume_from_webhook(graph, headers, body, secret, gate=self, **options)
