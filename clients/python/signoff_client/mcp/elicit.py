"""Approval inside the MCP host: a URL-mode elicitation (MCP 2025-11-25) that offers the host's
user the request's approval page on signoff's web inbox, then a wait for the decision.

When the policy says `ask` with `ask = "elicit"` (the default), a request is pending, and the
host declared URL-mode elicitation (`capabilities.elicitation.url`), the gateway names the
call to the host's user and links `<web_url>/web/approvals/<id>`. There the person signs in
as for any page of the inbox and decides against the hash the page shows; nothing the host
answers decides anything. `accept` only means the user agreed to open the page: the call
then waits for the decision (`SignoffClient.wait`, at most the policy's `elicit_wait`) and
the caller gets what was decided, the approved call run once. `decline` and `cancel` leave
the request pending for its route's approvers, as a host without elicitation does: the
host's user may not be an approver, and an unauthenticated "no" from the agent's own host
must not close a question put to people. A host that cannot elicit, or `ask = "route"`,
gets today's "waiting for approval" answer.

The two protocol revisions ask differently. On 2025-11-25 the gateway sends
`elicitation/create` on the call's own request and, once decided, `notifications/
elicitation/complete`. On 2026-07-28, where a server sends no requests of its own, the
first answer is an `InputRequiredResult` carrying the elicitation under a key naming the
approval; the host retries the call with the user's answer, and the retried call waits. A
retried call finds the same approval by its run id (ask.py), so nothing is kept between the
two legs, and an answer for another approval is asked again.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import anyio
import mcp_types as types
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from signoff_client.client import ApprovalRecord, SignoffClient
from signoff_client.mcp.results import META_KEY

__all__ = ["KEY_PREFIX", "Elicited", "Host", "decided_notice", "elicit", "page_url"]

log = logging.getLogger("signoff_client.mcp")

# The key of a 2026-07-28 input request: the approval's id follows.
KEY_PREFIX = "signoff-approval-"
# Seconds between progress notifications while a call waits (for a caller that asked for
# progress: some hosts keep a call alive only while it reports progress).
PROGRESS_EVERY = 10.0


@dataclass(frozen=True)
class Host:
    """The MCP client whose tools/call is being answered, as far as asking its user goes:
    its session, the call's request id, the protocol revision, whether it asked for
    progress, and (2026-07-28) the answers its retried call carries."""

    session: Any
    request_id: Any = None
    protocol_version: str | None = None
    wants_progress: bool = False
    responses: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, ctx: Any, params: types.CallToolRequestParams) -> Host:
        """The host of one tools/call, from the low-level server's request context."""
        meta = getattr(ctx, "meta", None)
        wants = isinstance(meta, Mapping) and (
            meta.get("progressToken") is not None or meta.get("progress_token") is not None
        )
        return cls(
            session=ctx.session,
            request_id=ctx.request_id,
            protocol_version=getattr(ctx, "protocol_version", None),
            wants_progress=wants,
            responses=dict(params.input_responses or {}),
        )

    @property
    def can_open_url(self) -> bool:
        """Whether the host declared URL-mode elicitation (a bare `elicitation: {}`, from
        before modes existed, is form mode only)."""
        capabilities = getattr(self.session, "client_capabilities", None)
        elicitation = capabilities.elicitation if capabilities is not None else None
        return elicitation is not None and elicitation.url is not None

    @property
    def per_request(self) -> bool:
        """2026-07-28: input requests ride the result, the host retries the call."""
        return self.protocol_version in MODERN_PROTOCOL_VERSIONS


@dataclass(frozen=True)
class Elicited:
    """After the elicitation: the request as it now stands, and, while it is still pending,
    why (in words, for the "waiting" answer)."""

    record: ApprovalRecord
    note: str | None = None


def page_url(web_url: str, approval_id: str) -> str:
    """The request's approval page on signoff's web inbox (channels/web/inbox.py)."""
    return f"{web_url.rstrip('/')}/web/approvals/{quote(approval_id, safe='')}"


def message(record: ApprovalRecord, wait: float) -> str:
    """What the host shows its user beside the link: the call, who decides, how long it
    waits. Short: hosts show it in a dialog, and the page shows the call in full."""
    shown = record.presentation if isinstance(record.presentation, Mapping) else {}
    title = shown.get("title") or (record.tool or {}).get("name", "a tool call")
    return (
        f"An agent's call needs a human's approval before it runs: {title}. Open the approval "
        f"page to review the exact call (sha256:{record.hash[:12]}) and approve or reject it "
        f"there; sign in to signoff if asked. Who decides: {record.assignee}. The call waits "
        f"up to {_duration(wait)} for the decision (approval {record.id})."
    )


