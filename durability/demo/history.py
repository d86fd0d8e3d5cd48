"""Six weeks of the fleet's history on an injected clock (:func:`build_demo`): runs that
complete, fail, park and resume, conversations, support sessions, ingests, drains.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from durability.clock import FrozenClock
from durability.demo.runners import assistant_runner, ingest_runner, publish_runner, support_flow
from durability.runs import RunContext, RunControl
from durability.stores.base import Store

Event = tuple[datetime, int, Callable[[], object]]

DEMO_START = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)


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


#: The demo fleet's span, and how often its deployment drains the outbox to the plane.
DEMO_DAYS = 42


DRAIN_EVERY = timedelta(hours=6)


#: Turns of each demo conversation, as days after the fleet's start: idle gaps of days, and
#: the first conversations went quiet weeks ago (past the 30-day waiting horizon).
CONVERSATIONS = (
    (0, 1, 3, 4),
    (2, 9, 10),
    (5, 6, 14, 15, 16),
    (12, 25, 26),
    (20, 22, 34, 36),
    (30, 31, 40, 41.5),
)


#: Support flow sessions: (day, restarts).
SUPPORT_SESSIONS = ((3, 0), (8, 1), (15, 0), (27, 0), (33, 2), (39.5, 0))


#: Ingest runs (their documents exceed the demo plane's state cap), as days after the start.
INGESTS = (11, 33.5)


def build_demo(
    store: Store,
    clock: FrozenClock,
    *,
    start: datetime = DEMO_START,
    days: float = DEMO_DAYS,
    on_tick: Callable[[datetime], None] | None = None,
    seed: int = 7,
) -> None:
    """Write the demo fleet into ``store``; ``clock`` is the store's clock and is moved forward.

    Events happen in time order from ``start`` over ``days`` (runs every 36 hours, conversation
    turns days apart, support sessions, ingest runs); ``on_tick(now)`` is called every
    :data:`DRAIN_EVERY` of the fleet's clock (what a deployment's drain does). Parked runs need a
    store that can hold them (``single_worker=True`` on SQLite); on one that cannot, those runs
    fail with the park's refusal, which is what a real deployment would see.
    """
    rng = random.Random(seed)
    stopping: list[RunControl] = []  # the control of a run an operator stops at its draft

    def pace(ctx: RunContext) -> None:
        clock.advance(timedelta(seconds=rng.randint(5, 90)))
        if stopping and ctx.step == "draft":
            stopping.pop().stop()

    outage: set[str] = set()  # topics whose review fails: the review service is down for them
    publisher = publish_runner(pace, lambda s: s["topic"] in outage)
    talker = assistant_runner(pace)
    flow = support_flow(pace)
    ingester = ingest_runner(pace)
    end = start + timedelta(days=days)
    events: list[Event] = []

    def at(when: datetime, action: Callable[[], object]) -> None:
        if when < end:
            events.append((when, len(events), action))

    def publish_run(n: int) -> Callable[[], None]:
        kind = PUBLISH_KINDS[n % len(PUBLISH_KINDS)]
        topic = f"topic {n}"

        def run() -> None:
            control = RunControl()
            if kind == "stopped":
                stopping.append(control)
            if kind.startswith("failed"):
                outage.add(topic)
            result = publisher.start(
                store,
                {"topic": topic, "needs_approval": kind.startswith("parked")},
                control=control,
            )
            if kind == "failed, resumed":  # the review service is back: resume the failed run
                at(clock() + timedelta(hours=2), lambda: resume_fixed(result.thread_id, topic))
            elif kind == "parked, aborted" and result.park is not None:
                # nobody answered: an operator aborts the run
                at(
                    clock() + timedelta(days=1),
                    lambda: publisher.stop(store, result.thread_id, abort=True),
                )

        return run

    def resume_fixed(thread_id: str, topic: str) -> None:
        outage.discard(topic)
        publisher.resume(store, thread_id)

    conversations: dict[str, list[dict[str, str]]] = {}

    def turn(thread_id: str) -> Callable[[], None]:
        def run() -> None:
            messages = conversations.setdefault(thread_id, [])
            asked = [*messages, {"role": "user", "content": f"question {len(messages) // 2}"}]
            result = talker.start(
                store, {"messages": asked}, thread_id=thread_id, owner="conversations"
            )
            conversations[thread_id] = result.state["messages"]

        return run

    def session(n: int) -> Callable[[], object]:
        ticket = "refund please" if n % 2 else "password reset"
        return lambda: flow.start(store, {"ticket": ticket}, thread_id=f"support-session-{n}")

    def ingest(n: int) -> Callable[[], object]:
        return lambda: ingester.start(store, {"source": f"report-{n}.pdf"})

    for n in range(int(days * 24 // 36)):
        at(start + timedelta(hours=36 * n), publish_run(n))
    for n, turns in enumerate(CONVERSATIONS):
        for day in turns:
            at(start + timedelta(days=day, hours=n), turn(f"conversation-{n}"))
    for n, (day, restarts) in enumerate(SUPPORT_SESSIONS):
        for attempt in range(restarts + 1):  # a restarted session runs again hours later
            at(start + timedelta(days=day, hours=1 + attempt * 3), session(n))
    for n, day in enumerate(INGESTS):
        at(start + timedelta(days=day, hours=2), ingest(n))
    if on_tick is not None:
        tick = start + DRAIN_EVERY
        while tick < end:
            at(tick, (lambda when: lambda: on_tick(when))(tick))
            tick += DRAIN_EVERY
    while events:
        events.sort(key=lambda e: (e[0], e[1]))
        when, _, action = events.pop(0)
        clock.set(max(when, clock()))
        action()
