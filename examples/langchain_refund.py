"""A LangChain agent (`create_agent` with `HumanInTheLoopMiddleware`) whose refund tool is
gated by signoff: the middleware pauses the agent, signoff asks a human, the process ends, and
a new process resumes the agent with the human's decision as the middleware's own.

Start `signoff serve` as in the README's quick start (the example config routes
`payments.*` to alice and bob; tenant `acme`, API key `dev-key`), then:

    pip install './clients/python[langgraph]' langgraph-checkpoint-sqlite
    export SIGNOFF_URL=http://127.0.0.1:8700 SIGNOFF_API_KEY=dev-key
    python examples/langchain_refund.py start                # pauses; prints the approval
    signoff approvals approve ID --hash HASH --as alice      # or: reject ... --note "why"
    python examples/langchain_refund.py resume ID            # a new process resumes it
    python examples/langchain_refund.py resume ID            # again: nothing runs twice

No public URL is needed: `resume ID` reads the decision from signoff. With one, the decision
webhook can resume the agent instead (`signoff_client.langchain.resume_from_webhook`).

The model is scripted (no network, no LLM): it asks for one refund, then tells the customer
what the tool answered. The agent's checkpoints live in ./langchain-refund.sqlite
(LANGCHAIN_DB to change), so the paused agent survives the process.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver

from signoff_client import SignoffClient
from signoff_client.langchain import file_reviews, resume

URL = os.environ.get("SIGNOFF_URL", "http://127.0.0.1:8700")
API_KEY = os.environ.get("SIGNOFF_API_KEY", "dev-key")
DB = os.environ.get("LANGCHAIN_DB", "langchain-refund.sqlite")


@tool
def refund(charge: str, amount: int) -> str:
    """Refund `amount` cents of `charge`."""
    # Stands in for the payment provider; it runs only once a human approved the call.
    print(f"  >> refunding {amount} cents on {charge}")
    return f"refund re_{uuid.uuid4().hex[:10]} of {amount} cents on {charge}"


class ScriptedModel(BaseChatModel):
    """Stands in for an LLM. It reads the conversation rather than a list of replies, so a new
    process resuming the agent gets the right next turn: no tool result yet, it asks for the
    refund; after one, it tells the customer what the tool said."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        # create_agent binds the tools; the script already knows the one it calls.
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            reply = AIMessage(content=f"Update on your refund: {last.content}")
        else:
            call = {"name": "refund", "args": {"charge": "ch_3PqK2L", "amount": 12000}}
            reply = AIMessage(content="", tool_calls=[{**call, "id": "call_refund_1"}])
        return ChatResult(generations=[ChatGeneration(message=reply)])


@contextmanager
def agent() -> Iterator[Any]:
    """The same agent in every process: same tools, same middleware, same checkpoint file."""
    with SqliteSaver.from_conn_string(DB) as saver:
        yield create_agent(
            ScriptedModel(),
            tools=[refund],
            middleware=[HumanInTheLoopMiddleware(interrupt_on={"refund": True})],
            checkpointer=saver,
        )


async def start(thread_id: str) -> None:
    config = {"configurable": {"thread_id": thread_id}}
    with agent() as paused:
        message = HumanMessage("Order 8812 arrived damaged: please refund it.")
        paused.invoke({"messages": [message]}, config)  # stops at the middleware's review
        async with SignoffClient(URL, API_KEY) as client:
            filed = await file_reviews(
                client, paused, config, capability="payments.refund", tools=[refund]
            )
    print(f"thread {thread_id} paused; the refund never ran")
    for record in filed:
        print(f"  filed approval {record.id} ({record.state}): {record.tool['name']}")
        print(f"  signoff approvals approve {record.id} --hash {record.hash} --as alice")
        print(f"  python {sys.argv[0]} resume {record.id}")


async def resume_run(approval_id: str) -> None:
    with agent() as paused:
        async with SignoffClient(URL, API_KEY) as client:
            result = await resume(client, paused, approval_id)
            record = await client.get(approval_id)
    print(f"resume: {result.status} (approval {record.id} is {record.state})")
    if result.detail:
        print(f"  {result.detail}")
    if result.output:
        print(f"  agent: {result.output['messages'][-1].content}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("start").add_argument("--thread", default=f"ticket-{uuid.uuid4().hex[:8]}")
    sub.add_parser("resume").add_argument("approval_id")
    args = parser.parse_args()
    if args.command == "start":
        asyncio.run(start(args.thread))
    else:
        asyncio.run(resume_run(args.approval_id))


if __name__ == "__main__":
    main()
