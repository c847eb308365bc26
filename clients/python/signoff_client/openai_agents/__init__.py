"""signoff for the OpenAI Agents SDK: a tool with `needs_approval` asks a human through
signoff, the turn ends, and a later process (on the decision webhook) runs exactly the approved
call, once, and tells the model about a rejection.

    from signoff_client import SignoffClient
    from signoff_client.openai_agents import file_interruptions, resume_from_webhook

    @function_tool(needs_approval=True)
    def refund(charge: str, amount: int) -> str: ...

    # turn 1: the run stops at the gated call; file it and end the turn
    result = await Runner.run(agent, "Refund order 8812")
    await file_interruptions(client, result, run_id="conv-42", capability="payments.refund")

    # later, any process, on the decision webhook (headers + raw body as received)
    resumed = await resume_from_webhook(client, agent, headers, body, webhook_secret)
    # resumed.status: "resumed" | "waiting" | "already_resumed" | "refused" | "ignored"
    # resumed.result: the resumed RunResult (file its interruptions again if it has some)

Each interruption becomes one signoff request: `tool` is the interruption's tool name and its
parsed arguments, and `resume` carries the serialised `RunState` (or, with a `state_store`, a
key into it) with the interruption's call id. On resume the state is loaded, every gated call
in it is checked to hash to the hash its approval was decided on, approved calls are claimed
(one resumer wins; the others get NotPending and do nothing), approved or rejected in the
state, and the run goes on: the SDK runs each approved tool once and gives the model the
rejection text for the others. Each claimed call is completed with the tool's output as soon as
the tool returns.

A call approved as edited runs the approver's revision, and its output tells the model the
call was replaced and what changed; a call answered instead is rejected in the state with
the person's answer as the text the model reads (it never runs).

The modules: `filing` (turn 1), `run_state` (where the paused state lives), `resume` (the
resume helpers), `calls` (the gated calls while the run goes on), `edits` (running a
revision), `errors`; the claim, check
and complete steps they share with the LangGraph adapter are `signoff_client.lifecycle`.

Importing this package imports the `agents` package (the `openai-agents` extra);
`import signoff_client` alone does not.
"""

from signoff_client.openai_agents.calls import GatedCall, idempotency_key
from signoff_client.openai_agents.errors import ResumeRefused
from signoff_client.openai_agents.filing import call_of, default_presentation, file_interruptions
from signoff_client.openai_agents.resume import ResumeResult, resume, resume_from_webhook
from signoff_client.openai_agents.run_state import FileStateStore, StateStore

# Deprecated: the name the LangGraph adapter and this one now share is `ResumeResult`. Kept so
# existing code keeps working.
ResumeOutcome = ResumeResult

__all__ = [
    "FileStateStore",
    "GatedCall",
    "ResumeOutcome",
    "ResumeRefused",
    "ResumeResult",
    "StateStore",
    "call_of",
    "default_presentation",
    "file_interruptions",
    "idempotency_key",
    "resume",
    "resume_from_webhook",
]
