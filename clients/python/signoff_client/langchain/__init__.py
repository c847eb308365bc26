"""signoff as the human side of LangChain v1's `HumanInTheLoopMiddleware`, for agents built
with `create_agent`: each action the middleware pauses on becomes a signoff request, and
signoff's decisions resume the graph as the middleware's own decisions, from any process,
days later, with each approved tool running once.

    agent = create_agent(model, tools=[send_email], checkpointer=saver,
                         middleware=[HumanInTheLoopMiddleware(interrupt_on={"send_email": True})])
    config = {"configurable": {"thread_id": "conv-42"}}
    await agent.ainvoke({"messages": [...]}, config)        # pauses at the middleware
    await file_reviews(client, agent, config, capability="tools.email")   # end the turn

    # later, any process, on the decision webhook (headers + raw body as received)
    resumed = await resume_from_webhook(client, agent, headers, body, webhook_secret)

How signoff's decisions map onto the middleware's (`langchain.agents.middleware`):

| signoff | the middleware's decision |
| --- | --- |
| approved | `{"type": "approve"}` (the approval is claimed first: one resumer wins) |
| approved as edited | `{"type": "edit", "edited_action": {"name", "args": <the revision>}}` |
| answered | `{"type": "respond", "message": <the answer>}` |
| rejected, expired, cancelled, superseded | `{"type": "reject", "message": <why>}` |

A review's `allowed_decisions` are honoured: an edit of a tool that does not allow edits is
not run (the grant is withdrawn and the model is told, as a rejection, why); an answer for a
tool that does not allow `respond` reaches the model as a rejection carrying the answer; a
tool that allows no rejection cannot be resumed with one (ResumeRefused). Both interrupt
modes are read: `batched` (one `HITLRequest` per model turn, resumed with
`{"decisions": [...]}` once every action of it is decided) and `per_call` (one
`ToolApprovalRequest` per call, resumed with its single decision).

Importing this package imports `langchain` (in the `langgraph` extra).
"""

from signoff_client.langchain.errors import ResumeRefused
from signoff_client.langchain.filing import MARKER, file_reviews, reviews_of
from signoff_client.langchain.resume import ResumeResult, resume, resume_from_webhook

__all__ = [
    "MARKER",
    "ResumeRefused",
    "ResumeResult",
    "file_reviews",
    "resume",
    "resume_from_webhook",
    "reviews_of",
]
