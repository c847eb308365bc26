"""signoff for LangGraph: gate a tool call inside a node on a human decision that may come days
later, and run exactly the approved call, once.

In a node, call `signoff_interrupt(...)` where you would call `interrupt()`::

    def refund(state):
        decision = signoff_interrupt(
            tool={"name": "refund", "arguments": {"charge": state["charge"], "amount": 12000}},
            capability="payments.refund",
            presentation={"title": "Refund €120.00 to Zoë"},
        )
        if not decision.approved:
            return {"outcome": decision.state}          # rejected, expired, ...
        result = decision.run(lambda args: stripe_refund(**args, key=decision.idempotency_key))
        return {"outcome": "refunded", "refund": result}

The first time, it files a signoff request and pauses the graph (`interrupt()`); the process
may exit. When the decision webhook arrives, `resume_from_webhook(graph, headers, body, secret,
gate=gate)` (or `resume(graph, approval_id, gate=gate)`) claims the approved call (one resumer
wins) and resumes the thread with `Command(resume=...)` carrying the decision. LangGraph
re-runs the node from its start: `signoff_interrupt` files again, which signoff answers with
the same request (same run, same call: nothing new is filed), and returns the `Decision`.
`decision.run(fn)` runs `fn` on the *stored* arguments (the claim's, not the node's), then
records the outcome with signoff; a later re-run of the node (a second interrupt, a retry)
finds the call finished and does not run it again.

Where the signoff URL and key come from: `gate=SignoffGate(...)`, else a `SignoffGate` in
`config["configurable"]["signoff"]` (an object, which LangGraph never writes to the
checkpoint; the resume helpers put theirs there), else SIGNOFF_URL and SIGNOFF_API_KEY. Never
put the API key as a string in `configurable`: LangGraph copies string values there into the
checkpoint's metadata.

Works with any checkpointer: the resume helpers use the graph's async API, or its sync API in a
worker thread when the checkpointer is sync-only (SqliteSaver). See docs/integrations.md.

The modules: `interrupt` (in the node), `pause` (which pause a call is: its default run id),
`decision` (running the approved call), `resume` (the resume helpers), `gate`, `errors`, and
`runner` (sync and async); the claim, check and complete steps they share with the OpenAI
Agents adapter are `signoff_client.lifecycle`.
"""

from signoff_client.langgraph.decision import Decision
from signoff_client.langgraph.errors import CallMismatch, ClaimLost, GatedCallFailed, NotApproved
from signoff_client.langgraph.gate import SignoffGate
from signoff_client.langgraph.interrupt import asignoff_interrupt, signoff_interrupt
from signoff_client.langgraph.resume import ResumeResult, resume, resume_from_webhook

# Deprecated: the name the OpenAI Agents adapter and this one now share is `resume`. Kept so
# existing code keeps working.
resume_thread = resume

__all__ = [
    "CallMismatch",
    "ClaimLost",
    "Decision",
    "GatedCallFailed",
    "NotApproved",
    "ResumeResult",
    "SignoffGate",
    "asignoff_interrupt",
    "resume",
    "resume_from_webhook",
    "resume_thread",
    "signoff_interrupt",
]