async def elicit(
    host: Host, signoff: SignoffClient, record: ApprovalRecord, *, web_url: str, wait: float
) -> Elicited | types.InputRequiredResult:
    """Offer the host's user the pending `record`'s approval page and wait for the decision;
    on 2026-07-28, first the `InputRequiredResult` that asks the host to offer it."""
    url = page_url(web_url, record.id)
    said = message(record, wait)
    deadline = anyio.current_time() + wait  # one wait for the host's answer and the decision
    if host.per_request:
        answer = host.responses.get(KEY_PREFIX + record.id)
        if answer is None:  # the first leg: the host asks its user, then calls again
            request = types.ElicitRequest(
                params=types.ElicitRequestURLParams(message=said, url=url)
            )
            return types.InputRequiredResult(input_requests={KEY_PREFIX + record.id: request})
        action = getattr(answer, "action", "cancel")  # not an elicitation's answer: cancel
        elicitation_id = None
    else:
        elicitation_id = f"signoff-{record.id}-{secrets.token_hex(4)}"
        try:
            with anyio.fail_after(wait):
                answer = await host.session.send_request(
                    types.ElicitRequest(
                        params=types.ElicitRequestURLParams(
                            message=said, url=url, elicitation_id=elicitation_id
                        )
                    ),
                    types.ElicitResult,
                    metadata=ServerMessageMetadata(related_request_id=host.request_id),
                )
        except TimeoutError:
            return Elicited(record, _unanswered(f"did not answer within {_duration(wait)}"))
        except Exception as exc:  # no back-channel, an error from the host: the route only
            log.info("could not offer the approval page of %s: %r", record.id, exc)
            return Elicited(record, _unanswered(f"could not show it ({type(exc).__name__})"))
        action = answer.action
    if action != "accept":
        log.info("the MCP host's user answered %s to the approval page of %s", action, record.id)
        return Elicited(record, _not_opened(action))
    log.info("the MCP host's user opened the approval page of %s: waiting", record.id)
    decided = await _wait(host, signoff, record, max(deadline - anyio.current_time(), 0.0))
    if decided.state == "pending":
        return Elicited(
            decided,
            f"The approval page was opened in the MCP host, but no decision came within "
            f"{_duration(wait)}; the request stays open.",
        )
    if elicitation_id is not None:
        try:  # the host may close what it showed; nothing depends on it
            await host.session.send_elicit_complete(
                elicitation_id, related_request_id=host.request_id
            )
        except Exception as exc:
            log.debug("could not send elicitation/complete for %s: %r", record.id, exc)
    return Elicited(decided)


async def _wait(
    host: Host, signoff: SignoffClient, record: ApprovalRecord, wait: float
) -> ApprovalRecord:
    """`signoff.wait` for the decision, reporting progress meanwhile to a caller that asked.
    (`first` and `most` pace its polling against a server that holds no waits, as the
    gateway's `--wait` does: a person at the page expects the call to move within seconds.)"""
    if not host.wants_progress:
        return await signoff.wait(record.id, wait, first=0.25, most=2.0)
    decided: ApprovalRecord = record
    async with anyio.create_task_group() as group:

        async def beat() -> None:
            beats = 0
            while True:
                await anyio.sleep(PROGRESS_EVERY)
                beats += 1
                try:
                    await host.session.report_progress(
                        beats, None, f"waiting for {record.assignee} to decide {record.id}"
                    )
                except Exception as exc:  # the caller went away; the wait goes on
                    log.debug("could not report progress: %r", exc)
                    return

        group.start_soon(beat)
        try:
            decided = await signoff.wait(record.id, wait, first=0.25, most=2.0)
        finally:
            group.cancel_scope.cancel()
    return decided


def decided_notice(result: types.CallToolResult) -> types.CallToolResult:
    """An approved call that ran while the caller waited: its result, after a line saying
    who approved it (the model reads the text; the meta says it for programs)."""
    meta = (result.meta or {}).get(META_KEY) or {}
    if meta.get("state") not in ("executed", "failed"):
        return result
    said = (
        f"[signoff] Approved by {meta.get('decided_by') or 'a human'} (approval "
        f"{meta.get('id')}) while this call waited; the call ran once. Its result follows."
    )
    notice = types.TextContent(type="text", text=said)
    return result.model_copy(update={"content": [notice, *result.content]})


def _not_opened(action: str) -> str:
    how = "declined" if action == "decline" else "dismissed"
    return (
        f"The MCP host's user {how} opening the approval page: the request stays pending "
        "for its approvers, who see it wherever signoff shows them requests."
    )


def _unanswered(what: str) -> str:
    return (
        f"The MCP host was asked to open the approval page but {what}; the request stays "
        "pending for its approvers."
    )


def _duration(seconds: float) -> str:
    if seconds >= 120 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"
