"""The demo fleet's runners: a publishing runner that asks for approval, an assistant on
conversation threads, a support flow that owns agent threads, and an ingest runner with large
states. Each step calls ``pace`` so the demo can move its clock.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from durability.runs import AgentNode, Flow, RunContext, Runner

#: Called at the start of every demo step: the demo moves its clock there.
Pace = Callable[[RunContext], None]


State = dict[str, Any]


def _no_pace(ctx: RunContext) -> None:
    """Real runs take their own time."""


def publish_runner(
    pace: Pace = _no_pace, review_down: Callable[[State], bool] | None = None
) -> Runner:
    """The publishing runner: fetch, plan, draft, review, approve (may park), publish.

    ``review_down(state)`` says whether the review service is down for that run (it fails).
    """

    def note(name: str) -> Callable[[State, RunContext], State]:
        def step(state: State, ctx: RunContext) -> State:
            pace(ctx)
            if name == "review" and review_down is not None and review_down(state):
                raise TimeoutError("the review service did not answer")
            return {**state, "notes": [*state.get("notes", []), f"{name} done"]}

        step.__name__ = name
        return step

    def approve(state: State, ctx: RunContext) -> State:
        pace(ctx)
        if not state.get("needs_approval"):
            return state
        answer = ctx.interrupt(
            "needs a human approval", {"draft": state["topic"]}, deadline=timedelta(days=5)
        )
        return {
            **state,
            "approved": bool(answer.get("approved")) if isinstance(answer, dict) else bool(answer),
        }

    return Runner(
        "publish",
        [note("fetch"), note("plan"), note("draft"), note("review"), approve, note("publish")],
    )


def assistant_runner(pace: Pace = _no_pace) -> Runner:
    """A conversation's agent: one reply per turn, on the conversation's thread."""

    def reply(state: State, ctx: RunContext) -> State:
        pace(ctx)
        messages = [
            *state.get("messages", []),
            {"role": "assistant", "content": f"answer {len(state.get('messages', []))}"},
        ]
        return {**state, "messages": messages}

    return Runner("assistant", [reply])


def support_flow(pace: Pace = _no_pace) -> Flow:
    """A support flow: its triage agent runs on a thread per flow run (the flow owns it)."""

    def classify(state: State, ctx: RunContext) -> State:
        pace(ctx)
        return {**state, "category": "billing" if "refund" in state["ticket"] else "general"}

    def intake(state: State, ctx: RunContext) -> State:
        pace(ctx)
        return {**state, "received": True}

    def resolve(state: State, ctx: RunContext) -> State:
        pace(ctx)
        return {**state, "resolved": state["category"]}

    triage = Runner("triage", [classify], retention={"finished": "1d"})
    return Flow(
        "support",
        [intake, AgentNode("triage", triage, "{flow_run_id}-triage"), resolve],
        retention={"waiting": "14d", "finished": "2d"},
    )


def ingest_runner(pace: Pace = _no_pace, document_bytes: int = 150_000) -> Runner:
    """The ingest runner: fetch a document, summarise it, done.

    The fetched document rides in the state, so every row after ``fetch`` is about
    ``document_bytes`` big: over the demo plane's state cap, the rows the plane refuses.
    """

    def fetch(state: State, ctx: RunContext) -> State:
        pace(ctx)
        line = f"{state['source']}: quarterly figures, appendix and scanned pages. "
        return {**state, "document": (line * (document_bytes // len(line) + 1))[:document_bytes]}

    def summarise(state: State, ctx: RunContext) -> State:
        pace(ctx)
        return {**state, "summary": state["document"][:120]}

    return Runner("ingest", [fetch, summarise])
