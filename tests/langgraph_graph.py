"""A small LangGraph graph with an interrupt, shared by the tests and their subprocesses.

It keeps LangChain messages, a ``Decimal`` and a ``datetime`` in its state, so running it on a
store exercises the codec on LangChain and LangGraph values; ``approve`` asks a human.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt


class OrderState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    amount: Decimal
    placed: datetime
    decision: str


def draft(state: OrderState) -> OrderState:
    return {
        "messages": [AIMessage("Refund drafted.")],
        "placed": datetime(2026, 1, 5, 9, tzinfo=UTC),
    }


def price(state: OrderState) -> OrderState:
    return {"amount": Decimal("12.50")}


def approve(state: OrderState) -> OrderState:
    answer = interrupt({"question": "Approve the refund?", "amount": state["amount"]})
    return {"decision": answer, "messages": [HumanMessage(f"Decision: {answer}")]}


def build(checkpointer: Any) -> Any:
    """The compiled graph: START -> draft, price (in parallel) -> approve -> END."""
    graph = StateGraph(OrderState)
    graph.add_node("draft", draft)
    graph.add_node("price", price)
    graph.add_node("approve", approve)
    graph.add_edge(START, "draft")
    graph.add_edge(START, "price")
    graph.add_edge("draft", "approve")
    graph.add_edge("price", "approve")
    graph.add_edge("approve", END)
    return graph.compile(checkpointer=checkpointer)


def sqlite_saver(path: Path, timeout: float = 5.0) -> Any:
    """LangGraph's own SqliteSaver on the file ``path``, its tables set up."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    saver = SqliteSaver(sqlite3.connect(path, check_same_thread=False, timeout=timeout))
    saver.setup()
    return saver


def start(checkpointer: Any, thread_id: str, run_id: str = "run-start") -> dict[str, Any]:
    """Run the graph until it interrupts."""
    config = {"configurable": {"thread_id": thread_id}, "metadata": {"run_id": run_id}}
    return build(checkpointer).invoke({"messages": [HumanMessage("Refund order 42")]}, config)  # type: ignore[no-any-return]


def resume_sync(
    checkpointer: Any, thread_id: str, answer: str, run_id: str = "run-resume"
) -> dict[str, Any]:
    """Resume the interrupted graph with ``answer`` (through the sync API)."""
    config = {"configurable": {"thread_id": thread_id}, "metadata": {"run_id": run_id}}
    return build(checkpointer).invoke(Command(resume=answer), config)  # type: ignore[no-any-return]


async def resume(
    checkpointer: Any, thread_id: str, answer: str, run_id: str = "run-resume"
) -> dict[str, Any]:
    """Resume the interrupted graph with ``answer`` (through the async API)."""
    config = {"configurable": {"thread_id": thread_id}, "metadata": {"run_id": run_id}}
    return await build(checkpointer).ainvoke(Command(resume=answer), config)  # type: ignore[no-any-return]


if __name__ == "__main__":  # python langgraph_graph.py URL OPTIONS_JSON THREAD ANSWER
    import asyncio

    import durability
    from durability.langgraph import DurabilitySaver

    url, options, thread, answer = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
    with durability.open(url, **options) as store:
        final = asyncio.run(resume(DurabilitySaver(store), thread, answer))
    print(
        json.dumps(
            {
                "decision": final["decision"],
                "messages": [m.content for m in final["messages"]],
                "amount": str(final["amount"]),
            }
        )
    )
