"""A demo fleet of real runs, written by the durable runner (:mod:`durability.runs`).

:func:`build_demo` drives the runners below against a store whose clock it moves forward, so
the fleet spreads over days: publishing runs that completed, failed (one of them resumed to
completion afterwards), were stopped mid-run, parked on an approval (one of them aborted by an
operator), conversations whose turns come days apart, and support flows that own a session
thread per flow run and declare their own retention. Every checkpoint, park, lease and ledger
mark in it was written by the runner itself, so every view of the bundle shows true data.

The runners are importable for ``durability resume``::

    durability resume sqlite:///durability-out/demo.db THREAD --single-worker \\
        --runner durability.demo:publish --value '{"approved": true}'
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from durability.clock import FrozenClock
from durability.runs import AgentNode, Flow, RunContext, RunControl, Runner
from durability.stores.base import Store

DEMO_START = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)

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
            "needs a human approval", {"draft": state["topic"]}, deadline=timedelta(days=3)
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


publish = publish_runner()

#: What happens to the demo's publishing runs, in turn.
PUBLISH_KINDS = (
    "completed",
    "parked",
    "completed",
    "stopped",
    "failed, resumed",
    "completed",
    "parked, aborted",
    "failed",
    "completed",
    "parked",
    "completed",
    "failed",
)
assistant = assistant_runner()
support = support_flow()


def build_demo(store: Store, clock: FrozenClock, *, runs: int = 12, seed: int = 7) -> None:
    """Write the demo fleet into ``store``; ``clock`` is the store's clock and is moved forward.

    Parked runs need a store that can hold them (``single_worker=True`` on SQLite); on one that
    cannot, those runs fail with the park's refusal, which is what a real deployment would see.
    """
    rng = random.Random(seed)
    stopping: list[RunControl] = []  # the control of a run an operator stops at its draft

    def pace(ctx: RunContext) -> None:
        clock.advance(timedelta(seconds=rng.randint(5, 90)))
        if stopping and ctx.step == "draft":
            stopping.pop().stop()

    outage: set[str] = set()  # topics whose review fails: the review service is down for them
    publisher = publish_runner(pace, lambda s: s["topic"] in outage)
    for n in range(runs):
        kind = PUBLISH_KINDS[n % len(PUBLISH_KINDS)]
        clock.set(DEMO_START + timedelta(hours=9 * n))
        topic = f"topic {n}"
        control = RunControl()
        if kind == "stopped":
            stopping.append(control)
        if kind.startswith("failed"):
            outage.add(topic)
        result = publisher.start(
            store, {"topic": topic, "needs_approval": kind.startswith("parked")}, control=control
        )
        if kind == "failed, resumed":
            clock.advance(timedelta(hours=2))  # the review service is back: resume the failed run
            outage.discard(topic)
            publisher.resume(store, result.thread_id)
        elif kind == "parked, aborted" and result.park is not None:
            clock.advance(timedelta(days=1))  # nobody answered: an operator aborts the run
            publisher.stop(store, result.thread_id, abort=True)

    talker = assistant_runner(pace)
    for n in range(3):
        thread_id = f"conversation-{n}"
        messages: list[dict[str, str]] = []
        for turn in range(4):
            clock.set(DEMO_START + timedelta(days=turn * (n + 1), hours=n))  # idle gaps of days
            messages = [*messages, {"role": "user", "content": f"question {turn}"}]
            result = talker.start(
                store, {"messages": messages}, thread_id=thread_id, owner="conversations"
            )
            messages = result.state["messages"]

    flow = support_flow(pace)
    for n in range(2):
        for attempt in range(n + 1):  # the second session is restarted once
            clock.set(DEMO_START + timedelta(days=2 + n, hours=attempt * 3))
            flow.start(
                store,
                {"ticket": "refund please" if n else "password reset"},
                thread_id=f"support-session-{n}",
            )
